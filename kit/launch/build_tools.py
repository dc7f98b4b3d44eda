"""The tools a build on this machine needs (the portable CPU backend, the native CUDA llama.cpp), and the
one command that installs them on Debian/Ubuntu, said the same way by `kit doctor` and by every build."""

from __future__ import annotations

import shutil
from typing import Callable

from kit.core.errors import EngineError

TOOLS = ("cmake", "make", "c++")  # cmake's default generator is Unix Makefiles, so make too
INSTALL = "apt-get install -y cmake build-essential"  # Debian/Ubuntu; build-essential brings make and g++


def missing(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The build tools not on PATH, in TOOLS order."""
    return [tool for tool in TOOLS if which(tool) is None]


def fix(absent: list[str]) -> str:
    return f"install {' and '.join(absent)} ({INSTALL}), then retry"


def require(what: str, which: Callable[[str], str | None] = shutil.which) -> None:
    """Raise one line naming the missing tools and the install command."""
    absent = missing(which)
    if absent:
        raise EngineError(f"{what} needs {', '.join(absent)}, not found on PATH", fix(absent))
