"""Can the kit drive a llama-server build? Started once on a model, it must answer what the kit reads:
`/props` (its settings and chat template), `/tokenize`, `/apply-template`, and `/completion` with the
emitted token ids, one probability entry per token (`n_probs`) and the cached-token count that tells a
cache hit from a recompute (a second identical request with `cache_prompt` must report tokens cached).

Each answer goes through the same typed shapes the runs use (kit.engines.llamacpp), so a field renamed or
dropped by a newer build is named here, in one line, before a run could mis-measure. The verdict is kept
beside the build (PROBE.json, tied to the binary's sha256) so it is probed once per binary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from kit.core.atomic_file import write_json_atomic
from kit.core.errors import EngineError, KitError
from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.launch.native import NativeServer, ServerSpec
from kit.models.hashing import sha256_file

PROBE_FILE = "PROBE.json"
PROMPT = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"


def _check(lacks: list[str], what: str, step: Callable[[], Any]) -> Any:
    try:
        return step()
    except KitError as exc:
        lacks.append(f"{what} ({exc.message[:160]})")
        return None


def probe(binary: Path, model: Path, log: Path, env: dict[str, str] | None = None) -> list[str]:
    """What the kit needs that this server does not answer; empty when it can drive it."""
    lacks: list[str] = []
    spec = ServerSpec(binary=binary, model=model, ctx_size=512, threads=1, cache_ram=0, env=env)
    with NativeServer(spec, log, startup_timeout=300) as server:
        engine = LlamaCppEngine(server.url)
        try:
            props = _check(lacks, "/props", engine.props)
            if props is not None and props.default_generation_settings is None:
                lacks.append("/props default_generation_settings (n_ctx)")
            _check(lacks, "/tokenize", lambda: engine.tokenize("12 + 30"))
            _check(lacks, "/apply-template", lambda: engine.apply_template([{"role": "user", "content": "hi"}]))
            request = CompletionRequest(PROMPT, max_tokens=4, seed=42, cache_prompt=True, top_logprobs=1)
            first = _check(lacks, "/completion with n_probs and return_tokens", lambda: engine.complete(request))
            again = _check(lacks, "/completion (second, cached)", lambda: engine.complete(request))
            if first is not None and first.token_ids is None:
                lacks.append("/completion tokens (return_tokens)")
            if again is not None and not again.cached_tokens:
                lacks.append("/completion timings.cache_n on a repeated prompt with cache_prompt (the cache-hit "
                             "gate)")
        finally:
            engine.close()
    return lacks


def probed(binary: Path, model: Path, build: int, say: Callable[[str], None] = print) -> None:
    """Refuse a build the kit cannot drive, in one line naming what it lacks (probed once per binary)."""
    record = binary.parent / PROBE_FILE
    digest = sha256_file(binary)
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = None
    if not (isinstance(known, dict) and known.get("binary_sha256") == digest and isinstance(known.get("lacks"), list)):
        say(f"probing llama.cpp build {build}'s server API (/props, /tokenize, /apply-template, /completion) ...")
        known = {"binary_sha256": digest, "model_sha256": sha256_file(model),
                 "lacks": probe(binary, model, binary.parent / "probe-server.log")}
        write_json_atomic(record, known)
    if known["lacks"]:
        raise EngineError(f"llama.cpp build {build} cannot be driven by the kit: its server lacks "
                          f"{'; '.join(map(str, known['lacks']))}",
                          "use a build that has them (the paper's, or a newer one); nothing was measured")
