"""Reading a bundle's tar layer strictly: every header must be, byte for byte, the one `kit bundle`
writes for that name, size and the bundle's timestamp (kit.bundle.archive_format), and the archive
must end exactly as the writer ends it. The bundle's timestamp is its first file's mtime (every file
has the same one); the gzip header's MTIME is not compared with it (kit.bundle.gzip_stream).

Python's tarfile is lenient on purpose (it stops quietly at a damaged header after the first, reads
GNU and PAX extensions, keeps any mode and owner); here anything else is refused with the reason,
read from the header with tarfile's own parser where that names the difference best.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from typing import Iterator

from kit.bundle import archive_format as fmt
from kit.bundle.errors import BadBundle, UnsafeBundle
from kit.bundle.gzip_stream import CHUNK, DAMAGED_FIX, GzipStream

ZERO_BLOCK = b"\0" * fmt.BLOCK
MEMBER_TYPES_REFUSED = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a device file", b"4": "a device file",
         b"5": "a directory entry (`kit bundle` lists files only)", b"6": "a FIFO", b"7": "a contiguous file",
         b"g": "a PAX global header", b"x": "a second PAX header in a row", b"L": "a GNU long-name header",
         b"K": "a GNU long-link header", b"S": "a GNU sparse file", b"V": "a GNU volume header",
         b"M": "a GNU multi-volume entry", b"\0": "an old-style (pre-POSIX) file entry"}
MAX_PAX_OVERHEAD = 64  # a `path` record's length, key and separators


@dataclass(frozen=True)
class Member:
    """A checked regular file of the archive: its full name and size."""

    name: str
    size: int


def _octal(field: bytes) -> int:
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text or any(c not in b"01234567" for c in text):
        raise ValueError(field)
    return int(text, 8)


def _checksum_ok(block: bytes) -> bool:
    try:
        recorded = _octal(block[148:156])
    except ValueError:
        return False
    return recorded == sum(block[:148]) + 8 * 32 + sum(block[156:])


def _pax_path(records: bytes) -> tuple[list[str], str | None]:
    """The keys of a PAX header's records and the `path` value; ValueError when they do not parse."""
    keys, path, pos = [], None, 0
    while pos < len(records):
        length_text, space, _ = records[pos:pos + 24].partition(b" ")
        if not space or not length_text.isdigit():
            raise ValueError("a record without a length")
        record = records[pos:pos + int(length_text)]
        if len(record) != int(length_text) or not record.endswith(b"\n") or b"=" not in record:
            raise ValueError("a record that does not end where its length says")
        key, _, value = record[len(length_text) + 1:-1].partition(b"=")
        keys.append(key.decode("utf-8", "replace"))
        if key == b"path":
            path = value.decode("utf-8")
        pos += len(record)
    return keys, path


def _field_difference(header: bytes, mtime: int) -> str | None:
    """What a ustar header holds that the writer's does not, read with tarfile's parser."""
    if header[257:265] != fmt.USTAR_MAGIC:
        return "is not a POSIX ustar header (GNU or pre-POSIX tar format); `kit bundle` writes ustar/PAX"
    try:
        info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.HeaderError as exc:
        return f"has an unreadable tar header field ({exc})"
    if info.mode & 0o7000:
        return f"has setuid, setgid or sticky bits (mode {info.mode:#o}); `kit bundle` writes 0o644"
    if info.mode != fmt.MODE:
        return f"has mode {info.mode:#o}; `kit bundle` writes 0o644"
    if info.uid or info.gid or info.uname or info.gname:
        return (f"is owned by uid {info.uid} gid {info.gid} ({info.uname!r}/{info.gname!r}); "
                "`kit bundle` writes uid and gid 0 and no owner names")
    if info.mtime != mtime:
        return f"has mtime {info.mtime}, not the bundle's timestamp {mtime} (that of its first file)"
    if info.linkname or header[329:345].strip(b"\0"):
        return "has a link target or device numbers set; `kit bundle` writes neither"
    if header[345:500].strip(b"\0"):
        return "uses the ustar name-prefix field; `kit bundle` never does"
    return None


class TarStream:
    """The members of the tar inside a GzipStream, each checked before its data is read."""

    def __init__(self, stream: GzipStream, max_name_bytes: int):
        self.stream, self.label = stream, stream.label
        self.mtime: int | None = None  # the bundle's timestamp: its first file's mtime
        self.max_pax_bytes = max_name_bytes + MAX_PAX_OVERHEAD
        self.offset = 0
        self._unread = 0

    def _read(self, size: int, what: str) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise BadBundle(f"{self.label} is damaged: its tar archive ends inside {what} (truncated)", DAMAGED_FIX)
        self.offset += size
        return data

    def _refuse(self, name: str, what: str) -> UnsafeBundle:
        return UnsafeBundle(f"bundle member {name!r} {what}")

    def _header(self) -> tuple[str, int, bytes] | None:
        """The next member's name, size and raw header bytes; None at the archive's end."""
        at = self.offset
        block = self._read(fmt.BLOCK, "a header")
        if block == ZERO_BLOCK:
            return None
        if not _checksum_ok(block):
            raise BadBundle(f"{self.label} is damaged: the tar header at byte {at} has a bad checksum", DAMAGED_FIX)
        raw, kind, name = block, block[156:157], None
        if kind == fmt.PAX:
            try:
                size = _octal(block[124:136])
            except ValueError:
                size = -1
            if not 0 <= size <= self.max_pax_bytes:
                raise UnsafeBundle(f"{self.label} has a PAX header of {size} bytes at byte {at}; "
                                   "`kit bundle` writes only short `path` records")
            records = self._read(size + len(fmt.padding(size)), "a PAX header")
            try:
                keys, name = _pax_path(records[:size])
            except ValueError as exc:
                raise UnsafeBundle(f"{self.label} has a malformed PAX header at byte {at} ({exc})") from exc
            if keys != ["path"] or name is None:
                shown = name or block[:100].rstrip(b"\0").decode("ascii", "replace")
                held = f"carries PAX keys {', '.join(map(repr, keys))}" if keys else "has an empty PAX header"
                raise self._refuse(shown, f"{held}; `kit bundle` writes one `path` record, only for long or "
                                          "non-ASCII names")
            block = self._read(fmt.BLOCK, "a header")
            if not _checksum_ok(block):
                raise BadBundle(f"{self.label} is damaged: the tar header after byte {at} has a bad checksum",
                                DAMAGED_FIX)
            raw, kind = raw + records + block, block[156:157]
        if kind != fmt.REGULAR:
            shown = name or block[:100].split(b"\0")[0].decode("utf-8", "replace")
            raise self._refuse(shown, f"is {MEMBER_TYPES_REFUSED.get(kind, f'an entry of type {kind!r}')}")
        if name is None:
            field = block[:100].split(b"\0")[0]
            if not field.isascii():
                raise self._refuse(field.decode("utf-8", "replace"), "has a non-ASCII name outside a PAX `path` "
                                   "record (`kit bundle` puts such names in PAX headers)")
            name = field.decode("ascii")
        try:
            size = _octal(block[124:136])
        except ValueError:
            raise self._refuse(name, "has an unreadable size field") from None
        if self.mtime is None:
            try:
                self.mtime = _octal(block[136:148])
            except ValueError:
                raise self._refuse(name, "has an unreadable mtime field") from None
        expected = fmt.member_header(name, size, self.mtime) if size < fmt.MAX_OCTAL else b""
        if raw != expected:
            if fmt.needs_pax(name) != (len(raw) > fmt.BLOCK):
                raise self._refuse(name, "has a PAX `path` record for a name that needs none" if len(raw) > fmt.BLOCK
                                   else "is too long for a ustar name field yet has no PAX `path` record")
            difference = _field_difference(block, self.mtime)
            if difference is None and expected and expected[-fmt.BLOCK:][:100] != block[:100]:
                difference = ("has a ustar name field that differs from its PAX `path` record" if len(raw) > fmt.BLOCK
                              else "has bytes after the name in its name field")
            raise self._refuse(name, difference or "has a tar header that differs from the one `kit bundle` writes")
        return name, size, raw

    def members(self) -> Iterator[Member]:
        """Each regular file in order; its data must be read with `data` before the next is produced.
        Ends after checking that the archive ends exactly as the writer ends it."""
        while True:
            if self._unread:
                raise RuntimeError("a member's data was not read")  # a programming error, never input
            header = self._header()
            if header is None:
                self._check_end(self.offset - fmt.BLOCK)
                return
            name, size, _ = header
            self._unread = size
            yield Member(name, size)

    def data(self, member: Member) -> Iterator[bytes]:
        """The member's bytes in chunks, then its padding, which must be zeros."""
        while self._unread:
            chunk = self._read(min(CHUNK, self._unread), f"the data of {member.name!r}")
            self._unread -= len(chunk)
            yield chunk
        if self._read(len(fmt.padding(member.size)), f"the padding of {member.name!r}").strip(b"\0"):
            raise self._refuse(member.name, "hides bytes in the padding after its data")

    def _check_end(self, end: int) -> None:
        expected = len(fmt.end_of_archive(end)) - fmt.BLOCK
        rest = self.stream.read(expected)
        self.offset += len(rest)
        if rest.strip(b"\0") or (len(rest) == expected and self.stream.read(1)):
            raise UnsafeBundle(f"{self.label} holds data after the end of its tar archive (byte {end}); "
                               "`kit bundle` writes nothing there but zeros up to a whole 10240-byte record")
        if len(rest) != expected:
            raise UnsafeBundle(f"{self.label} ends its tar archive after {len(rest) + fmt.BLOCK} zero bytes "
                               f"at byte {end}; `kit bundle` writes {expected + fmt.BLOCK}")
