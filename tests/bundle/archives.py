"""Building bundle-shaped archives byte by byte for tests: the writer's exact framing
(kit.bundle.archive_format) around members the test chooses, hostile ones included."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from kit.bundle import archive_format as fmt

STAMP = 1_764_547_200  # 2025-12-01T00:00:00Z


def gzip_member(data: bytes, mtime: int = STAMP) -> bytes:
    """`data` as one gzip member framed exactly as the writer frames it."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=mtime, compresslevel=fmt.GZIP_LEVEL) as packed:
        packed.write(data)
    return out.getvalue()


def member(name: str, data: bytes, mtime: int = STAMP) -> bytes:
    """A regular file as the writer writes it: header, data, padding."""
    return fmt.member_header(name, len(data), mtime) + data + fmt.padding(len(data))


def raw_member(info: tarfile.TarInfo, data: bytes = b"", tar_format: int = tarfile.PAX_FORMAT) -> bytes:
    """Any member tarfile can describe (links, devices, odd modes, PAX keys, GNU headers), with its data."""
    data = data if info.isreg() else b""
    info.size = len(data)
    return info.tobuf(tar_format, "utf-8", "surrogateescape") + data + fmt.padding(len(data))


def info(name: str, mtime: int = STAMP, **fields) -> tarfile.TarInfo:
    """A TarInfo with the writer's fields (mode 0644, the bundle's mtime), changed by `fields`."""
    made = tarfile.TarInfo(name)
    made.mode, made.mtime = fmt.MODE, mtime
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def tar(members: list[bytes]) -> bytes:
    """Members joined and ended as the writer ends its archives."""
    body = b"".join(members)
    return body + fmt.end_of_archive(len(body))


def pack(root: str, files: dict[str, bytes], mtime: int = STAMP) -> bytes:
    """A bundle-shaped .tar.gz of `files` (paths relative to the top folder `root`), in the writer's format."""
    return gzip_member(tar([member(f"{root}/{name}", data, mtime) for name, data in sorted(files.items())]), mtime)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def members_of(bundle: bytes) -> tuple[int, list[tuple[str, bytes]]]:
    """The gzip mtime and every (name, data) of a writer-format bundle, in order (read with tarfile)."""
    mtime = int.from_bytes(bundle[4:8], "little")
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as archive:
        return mtime, [(m.name, archive.extractfile(m).read()) for m in archive.getmembers()]
