"""Named ways of tampering with a real bundle, applied at test time (the list is
tests/fixtures/bundles/mutations.json; hypothesis draws from the same operations).

Each operation takes the bundle's bytes and keyword arguments from the JSON and returns new bytes.
Names in arguments may use `{root}` for the bundle's top folder and `{run}` for `{root}/runs/<run id>`.
"""

from __future__ import annotations

import gzip
import json
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kit.bundle import CHECKSUMS, archive_format as fmt, checksums
from tests.bundle import archives

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "mutations.json"
TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
         "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE, "contiguous": tarfile.CONTTYPE,
         "old-file": tarfile.AREGTYPE, "global-pax": tarfile.XGLTYPE, "unknown": b"Z"}
FORMATS = {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT, "ustar": tarfile.USTAR_FORMAT}


@dataclass
class Decoded:
    """A writer-format bundle taken apart: its timestamp, top folder, run prefix and members in order."""

    mtime: int
    root: str
    run: str
    members: list[tuple[str, bytes]]

    def name(self, text: str) -> str:
        return text.replace("{run}", self.run).replace("{root}", self.root)

    def index(self, suffix: str) -> int:
        suffix = self.name(suffix)
        return next(i for i, (name, _) in enumerate(self.members) if name.endswith(suffix))

    def chunks(self) -> list[bytes]:
        return [archives.member(name, data, self.mtime) for name, data in self.members]

    def pack(self, chunks: list[bytes] | None = None, tail: bytes | None = None) -> bytes:
        body = b"".join(self.chunks() if chunks is None else chunks)
        return archives.gzip_member(body + (fmt.end_of_archive(len(body)) if tail is None else tail), self.mtime)


def decode(bundle: bytes) -> Decoded:
    mtime, members = archives.members_of(bundle)
    root = members[0][0].split("/")[0]
    run = next(n for n, _ in members if n.endswith("/manifest.json")).rsplit("/", 1)[0]
    return Decoded(mtime, root, run, members)


def _entry(decoded: Decoded, name: str, kind: str = "file", data: str = "", pax: dict | None = None,
           format: str = "pax", mtime_delta: int = 0, **fields: Any) -> bytes:
    if kind == "global-pax":  # tarfile writes these only at the start of an archive it makes itself
        records = b"".join(fmt.pax_record(k, v) for k, v in (pax or {}).items())
        return fmt.ustar_block(fmt.PAX_NAME, len(records), 0, TYPES[kind], mode=0) + records + fmt.padding(len(records))
    info = archives.info(decoded.name(name), decoded.mtime + mtime_delta, type=TYPES[kind], **fields)
    if pax:
        info.pax_headers = {k: decoded.name(v) for k, v in pax.items()}
    return archives.raw_member(info, decoded.name(data).encode(), FORMATS[format])


# --- the gzip layer ------------------------------------------------------------------------------------

def append(bundle: bytes, hex: str = "", text: str = "", gzip_text: str | None = None,
           gzip_file: str | None = None) -> bytes:
    """Bytes after the gzip member: raw (hex or text), a second gzip member, or a second tar.gz."""
    extra = bytes.fromhex(hex) + text.encode()
    if gzip_text is not None:
        extra += gzip.compress(gzip_text.encode())
    if gzip_file is not None:
        decoded = decode(bundle)
        extra += archives.gzip_member(archives.tar([archives.member(decoded.name(gzip_file), b"appended\n")]))
    return bundle + extra


def set_byte(bundle: bytes, offset: int, value: int) -> bytes:
    out = bytearray(bundle)
    out[offset] = value
    return bytes(out)


def flip(bundle: bytes, offset: int | str) -> bytes:
    """Invert one byte; `offset` may be "middle" or negative (from the end)."""
    at = len(bundle) // 2 if offset == "middle" else int(offset)
    return set_byte(bundle, at, bundle[at] ^ 0xFF)


def gzip_flag(bundle: bytes, flag: int, field_hex: str = "", repeat: int = 1, then_hex: str = "") -> bytes:
    """Set a gzip header flag and put its field (field_hex `repeat` times, then then_hex) after the fixed header."""
    return bundle[:3] + bytes([flag]) + bundle[4:10] + bytes.fromhex(field_hex) * repeat + bytes.fromhex(then_hex) \
        + bundle[10:]


def gzip_mtime(bundle: bytes, delta: int) -> bytes:
    mtime = struct.unpack("<I", bundle[4:8])[0] + delta
    return bundle[:4] + struct.pack("<I", mtime) + bundle[8:]


def truncate(bundle: bytes, keep: int | str) -> bytes:
    return bundle[: len(bundle) // 2 if keep == "half" else int(keep)]


def replace(bundle: bytes, hex: str = "", plain_tar: bool = False) -> bytes:
    """Another file altogether: given bytes, or the bundle's tar without gzip."""
    return gzip.decompress(bundle) if plain_tar else bytes.fromhex(hex)


# --- the tar layer -------------------------------------------------------------------------------------

def insert(bundle: bytes, entry: dict, at: int = -1) -> bytes:
    """Another member (any type, format, metadata or PAX keys), before member `at` (-1: last)."""
    decoded = decode(bundle)
    chunks = decoded.chunks()
    chunks.insert(len(chunks) if at == -1 else at, _entry(decoded, **entry))
    return decoded.pack(chunks)


def change(bundle: bytes, member: str, **entry: Any) -> bytes:
    """One member rewritten with other metadata, type, format or PAX keys (same data unless given)."""
    decoded = decode(bundle)
    i = decoded.index(member)
    name, data = decoded.members[i]
    chunks = decoded.chunks()
    entry.setdefault("data", data.decode())
    chunks[i] = _entry(decoded, entry.pop("name", name), **entry)
    return decoded.pack(chunks)


def rename(bundle: bytes, member: str, to: str) -> bytes:
    decoded = decode(bundle)
    i = decoded.index(member)
    decoded.members[i] = (decoded.name(to), decoded.members[i][1])
    return decoded.pack()


def duplicate(bundle: bytes, member: str) -> bytes:
    decoded = decode(bundle)
    decoded.members.append(decoded.members[decoded.index(member)])
    return decoded.pack()


def patch_header(bundle: bytes, member: str, offset: int, hex: str, fix_checksum: bool = True) -> bytes:
    """Overwrite bytes of a member's ustar header (checksum recomputed unless told not to)."""
    decoded = decode(bundle)
    i = decoded.index(member)
    chunks = decoded.chunks()
    header = bytearray(chunks[i][:fmt.BLOCK])
    new = bytes.fromhex(hex)
    header[offset:offset + len(new)] = new
    if fix_checksum:
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
    chunks[i] = bytes(header) + chunks[i][fmt.BLOCK:]
    return decoded.pack(chunks)


def raw_pax(bundle: bytes, records: list, name_field: str, data: str = "x") -> bytes:
    """A member whose PAX header holds exactly the given [key, value] records (values may carry
    undecodable bytes as surrogate escapes) over a ustar header with the given name field."""
    decoded = decode(bundle)
    raw = b""
    for key, value in records:
        body = f" {key}={decoded.name(value)}\n".encode("utf-8", "surrogateescape")
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length += 1
        raw += str(length).encode() + body
    chunk = (fmt.ustar_block(fmt.PAX_NAME, len(raw), 0, fmt.PAX, mode=0) + raw + fmt.padding(len(raw))
             + fmt.ustar_block(decoded.name(name_field).encode(), len(data), decoded.mtime, fmt.REGULAR)
             + data.encode() + fmt.padding(len(data)))
    return decoded.pack(decoded.chunks() + [chunk])


def padding_byte(bundle: bytes, member: str) -> bytes:
    decoded = decode(bundle)
    i = decoded.index(member)
    chunks = decoded.chunks()
    chunks[i] = chunks[i][:-1] + b"!"
    return decoded.pack(chunks)


def after_end(bundle: bytes, hex: str = "", zeros: int = 0, member: str | None = None) -> bytes:
    """Bytes inside the gzip member after the tar's end: raw, more zeros, or another member."""
    decoded = decode(bundle)
    body = b"".join(decoded.chunks())
    extra = bytes.fromhex(hex) + b"\0" * zeros
    if member is not None:
        extra += archives.tar([archives.member(decoded.name(member), b"after the end\n", decoded.mtime)])
    return decoded.pack(tail=fmt.end_of_archive(len(body)) + extra)


def end_zeros(bundle: bytes, count: int) -> bytes:
    """The tar ended by `count` zero bytes instead of the writer's end."""
    return decode(bundle).pack(tail=b"\0" * count)


def declared_size(bundle: bytes, name: str, size: int, data_bytes: int = 0) -> bytes:
    """A member header declaring `size` bytes, followed by only `data_bytes` of them and no end."""
    decoded = decode(bundle)
    header = fmt.ustar_block(decoded.name(name).encode(), size, decoded.mtime, fmt.REGULAR)
    return archives.gzip_member(b"".join(decoded.chunks()) + header + b"\0" * data_bytes, decoded.mtime)


def zero_file(bundle: bytes, name: str, mib: int) -> bytes:
    """A real member of `mib` MiB of zeros, compressed the way gzip would (about 1 KiB per MiB): the
    1 GiB-in-1.3 MB bundle of the probe. Built from a repeated deflate block, so it takes no time."""
    decoded = decode(bundle)
    before = b"".join(decoded.chunks()) + fmt.ustar_block(decoded.name(name).encode(), mib << 20, decoded.mtime,
                                                          fmt.REGULAR)
    after = fmt.end_of_archive(len(before) + (mib << 20))
    deflate = zlib.compressobj(fmt.GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    head = deflate.compress(before) + deflate.flush(zlib.Z_SYNC_FLUSH)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_SYNC_FLUSH)
    unit = deflate.compress(chunk) + deflate.flush(zlib.Z_SYNC_FLUSH)
    tail = deflate.compress(after) + deflate.flush()
    crc = zlib.crc32(before)
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(after, crc)
    length = (len(before) + (mib << 20) + len(after)) & 0xFFFFFFFF
    return (fmt.gzip_header(decoded.mtime) + head + first + unit * (mib - 1) + tail
            + struct.pack("<II", crc, length))


# --- the content (archive layout intact) ---------------------------------------------------------------

def _reseal(decoded: Decoded) -> None:
    prefix = decoded.root + "/"
    digests = {n[len(prefix):]: checksums.sha256(d) for n, d in decoded.members if not n.endswith("/" + CHECKSUMS)}
    i = decoded.index("/" + CHECKSUMS)
    decoded.members[i] = (decoded.members[i][0], checksums.render_digests(digests))


def _set(value: Any, path: list, new: Any) -> Any:
    if not path:
        return new
    key = path[0]
    value[key] = _set(value[key] if key in value or isinstance(value, list) else {}, path[1:], new)
    return value


def edit(bundle: bytes, file: str, reseal: bool = False, flip_at: int | None = None, text: str | None = None,
         set_json: dict | None = None, replace_text: list | None = None) -> bytes:
    """A file's content changed: a byte inverted, replaced whole, JSON keys set ("a.b.0": value) or a
    substring replaced; the checksum list resealed over the change when `reseal`."""
    decoded = decode(bundle)
    i = decoded.index(file)
    name, data = decoded.members[i]
    if flip_at is not None:
        data = flip(data, flip_at)
    if text is not None:
        data = decoded.name(text).encode()
    if replace_text is not None:
        data = data.replace(replace_text[0].encode(), decoded.name(replace_text[1]).encode())
    if set_json is not None:
        value = json.loads(data)
        for dotted, new in set_json.items():
            value = _set(value, [int(p) if p.isdigit() else p for p in dotted.split(".")], new)
        data = json.dumps(value).encode()
    decoded.members[i] = (name, data)
    if reseal:
        _reseal(decoded)
    return decoded.pack()


def add_file(bundle: bytes, file: str, text: str, reseal: bool = False) -> bytes:
    decoded = decode(bundle)
    decoded.members.insert(0, (decoded.name(file), text.encode()))
    if reseal:
        _reseal(decoded)
    return decoded.pack()


def remove_file(bundle: bytes, file: str) -> bytes:
    decoded = decode(bundle)
    del decoded.members[decoded.index(file)]
    return decoded.pack()


def nested_json(bundle: bytes, file: str, depth: int) -> bytes:
    decoded = decode(bundle)
    i = decoded.index(file)
    decoded.members[i] = (decoded.members[i][0], b"[" * depth + b"]" * depth)
    _reseal(decoded)
    return decoded.pack()


OPS: dict[str, Callable[..., bytes]] = {op.__name__: op for op in (
    append, set_byte, flip, gzip_flag, gzip_mtime, truncate, replace, insert, change, rename, duplicate,
    patch_header, raw_pax, padding_byte, after_end, end_zeros, declared_size, zero_file, edit, add_file,
    remove_file, nested_json)}


def holds_the_same(bundle: bytes, other: bytes) -> bool:
    """Whether `other` is `bundle` with only compressed bytes changed that inflate to the same archive
    (deflate allows it: a back-reference into a run of zeros moved onto other zeros), or only the gzip
    header's MTIME, XFL or OS bytes (which say nothing of the content: kit.bundle.gzip_stream). Such a
    change alters nothing the bundle holds, and verify rightly accepts it."""
    if other[:4] != bundle[:4] or len(other) < 10 or other[-8:] != bundle[-8:]:
        return False
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        same = inflate.decompress(other[10:]) == gzip.decompress(bundle)
    except zlib.error:
        return False
    return same and inflate.eof and inflate.unused_data == other[-8:]


def load_corpus() -> list[dict]:
    return json.loads(CORPUS.read_text())


def apply(bundle: bytes, mutation: dict) -> bytes:
    return OPS[mutation["op"]](bundle, **mutation.get("args", {}))
