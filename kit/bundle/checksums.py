"""The bundle's checksum list: `sha256  path` per file (readable by `sha256sum -c`), then a seal line.

The seal is the sha256 of every line above it, so a change to the list itself is told apart from a
change to a file it lists. It guards against damage and careless edits, not against someone who
rewrites the whole bundle (that needs a signature).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

SEAL_PREFIX = "# seal sha256 "
LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def render(files: dict[str, bytes]) -> bytes:
    return render_digests({name: sha256(data) for name, data in files.items()})


def render_digests(digests: dict[str, str]) -> bytes:
    """The checksum list for files given as name -> sha256."""
    body = "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))
    return (body + f"{SEAL_PREFIX}{sha256(body.encode())}\n").encode()


@dataclass(frozen=True)
class Sums:
    """A parsed checksum list: path -> sha256, whether its seal holds, and lines it could not read."""

    digests: dict[str, str]
    sealed: bool
    bad_lines: list[int]


def parse(data: bytes) -> Sums:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Sums({}, False, [0])
    lines = text.splitlines(keepends=True)
    seal_ok = False
    body = lines
    if lines and lines[-1].startswith(SEAL_PREFIX):
        body = lines[:-1]
        seal_ok = lines[-1] == f"{SEAL_PREFIX}{sha256(''.join(body).encode())}\n"
    digests, bad = {}, []
    for number, line in enumerate(body, 1):
        match = LINE.match(line.rstrip("\n"))
        if not match or match.group(2) in digests:
            bad.append(number)
            continue
        digests[match.group(2)] = match.group(1)
    return Sums(digests, seal_ok, bad)
