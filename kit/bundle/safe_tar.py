"""Reading bundles safely: every member is checked before anything is written or trusted.

A bundle may come from anyone. Only regular files and folders under one top-level folder are
accepted; absolute names, `..`, links, devices and FIFOs are refused by name.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

from kit.errors import KitError

MAX_TOTAL_BYTES = 64 * 1024**3


class UnsafeBundle(KitError):
    """The archive holds something a bundle never holds (a link, a device, a path outside itself)."""

    exit_code = 4


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a FIFO"
    return "a special entry"


def check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """The member's path relative to the archive, or UnsafeBundle saying why it is refused."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
        raise UnsafeBundle(f"bundle member {name!r} has an absolute path", "refusing to read this archive")
    if any(part == ".." for part in path.parts) or "\\" in name:
        raise UnsafeBundle(f"bundle member {name!r} points outside the bundle", "refusing to read this archive")
    if not (member.isfile() or member.isdir()):
        raise UnsafeBundle(f"bundle member {name!r} is {_kind(member)}", "refusing to read this archive")
    return path


@dataclass(frozen=True)
class Listing:
    """The checked members of a bundle: its top-level folder and its files (relative to that folder)."""

    root: str
    files: dict[str, tarfile.TarInfo]


def list_members(tar: tarfile.TarFile) -> Listing:
    """Check every member and return the files under the single top-level folder."""
    roots, files, total = set(), {}, 0
    for member in tar.getmembers():
        path = check_member(member)
        parts = [p for p in path.parts if p != "."]
        if not parts:
            continue
        roots.add(parts[0])
        if member.isfile():
            if len(parts) < 2:
                raise UnsafeBundle(f"bundle member {member.name!r} is outside the bundle's folder",
                                   "a bundle holds one top-level folder")
            rel = "/".join(parts[1:])
            if rel in files:
                raise UnsafeBundle(f"bundle member {rel!r} appears twice", "refusing an ambiguous archive")
            files[rel] = member
            total += member.size
    if len(roots) != 1:
        raise UnsafeBundle(f"the archive has {len(roots)} top-level entries", "a bundle holds one top-level folder")
    if total > MAX_TOTAL_BYTES:
        raise UnsafeBundle(f"the archive would unpack to {total} bytes", "refusing an oversized archive")
    return Listing(roots.pop(), files)


@contextmanager
def open_bundle(path: Path) -> Iterator[tarfile.TarFile]:
    """The archive opened for reading; a damaged or truncated file is a KitError, not a traceback."""
    if not path.is_file():
        raise KitError(f"no bundle at {path}", "pass the .tar.gz written by `kit bundle`")
    try:
        with gzip.open(path) as stream:  # read to the end once so gzip checks its CRC and length
            while stream.read(1 << 20):
                pass
        with tarfile.open(path, mode="r:gz") as tar:
            yield tar
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise KitError(f"{path} is damaged or not a .tar.gz ({type(exc).__name__}: {exc})",
                       "get an intact copy of the bundle") from exc


def read_file(tar: tarfile.TarFile, listing: Listing, rel: str) -> bytes:
    """One file's bytes, read from the archive without extracting anything."""
    member = listing.files.get(rel)
    if member is None:
        raise KitError(f"the bundle has no {rel}", "was it made by `kit bundle`?")
    handle = tar.extractfile(member)
    assert handle is not None  # a checked regular file
    return handle.read()


def extract(path: Path, dest: Path) -> Path:
    """Check every member first, then write the regular files under dest; returns the bundle's folder."""
    with open_bundle(path) as tar:
        listing = list_members(tar)
        root = dest / listing.root
        for rel, member in sorted(listing.files.items()):
            target = root.joinpath(*rel.split("/"))
            if dest.resolve() not in target.resolve().parents:
                raise UnsafeBundle(f"bundle member {member.name!r} points outside the bundle",
                                   "refusing to read this archive")
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = tar.extractfile(member)
            assert handle is not None
            with target.open("xb") as out:
                while chunk := handle.read(1 << 20):
                    out.write(chunk)
        root.mkdir(parents=True, exist_ok=True)
    return root
