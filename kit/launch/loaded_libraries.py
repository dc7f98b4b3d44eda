"""The shared libraries a program loads as it starts, as this machine's dynamic loader resolves them.

The answer is the loader's own (`ld.so --list PROGRAM`, run with the environment the program would get:
its RUNPATH, RPATH and `LD_LIBRARY_PATH` weighed exactly as at start), not a re-reading of the ELF
dynamic section. In list mode the loader maps the libraries and prints where each came from; it runs
none of the program's code. A program the loader does not start (statically linked, a script) has no
answer: None.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# The x86-64 loader (the embedded engine, and the CPU backends swapped under it, exist for Linux x86-64 only).
LOADERS = (Path("/lib64/ld-linux-x86-64.so.2"), Path("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"))
LISTED = re.compile(r"^\s*(?P<soname>\S+) => (?P<path>/.*) \(0x[0-9a-f]+\)$")
TIMEOUT_S = 30


def loader() -> Path | None:
    return next((path for path in LOADERS if path.exists()), None)


def resolved(program: Path, env: dict[str, str]) -> dict[str, Path] | None:
    """soname → the file the loader maps for it when `program` starts with `env`; None where the loader does
    not start `program` (not a dynamically linked x86-64 program, or no x86-64 loader on this machine)."""
    found = loader()
    if found is None:
        return None
    try:
        listed = subprocess.run([str(found), "--list", str(program)], env=env, capture_output=True, text=True,
                                errors="replace", timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return {match["soname"]: Path(match["path"]) for line in listed.stdout.splitlines()
            if (match := LISTED.match(line))}
