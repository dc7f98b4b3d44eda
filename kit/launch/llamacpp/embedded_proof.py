"""The proof that the embedded engine computes on this machine: one real completion, kept per machine.

A llama-server answers `/props` (and `/health`) before its CPU backend has computed anything, so a
server that starts proves little: an instruction this CPU lacks only shows once a token is computed.
The proof starts the server and asks for one short completion (a few tokens, temperature 0), and
counts the tokens that came back.

Proofs are kept as JSON in the kit cache, `<cache>/doctor/embedded-proof-<key>.json`, where the key
is a sha256 of what decides whether a proof still holds: the CPU's flags line, the kit version, the
wheel's `libggml-cpu` sha256, the sha256 of the backend library that ran, and the --cpu-backend
choice. Any change there is another key, so a stale proof is never reused. A failed proof is kept
too, with its error, and never counts as a success.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit import __version__
from kit.core.atomic_file import write_json_atomic
from kit.core.digests import sha256_json, sha256_text
from kit.core.errors import EngineError
from kit.record.manifest import now

if TYPE_CHECKING:
    from kit.launch.llamacpp.embedded import EmbeddedBinary

SCHEMA = 1
FOLDER = "doctor"
PROMPT = "The capital of France is"
SEED = 42  # the protocols' default seed
MAX_TOKENS = 4
LABEL = "embedded-proof"  # the proof's session: its server log is <doctor folder>/server-embedded-proof.log


def folder(cache: Path) -> Path:
    """Where proofs live inside the kit cache."""
    return cache / FOLDER


def key_inputs(found: EmbeddedBinary, choice: str, flags: set[str]) -> dict[str, str]:
    """What a proof depends on, each as it is compared (hashes, versions, the choice)."""
    from kit.launch.cpu import cpu_backend  # noqa: PLC0415 - the launcher imports this module; keep it light
    from kit.models.hashing import sha256_file  # noqa: PLC0415

    wheel_library = found.binary.parent / cpu_backend.WHEEL_LIBRARY
    wheel_sha = found.backend.library_sha256 if found.backend.name == "wheel" else sha256_file(wheel_library)
    return {"cpu_flags_sha256": sha256_text(" ".join(sorted(flags))),
            "kit_version": __version__, "wheel_library_sha256": wheel_sha,
            "backend_library_sha256": found.backend.library_sha256, "cpu_backend_choice": choice}


def key(inputs: dict[str, str]) -> str:
    return sha256_json(inputs)


def identity(found: EmbeddedBinary, choice: str, flags: set[str]) -> dict[str, Any]:
    """What a proof is for: its key, the inputs hashed into it, and the CPU backend that would run."""
    inputs = key_inputs(found, choice, flags)
    return {"key": key(inputs), "key_inputs": inputs, "cpu_backend": found.backend.to_json()}


def path(cache: Path, proof_key: str) -> Path:
    return folder(cache) / f"embedded-proof-{proof_key[:16]}.json"


def load(cache: Path, proof_key: str) -> dict[str, Any] | None:
    """The kept proof for this key (passed or failed), or None when there is none or it is unreadable."""
    try:
        record = json.loads(path(cache, proof_key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA or record.get("key") != proof_key:
        return None
    return record


def save(cache: Path, record: dict[str, Any]) -> Path:
    target = path(cache, record["key"])
    target.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(target, record)
    return target


def record(identity: dict[str, Any], outcome: dict[str, Any] | None, error: tuple[str, str | None] | None = None
           ) -> dict[str, Any]:
    """A proof as it is kept: the identity it was made for, when, and what came back (or the error)."""
    base = {"schema": SCHEMA, "ok": error is None, "at": now(), "key": identity["key"],
            "key_inputs": identity["key_inputs"], "cpu_backend": identity["cpu_backend"]}
    if error is not None:
        return {**base, "error": error[0], "fix": error[1]}
    return {**base, **(outcome or {}), "error": None, "fix": None}


def when(proof: dict[str, Any]) -> str:
    """The proof's date as shown: '2026-01-02 14:03 UTC'."""
    stamp = str(proof.get("at") or "")
    return f"{stamp[:10]} {stamp[11:16]} UTC" if len(stamp) >= 16 else stamp or "at an unknown date"


def server_log(cache: Path) -> Path:
    """The log of the latest proof's server (kept: a failure's message points at it)."""
    return folder(cache) / f"server-{LABEL}.log"


def run(found: EmbeddedBinary, model: Path, log: Path, ctx_size: int = 512) -> dict[str, Any]:
    """Start the embedded server, ask for one short completion at temperature 0, and say what came back.
    Raises EngineError (IllegalInstruction for a SIGILL) when it does not start or no tokens come back.
    The server is a NativeProvider session's (the runner's own start, log and SIGILL detection); `log` is
    where that session writes it (see server_log)."""
    from kit.engines.base import CompletionRequest  # noqa: PLC0415
    from kit.core.errors import IllegalInstruction  # noqa: PLC0415
    from kit.launch.native import ServerSpec  # noqa: PLC0415
    from kit.launch.provider import NativeProvider  # noqa: PLC0415

    spec = ServerSpec(binary=found.binary, model=model, ctx_size=ctx_size, threads=min(2, os.cpu_count() or 1),
                      env=found.env)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)  # the log of this proof only
    try:
        with NativeProvider(spec, cpu=found.backend).session(LABEL, log.parent) as live:
            started = time.monotonic()
            completion = live.engine.complete(CompletionRequest(PROMPT, max_tokens=MAX_TOKENS, seed=SEED, cache_prompt=False))
            seconds = round(time.monotonic() - started, 3)
    except IllegalInstruction as exc:
        raise IllegalInstruction(f"{exc.message} on the {found.backend.name} CPU backend",
                                 "run `kit doctor --cpu-backend portable`") from exc
    if not completion.token_ids:
        raise EngineError("the embedded engine answered /completion with no tokens", f"see its log: {log}")
    return {"build_info": live.launch.get("build_info"), "startup_seconds": live.launch.get("startup_seconds"),
            "completion_seconds": seconds, "prompt": PROMPT, "tokens": len(completion.token_ids),
            "text": completion.text, "finish_reason": completion.finish_reason, "binary": str(found.binary),
            "model": str(model)}
