"""PNGs for the tests: a tiny writer (8-bit RGB) that makes a figure for a run folder, and a count of a
colour's pixels in a browser's screenshot (Pillow decodes it: a pure-Python decoder took 40 s of the
Chromium test for its two tall screenshots)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_rgb(pixels: list[list[tuple[int, int, int]]]) -> bytes:
    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def bar_chart(values: list[int], colour: tuple[int, int, int], size: tuple[int, int] = (240, 120)) -> bytes:
    """Bars of height proportional to values on white, in one colour."""
    width, height = size
    top = max(values + [1])
    bar = width // (2 * len(values) + 1)
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    for i, value in enumerate(values):
        bar_height = max(4, int((height - 10) * value / top))
        for y in range(height - bar_height, height):
            for x in range(bar * (2 * i + 1), bar * (2 * i + 2)):
                pixels[y][x] = colour
    return write_rgb(pixels)


def count_colour(data: bytes, colour: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels of a PNG (a browser's screenshot, decoded by Pillow; its alpha, if any, set aside) are
    within `tolerance` of an RGB colour in each channel."""
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    return int(np.all(np.abs(pixels - np.array(colour, dtype=np.int16)) <= tolerance, axis=-1).sum())
