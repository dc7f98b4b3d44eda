"""Reading bundles safely: one streaming pass that checks each member before using it, hashes every
file and unpacks only the files asked for, under a folder that is removed afterwards.

A bundle may come from anyone. The gzip and tar layers must be exactly what `kit bundle` writes
(kit.bundle.gzip_stream, kit.bundle.tar_stream); names must stay inside one top-level folder, with
no absolute paths, `..`, empty or `.` parts, backslashes or control characters; sizes stay within
kit.bundle.limits, checked from the headers before any data is read. Nothing is read into memory
whole here: each file is hashed in chunks and, when asked for, copied in chunks.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kit.bundle.errors import BadBundle, UnsafeBundle
from kit.bundle.gzip_stream import GzipStream
from kit.bundle.limits import DEFAULT, Limits
from kit.bundle.tar_stream import Member, TarStream

__all__ = ["BadBundle", "Entry", "Listing", "UnsafeBundle", "Unpacked", "extract", "name_problem", "scan", "unpack"]

Keep = Callable[[str], "int | None"]  # a file's path in the bundle -> the most bytes to unpack it with, or None


def _control(char: str) -> bool:
    return ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F


def name_problem(name: str, max_bytes: int = DEFAULT.name_bytes) -> str | None:
    """Why `name` cannot be a bundle member's name, or None. The writer skips files this refuses."""
    if len(name.encode("utf-8", "surrogatepass")) > max_bytes:
        return f"has a name longer than {max_bytes} bytes"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "points outside the bundle"
    if "\\" in name:
        return "has a backslash in its name (a Windows path?)"
    if any(part in ("", ".") for part in parts):
        return "has an empty or '.' part in its path"
    if any(_control(c) for c in name):
        return "has control characters in its name"
    return None


@dataclass(frozen=True)
class Entry:
    """One file of a bundle: its size, sha256 and where it was unpacked (None when only hashed)."""

    size: int
    sha256: str
    path: Path | None = None


@dataclass(frozen=True)
class Listing:
    """The checked files of a bundle: its top-level folder and each file by its path within that folder."""

    root: str
    files: dict[str, Entry]


class _Names:
    """The names seen so far: one top-level folder, no name twice, no name both a file and a folder."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.files: set[str] = set()
        self.folders: set[str] = set()

    def add(self, member: Member, limits: Limits) -> str:
        problem = name_problem(member.name, limits.name_bytes)
        if problem:
            raise UnsafeBundle(f"bundle member {member.name!r} {problem}")
        root, _, rel = member.name.partition("/")
        if not rel:
            raise UnsafeBundle(f"bundle member {member.name!r} is outside the bundle's folder; "
                               "a bundle holds one top-level folder")
        if self.root not in (None, root):
            raise UnsafeBundle(f"bundle member {member.name!r} starts a second top-level entry beside "
                               f"{self.root!r}; a bundle holds one top-level folder")
        self.root = root
        if rel in self.files:
            raise UnsafeBundle(f"bundle member {rel!r} appears twice", "refusing an ambiguous archive")
        prefixes = ["/".join(rel.split("/")[:n]) for n in range(1, rel.count("/") + 1)]
        if rel in self.folders or any(p in self.files for p in prefixes):
            raise UnsafeBundle(f"bundle member {rel!r} is both a file and a folder", "refusing an ambiguous archive")
        if len(self.files) >= limits.members:
            raise UnsafeBundle(f"the bundle holds more than {limits.members} files")
        self.files.add(rel)
        self.folders.update(prefixes)
        return rel


def _copy(tar: TarStream, member: Member, target: Path, digest) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        for chunk in tar.data(member):
            digest.update(chunk)
            out.write(chunk)


def scan(path: Path, dest: Path, keep: Keep, limits: Limits | None = None) -> Listing:
    """Check and hash every member of the bundle at `path`, unpacking under dest/<its folder> each file
    `keep` gives a byte limit for. Raises BadBundle / UnsafeBundle saying why it cannot be read."""
    limits = limits or DEFAULT
    if not path.is_file():
        raise BadBundle(f"no bundle at {path}", "pass the .tar.gz written by `kit bundle`")
    packed, total, names, files = path.stat().st_size, 0, _Names(), {}
    try:
        with path.open("rb") as raw:
            tar = TarStream(GzipStream(raw, str(path)), limits.name_bytes)
            for member in tar.members():
                rel = names.add(member, limits)
                if member.size > limits.file_bytes:
                    raise UnsafeBundle(f"bundle member {member.name!r} is {member.size} bytes, over the "
                                       f"{limits.file_bytes}-byte limit on one file")
                total += member.size
                too_big = limits.too_big(total, packed)
                if too_big:
                    raise UnsafeBundle(f"{path} is refused: {too_big}")
                cap, digest, target = keep(rel), hashlib.sha256(), None
                if cap is None:
                    for chunk in tar.data(member):
                        digest.update(chunk)
                elif member.size > cap:
                    raise UnsafeBundle(f"bundle member {member.name!r} is {member.size} bytes; the kit reads it "
                                       f"whole and takes at most {cap}")
                else:
                    target = dest.joinpath(*member.name.split("/"))
                    _copy(tar, member, target, digest)
                files[rel] = Entry(member.size, digest.hexdigest(), target)
    except OSError as exc:
        raise BadBundle(f"{path} could not be read or unpacked ({exc.strerror or exc})",
                        "check the file and the free space of the temporary folder") from exc
    if names.root is None:
        raise UnsafeBundle(f"{path} holds no files")
    return Listing(names.root, files)


@dataclass(frozen=True)
class Unpacked:
    """A checked bundle: its listing, the folder its kept files were unpacked to, and a scratch folder
    beside it (both removed when `unpack` ends)."""

    listing: Listing
    folder: Path
    scratch: Path

    def read(self, rel: str) -> bytes | None:
        """A kept file's bytes (within the limit `keep` gave it), or None when absent or not kept."""
        entry = self.listing.files.get(rel)
        return entry.path.read_bytes() if entry is not None and entry.path is not None else None


@contextmanager
def unpack(path: Path, keep: Keep, limits: Limits | None = None) -> Iterator[Unpacked]:
    """The bundle checked and its kept files unpacked into a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="kit-bundle-") as tmp:
        listing = scan(path, Path(tmp) / "bundle", keep, limits)
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        yield Unpacked(listing, Path(tmp) / "bundle" / listing.root, scratch)


def extract(path: Path, dest: Path, limits: Limits | None = None) -> Path:
    """Unpack every file of the bundle under dest; returns the bundle's folder. On refusal nothing is
    left under dest."""
    limits = limits or DEFAULT
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kit-unpacking-", dir=dest))
    try:
        listing = scan(path, staging, lambda _: limits.file_bytes, limits)
        if (dest / listing.root).exists():
            raise BadBundle(f"{dest / listing.root} already exists", "unpack into an empty folder")
        return Path(shutil.move(str(staging / listing.root), str(dest / listing.root)))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
