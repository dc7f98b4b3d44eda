"""Why a bundle cannot be read. Every refusal is one line naming what was found and what to do, and
makes `kit verify` and `kit show` exit 1, like a bundle that reads but fails its checks."""

from __future__ import annotations

from kit.core.errors import KitError

GET_AGAIN = "get the bundle again from its author (this file was not written by `kit bundle` or was changed since)"


class BadBundle(KitError):
    """The file is not a bundle this kit can read: missing, damaged, or laid out differently."""

    exit_code = 1


class UnsafeBundle(BadBundle):
    """The archive holds something `kit bundle` never writes (a link, a device, a path outside itself,
    metadata or bytes beyond its own layout)."""

    def __init__(self, message: str, fix: str | None = GET_AGAIN):
        super().__init__(message, fix)
