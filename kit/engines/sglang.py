"""Client for an SGLang server: its OpenAI-compatible chat endpoint, plus its radix-cache flush.

SGLang serves `/v1/chat/completions` in the OpenAI shape (cached tokens in `usage.prompt_tokens_details`
only when started with `--enable-cache-report`), and `POST /flush_cache` empties its radix cache without a
restart (it answers 400 while requests are running or waiting). Shapes: tests/fixtures/sglang/README.md.
"""

from __future__ import annotations

from kit.engines.cache_reset import CacheReset
from kit.engines.http import error_text, send
from kit.engines.identify import Prober, Proof, short
from kit.engines.openai_compat import RUNNING, OpenAICompatEngine

FLUSH = "/flush_cache"
SERVER_ARGS = ("model_path", "tp_size", "disable_radix_cache")  # server arguments its server info holds


class SglangEngine(OpenAICompatEngine):
    """An SGLang server at `base_url` (without the `/v1`)."""

    name = "SGLang"

    def reset_cache(self) -> CacheReset:
        """Flush the radix cache; a refusal (requests in flight) is a refused reset with SGLang's reason."""
        response = send(self._http, "POST", FLUSH, who=self.base_url, fix=RUNNING)
        if response.status_code != 200:
            return CacheReset(f"POST {FLUSH}", False, f"SGLang refused it (HTTP {response.status_code}: "
                              f"{error_text(response, 'detail')[:160]}); it flushes only while no request runs")
        return CacheReset(f"POST {FLUSH}", True, "SGLang flushed its radix cache (the next call's cached tokens "
                          "are read from usage, which SGLang gives only with --enable-cache-report)")


def proof(probe: Prober) -> Proof | None:
    """An SGLang server answers `GET /get_server_info` (older builds: `/server_info`) with its `version` and its
    server arguments."""
    for path in ("/get_server_info", "/server_info"):
        info = probe.json(path)
        version = info.get("version") if info else None
        if info and isinstance(version, str) and any(key in info for key in SERVER_ARGS):
            return Proof(version, f"GET {path}: version {short(version)}")
    return None
