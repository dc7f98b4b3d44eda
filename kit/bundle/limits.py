"""How big a bundle may be: the writer refuses to write past these and `kit verify` / `kit show`
refuse to read past them, before reading the data concerned (sizes come from the tar headers).

Records and logs are only ever streamed (hashed and, for records, copied to the extraction folder
in chunks); the files the kit parses whole (manifests, the index, the checksum list, protocol
files, results and analysis tables) have a smaller cap of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB, MIB, GIB = 1024, 1024**2, 1024**3


@dataclass(frozen=True)
class Limits:
    file_bytes: int = 4 * GIB  # one file (a pass's records); also what a ustar size field holds
    total_bytes: int = 16 * GIB  # every file of the bundle together
    expansion: int = 200  # files may hold at most this many times the .tar.gz's size ...
    expansion_allowance: int = 256 * MIB  # ... plus this much, so small bundles never hit the ratio
    members: int = 100_000
    name_bytes: int = 1024  # one member name, in UTF-8
    read_whole_bytes: int = 64 * MIB  # a file the kit parses whole (JSON, CSV, YAML, the checksum list)

    def unpacked_bytes(self, packed: int) -> int:
        """The most that the files of a `packed`-byte bundle may hold together."""
        return min(self.total_bytes, self.expansion_allowance + self.expansion * packed)

    def too_big(self, total: int, packed: int) -> str | None:
        """Why files totalling `total` bytes are too big for a bundle of `packed` bytes, or None."""
        if total > self.total_bytes:
            return f"its files hold {total} bytes, over the {self.total_bytes}-byte limit on a bundle"
        if total > self.unpacked_bytes(packed):
            return (f"its files hold {total} bytes, over {self.expansion} times the {packed}-byte file plus "
                    f"{self.expansion_allowance} bytes (a decompression bomb?)")
        return None


DEFAULT = Limits()
