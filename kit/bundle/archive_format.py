"""The exact bytes of a bundle file, written by `kit bundle` and the only layout `kit verify` accepts.

One gzip member (RFC 1952) whose 10-byte header is `1f 8b 08 00 <MTIME> 02 ff`: deflate, no flags
(no name, comment, extra field or header CRC), the bundle's timestamp, XFL 2 (best compression), OS
255 (unknown); then deflate data, CRC-32 and length, and nothing after it.

Inside, a POSIX tar (ustar with PAX extended headers) of regular files only: each member is a ustar
header with mode 0644, uid/gid 0, no owner names, no link or device fields, the bundle's timestamp
as mtime, type '0'; a name that is not ASCII or is longer than 100 bytes is carried by a PAX header
(type 'x', name `././@PaxHeader`, mode, mtime, uid and gid 0) holding one `path` record, with the
ustar name field holding that name in ASCII with '?' for other characters, cut to 100 bytes. No directories, links, devices, FIFOs, global headers or
GNU headers. The archive ends with two zero blocks padded with zeros to a multiple of 10240 bytes,
as tar and Python's tarfile end theirs. These are the bytes Python 3.11's `tarfile` writes for such
members (PAX format), written here so that writer and checker share one definition whatever Python
version runs them (tarfile's own output has changed between versions).
"""

from __future__ import annotations

import struct

BLOCK = 512
RECORD = 20 * BLOCK
MODE = 0o644
REGULAR = b"0"
PAX = b"x"
PAX_NAME = b"././@PaxHeader"
USTAR_MAGIC = b"ustar\x0000"
NAME_FIELD = 100
MAX_OCTAL = 8**11  # what an 11-digit size or mtime field holds
GZIP_MAGIC = b"\x1f\x8b"
GZIP_DEFLATE = 8
GZIP_XFL = 2  # compression level 9
GZIP_OS = 255
GZIP_LEVEL = 9


def gzip_header(mtime: int) -> bytes:
    """The gzip member header the writer puts first (see the module docstring)."""
    return GZIP_MAGIC + struct.pack("<BBIBB", GZIP_DEFLATE, 0, mtime, GZIP_XFL, GZIP_OS)


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def ustar_block(name_field: bytes, size: int, mtime: int, kind: bytes, mode: int = MODE) -> bytes:
    """One ustar header block: the writer's fixed fields around a name field, size, mtime and type."""
    if not (0 <= size < MAX_OCTAL and 0 <= mtime < MAX_OCTAL):
        raise ValueError(f"size {size} or mtime {mtime} does not fit a ustar header")
    block = b"".join([
        name_field[:NAME_FIELD].ljust(NAME_FIELD, b"\0"), _octal(mode, 8), _octal(0, 8), _octal(0, 8),
        _octal(size, 12), _octal(mtime, 12), b" " * 8, kind, b"\0" * 100,  # linkname
        USTAR_MAGIC, b"\0" * 32, b"\0" * 32,  # uname, gname
        b"\0" * 16 + b"\0" * 155]).ljust(BLOCK, b"\0")  # devmajor, devminor, prefix (all unused), padding
    return block[:148] + b"%06o\0 " % sum(block) + block[156:]


def needs_pax(name: str) -> bool:
    """Whether a member name goes in a PAX `path` record (not ASCII, or longer than the name field)."""
    return not name.isascii() or len(name) > NAME_FIELD


def pax_record(key: str, value: str) -> bytes:
    """One PAX record, `<length> <key>=<value>\\n`, its length counting itself."""
    body = f" {key}={value}\n".encode("utf-8")
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def padding(size: int) -> bytes:
    """The zeros that fill a member's data up to a whole block."""
    return b"\0" * (-size % BLOCK)


def member_header(name: str, size: int, mtime: int) -> bytes:
    """The header bytes the writer puts before a regular file's data (a PAX header first when needed)."""
    ascii_name = name.encode("ascii", "replace")
    header = ustar_block(ascii_name, size, mtime, REGULAR)
    if not needs_pax(name):
        return header
    records = pax_record("path", name)
    return ustar_block(PAX_NAME, len(records), 0, PAX, mode=0) + records + padding(len(records)) + header


def end_of_archive(offset: int) -> bytes:
    """What follows the last member when `offset` bytes of members were written: two zero blocks,
    then zeros up to a whole record."""
    return b"\0" * (2 * BLOCK + (-(offset + 2 * BLOCK) % RECORD))
