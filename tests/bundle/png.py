"""A tiny PNG writer and reader for the tests (8-bit RGB/RGBA, no interlacing): enough to make a figure
for a run folder and to look for its colours in a browser screenshot, with no imaging library."""

from __future__ import annotations

import struct
import zlib


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


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def read_pixels(data: bytes) -> tuple[int, int, list[bytes], int]:
    """(width, height, rows of raw bytes, bytes per pixel) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            line[x] = (line[x] + (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def count_colour(data: bytes, colour: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels of a PNG are within `tolerance` of an RGB colour."""
    width, _, rows, bpp = read_pixels(data)
    hits = 0
    for row in rows:
        for x in range(0, width * bpp, bpp):
            if all(abs(row[x + i] - colour[i]) <= tolerance for i in range(3)):
                hits += 1
    return hits
