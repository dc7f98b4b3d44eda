"""Reading a bundle's gzip layer strictly: exactly one gzip member, nothing after it.

Python's gzip module reads on past the first member (a second member's bytes would join the tar)
and skips trailing zeros; this reader refuses both, checks the CRC-32 and length, and inflates in
bounded chunks so a small file never becomes a large buffer.

The header is read as RFC 1952 defines it. `kit bundle` writes the fixed header of
kit.bundle.archive_format.gzip_header, but the fields a header may carry beside it are harmless and
are skipped: a bundle written by an earlier kit (through tarfile, whose gzip header names the file:
FNAME) or recompressed by another tool must stay verifiable. MTIME, XFL, OS, FTEXT, a file name, a
comment and an extra field say nothing about the content, which the CRC-32, the tar layer and the
checksum list check. Refused: another compression method, reserved flag bits (RFC 1952 says a reader
must), a header CRC (FHCRC) that does not match, and a name or comment longer than MAX_FIELD bytes.
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
DAMAGED_FIX = "get an intact copy of the bundle"


RESERVED = 0xE0
MAX_FIELD = 64 * 1024  # a gzip FNAME or FCOMMENT: a file name or a comment, never this long


def _header_problem(header: bytes) -> str | None:
    if len(header) < HEADER or header[:2] != fmt.GZIP_MAGIC:
        return "is not a gzip file (no gzip header); a bundle is the .tar.gz written by `kit bundle`"
    method, flags = header[2], header[3]
    if method != fmt.GZIP_DEFLATE:
        return f"has gzip compression method {method}, not deflate (8)"
    if flags & RESERVED:
        return f"has gzip header flags with reserved bits {flags & RESERVED:#04x} set (RFC 1952: refused)"
    return None


def _zero_terminated(raw: BinaryIO, what: str, label: str) -> bytes:
    """A header field that ends with a NUL byte (FNAME, FCOMMENT), at most MAX_FIELD bytes, NUL included."""
    field = bytearray()
    while not field.endswith(b"\0"):
        byte = raw.read(1)
        if not byte:
            raise BadBundle(f"{label} is damaged: its gzip header ends inside its {what}", DAMAGED_FIX)
        field += byte
        if len(field) > MAX_FIELD:
            raise UnsafeBundle(f"{label} has a gzip header {what} longer than {MAX_FIELD} bytes")
    return bytes(field)


def _optional_fields(raw: BinaryIO, header: bytes, label: str) -> None:
    """Read past the optional header fields the flags announce (RFC 1952 order), checking FHCRC if set."""
    flags, read = header[3], bytearray(header)
    if flags & 0x04:  # FEXTRA: a 2-byte length, then that many bytes
        size = raw.read(2)
        extra = raw.read(struct.unpack("<H", size)[0]) if len(size) == 2 else b""
        if len(size) != 2 or len(extra) != struct.unpack("<H", size)[0]:
            raise BadBundle(f"{label} is damaged: its gzip header ends inside its extra field", DAMAGED_FIX)
        read += size + extra
    if flags & 0x08:
        read += _zero_terminated(raw, "file name (FNAME)", label)
    if flags & 0x10:
        read += _zero_terminated(raw, "comment (FCOMMENT)", label)
    if flags & 0x02:  # FHCRC: the two low bytes of the CRC-32 of the header before it
        recorded = raw.read(2)
        if len(recorded) != 2 or struct.unpack("<H", recorded)[0] != zlib.crc32(read) & 0xFFFF:
            raise BadBundle(f"{label} is damaged: its gzip header CRC (FHCRC) does not match its header",
                            DAMAGED_FIX)


class GzipStream:
    """The decompressed bytes of one gzip member; `read` returns b"" only once the trailer has been
    checked and the file is known to end there."""

    def __init__(self, raw: BinaryIO, label: str):
        self.raw, self.label = raw, label
        header = raw.read(HEADER)
        problem = _header_problem(header)
        if problem:
            raise UnsafeBundle(f"{label} {problem}")
        _optional_fields(raw, header, label)
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
