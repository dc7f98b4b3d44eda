"""An engine's own prompt-cache reset, short of a restart, as one value every adapter returns.

llama.cpp empties its slots (`POST /slots/{id}?action=erase`, only when started with `--slot-save-path`),
vLLM drops its prefix cache (`POST /reset_prefix_cache`, only with VLLM_SERVER_DEV_MODE=1), SGLang flushes
its radix cache (`POST /flush_cache`). An accepted reset proves nothing by itself: it counts as confirmed only
when the next call's counters show no cached tokens (kit.protocols.pinning.protocol checks that), and where a
cache the reset does not reach can still serve that call (llama.cpp's host-memory prompt cache, `--cache-ram`),
`second_cache` names it and how to switch it off, for the reason a VOID pass gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CacheReset:
    """What one reset did: the call (`method`), whether the engine took it, what it answered or why it
    refused (with the server option that enables it), and the cache the reset leaves in place, if any."""

    method: str
    accepted: bool
    detail: str
    second_cache: str | None = None

    def reload(self) -> dict[str, Any]:
        """The pass's `reload` entry: refused (never confirmed), or accepted and awaiting the next call's counters."""
        if not self.accepted:
            return {"method": self.method, "confirmed": False, "refused": True, "without_reset": True,
                    "detail": self.detail}
        reload: dict[str, Any] = {"method": self.method, "confirmed": None, "confirm_by_telemetry": True,
                                  "detail": f"{self.detail}; confirmed only if the next call shows 0 cached tokens"}
        if self.second_cache:
            reload["second_cache"] = self.second_cache
        return reload
