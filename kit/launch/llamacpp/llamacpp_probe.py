"""Can the kit drive a llama-server build? Its `--help` must list every flag the kit passes; started once on a
model, it must answer what the kit reads:
`/props` (its settings and chat template), `/tokenize`, `/apply-template`, and `/completion` with the
emitted token ids, one probability entry per token (`n_probs`) and the cached-token count that tells a
cache hit from a recompute (a second identical request with `cache_prompt` must report tokens cached).

Each answer goes through the same typed shapes the runs use (kit.engines.llamacpp), so a field renamed or
dropped by a newer build is named here, in one line, before a run could mis-measure. The verdict (flags and
API) is kept beside the build (PROBE.json, tied to the binary's sha256 and the flags looked for) so a binary
is checked once.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, Callable

from kit.core.atomic_file import write_json_atomic
from kit.core.errors import EngineError, KitError
from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.launch.llamacpp import fixes as fix_registry
from kit.launch.native import NativeServer, ServerSpec

PROBE_FILE = "PROBE.json"
_FLAG = re.compile(r"--?[A-Za-z][\w-]*")


def kit_flags() -> tuple[str, ...]:
    """The llama-server flags the kit passes: those of the launcher's argv (kit.launch.native.ServerSpec, with
    a --cache-ram as a protocol's engine.cache_ram sets one) and those the registry's fixes set
    (kit.launch.llamacpp.fixes; the ladder's L3 chunk is the chunk fix)."""
    argv = ServerSpec(binary=Path("llama-server"), model=Path("model.gguf"), cache_ram=0).argv(0)[1:]
    fixed = [word for fix in (*fix_registry.NAMED.values(), fix_registry.chunk(1), fix_registry.threads(1))
             for word in fix.server_args]
    return tuple(dict.fromkeys(word for word in (*argv, *fixed) if _FLAG.fullmatch(word)))


KIT_FLAGS = kit_flags()
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


def lacking_flags(help_text: str) -> list[str]:
    """The launcher's flags a server's `--help` does not list (each must appear as a whole word)."""
    words = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))
    return [flag for flag in KIT_FLAGS if flag not in words]


def flags_lacking(binary: Path, build: int) -> list[str]:
    """The launcher's flags `binary --help` does not list; refused in one line when it does not run."""
    try:
        shown = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60,
                               errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"llama.cpp build {build}: `{binary} --help` did not run ({exc})",
                          "rebuild it: delete its folder and run kit engines build llamacpp again") from exc
    return lacking_flags(shown.stdout + shown.stderr)


def drivable(binary: Path, build: int, binary_sha256: str, model: Path, model_sha256: str,
             say: Callable[[str], None] = print) -> None:
    """Refuse a build the kit cannot drive, in one line naming what it lacks: a flag the kit passes, else
    an answer the kit reads on `model`. Checked once per binary (`binary_sha256`, as its BUILD.json records
    and kit.launch.llamacpp.llamacpp_build.record checked) and set of flags; the verdict is kept in PROBE.json."""
    record = binary.parent / PROBE_FILE
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = None
    if not (isinstance(known, dict) and known.get("binary_sha256") == binary_sha256
            and known.get("flags") == list(KIT_FLAGS) and isinstance(known.get("lacks"), list)):
        lacks = flags_lacking(binary, build)
        if not lacks:  # a server without the kit's flags would not start as the probe starts it
            say(f"probing llama.cpp build {build}'s server API (/props, /tokenize, /apply-template, /completion) ...")
            lacks = probe(binary, model, binary.parent / "probe-server.log")
        known = {"binary_sha256": binary_sha256, "flags": list(KIT_FLAGS), "model_sha256": model_sha256,
                 "lacks": lacks}
        write_json_atomic(record, known)
    if known["lacks"]:
        raise EngineError(f"llama.cpp build {build} cannot be driven by the kit: its llama-server lacks "
                          f"{'; '.join(map(str, known['lacks']))}",
                          "use a build that has them (the paper's, or a newer one); nothing was measured")
