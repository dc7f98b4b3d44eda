"""Reading a bundle's gzip layer strictly: exactly the one member `kit bundle` writes, nothing after it.

Python's gzip module reads on past the first member (a second member's bytes would join the tar)
and skips trailing zeros; this reader refuses both, checks the header fields the writer sets
(kit.bundle.archive_format.gzip_header), the CRC-32 and length, and inflates in bounded chunks so a
small file never becomes a large buffer.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO

from kit.bundle import archive_format as fmt
from kit.bundle.errors import BadBundle, UnsafeBundle

CHUNK = 1 << 20
HEADER = 10
TRAILER = 8
FLAGS = {0x01: "FTEXT", 0x02: "FHCRC", 0x04: "FEXTRA", 0x08: "FNAME", 0x10: "FCOMMENT"}
DAMAGED_FIX = "get an intact copy of the bundle"


def _header_problem(header: bytes) -> str | None:
    if len(header) < HEADER or header[:2] != fmt.GZIP_MAGIC:
        return "is not a gzip file (no gzip header); a bundle is the .tar.gz written by `kit bundle`"
    method, flags, _, xfl, os_byte = struct.unpack("<BBIBB", header[2:HEADER])
    if method != fmt.GZIP_DEFLATE:
        return f"has gzip compression method {method}, not deflate (8)"
    if flags:
        named = [name for bit, name in FLAGS.items() if flags & bit] or [f"reserved bits {flags:#04x}"]
        return f"has gzip header flags {', '.join(named)} set; `kit bundle` sets none"
    if xfl != fmt.GZIP_XFL:
        return f"has gzip extra flags (XFL) {xfl}; `kit bundle` writes {fmt.GZIP_XFL}"
    if os_byte != fmt.GZIP_OS:
        return f"has gzip OS byte {os_byte}; `kit bundle` writes {fmt.GZIP_OS}"
    return None


class GzipStream:
    """The decompressed bytes of one gzip member; `read` returns b"" only once the trailer has been
    checked and the file is known to end there."""

    def __init__(self, raw: BinaryIO, label: str):
        self.raw, self.label = raw, label
        header = raw.read(HEADER)
        problem = _header_problem(header)
        if problem:
            raise UnsafeBundle(f"{label} {problem}")
        self.mtime: int = struct.unpack("<I", header[4:8])[0]
        self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        self._buffer = bytearray()
        self._crc = self._length = 0
        self._ended = False

    def _damaged(self, what: str) -> BadBundle:
        return BadBundle(f"{self.label} is damaged: {what}", DAMAGED_FIX)

    def _inflate_more(self) -> None:
        data = self._inflate.unconsumed_tail or self.raw.read(CHUNK)
        if not data:
            raise self._damaged("its compressed data stops before the deflate stream ends (truncated or altered)")
        try:
            out = self._inflate.decompress(data, CHUNK)
        except zlib.error as exc:
            raise self._damaged(f"its compressed data does not inflate ({exc})") from exc
        self._crc = zlib.crc32(out, self._crc)
        self._length += len(out)
        self._buffer += out
        if self._inflate.eof:
            self._finish()

    def _finish(self) -> None:
        tail = self._inflate.unused_data
        tail += self.raw.read(max(0, TRAILER - len(tail)))
        if len(tail) < TRAILER:
            raise self._damaged("it ends inside its gzip trailer (truncated)")
        crc, length = struct.unpack("<II", tail[:TRAILER])
        if crc != self._crc:
            raise self._damaged("its CRC-32 does not match its content")
        if length != self._length & 0xFFFFFFFF:
            raise self._damaged("its recorded length does not match its content")
        after = tail[TRAILER:] + self.raw.read(2)
        if after[:2] == fmt.GZIP_MAGIC:
            raise UnsafeBundle(f"{self.label} holds a second gzip member after the bundle's; "
                               "`kit bundle` writes exactly one")
        if after:
            raise UnsafeBundle(f"{self.label} holds bytes after the end of its gzip member")
        self._ended = True

    def read(self, size: int) -> bytes:
        """Up to `size` decompressed bytes; fewer only at the end of the member."""
        while len(self._buffer) < size and not self._ended:
            self._inflate_more()
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out
