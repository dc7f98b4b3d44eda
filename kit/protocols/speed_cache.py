"""Engine speeds measured once and kept in the kit's cache: a run whose speed probe (kit.protocols.estimate) would
send the request an earlier run already measured, on the same machine, engine, model and server settings, reads
that measurement instead of starting a server only to measure it again.

A measurement is kept as `KIT_CACHE_DIR/speed/<key sha256>.json` under a key of everything that sets the probe
request's speed (`SpeedKey`): the CPU (model name and instruction-set flags), the engine's files (llama-server and
the shared libraries beside it, by sha256), its CPU backend (name and library sha256), the model (sha256), the
server's launch settings (threads, slots, context, flags and the GGML_/LLAMA_/OMP_ environment; not its port, its
paths or --cache-ram, which the probe's uncached request on a fresh server does not use) and the request (the
prompt's sha256, its token limit and seed). Only a server the kit starts from a binary on this machine
(kit.launch.provider.NativeProvider) has such a key: an engine at a URL, in a container or vLLM is measured on
every run.

The estimate stays a measurement: the cache holds what a probe measured and when (`measured_at`), and the run's
manifest says which it used (`estimate.speed`). A cache file is untrusted input: one that is not a regular file
of this schema, whose numbers are not finite and positive, whose key is not the run's, that was measured in the
future or more than `MAX_AGE_DAYS` ago is ignored with a notice naming why, and the speed is measured again
(the file rewritten). `KIT_FRESH_ESTIMATE=1` measures again regardless.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from kit.core.atomic_file import write_text_atomic
from kit.core.digests import sha256_json
from kit.core.errors import ConfigError
from kit.core.paths import cache_dir

SCHEMA: Literal["kit.speed/1"] = "kit.speed/1"
FRESH = "KIT_FRESH_ESTIMATE"  # 1: measure the speed again even where the cache holds it
MAX_AGE_DAYS = 7  # an older measurement is measured again (the machine's other work, its cooling, may have changed)
MAX_FILE_BYTES = 16 * 1024
SPEED_ENV = ("GGML_", "LLAMA_", "OMP_")  # environment a llama-server reads that may change its speed
UNKEYED_FLAGS = ("--host", "--port", "-m", "--cache-ram")  # flags (with their value) that do not set the speed

Rate = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]


class SpeedKey(BaseModel):
    """Everything that sets the speed of the probe's request (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cpu: str
    isa_sha256: str
    engine_files: dict[str, str]  # file name beside llama-server (and llama-server itself) -> sha256
    cpu_backend: str | None
    cpu_backend_sha256: str | None
    model_sha256: str
    server_args: list[str]
    server_env: dict[str, str]
    prompt_sha256: str
    max_tokens: int
    seed: int

    def sha256(self) -> str:
        return sha256_json(self.model_dump())


class CachedSpeed(BaseModel):
    """One cache file: a probe's measurement, its key and when it was made."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    schema_: Literal["kit.speed/1"] = Field(alias="schema")
    key: SpeedKey
    measured_at: AwareDatetime
    prefill_tokens_per_s: Rate
    decode_tokens_per_s: Rate
    prompt_tokens: int = Field(ge=0, le=10_000_000)
    startup_seconds: float = Field(ge=0, le=86_400, allow_inf_nan=False)


@dataclass(frozen=True)
class Lookup:
    """What the cache holds for a key: the measurement (None: measure), and a line on a file it ignored."""

    found: CachedSpeed | None
    ignored: str | None = None


def fresh_asked(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Does the person ask for a fresh measurement (KIT_FRESH_ESTIMATE=1)? Refused in one line unless 1, 0 or empty."""
    value = environ.get(FRESH, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"{FRESH}={value!r} is neither 1 nor 0",
                          f"set {FRESH}=1 to measure the engine's speed again, or unset it to reuse a measurement")
    return value == "1"


def server_args(argv: list[str]) -> list[str]:
    """A llama-server argv without its binary and the flags (with their values) that do not set its speed."""
    kept, words = [], iter(argv[1:])
    for word in words:
        if word in UNKEYED_FLAGS:
            next(words, None)
        else:
            kept.append(word)
    return kept


def engine_files(binary: Path, hashes: Any) -> dict[str, str]:
    """sha256 of llama-server and of every shared library beside it (`hashes`: a kit.models.hashing.HashCache)."""
    from kit.models.hashing import sha256_file  # noqa: PLC0415 - loads with a run's probe only

    files = [binary, *sorted(p for p in binary.parent.iterdir() if ".so" in p.name and p.is_file())]
    found = {}
    for path in files:
        digest = hashes.lookup(path)
        if digest is None:
            digest = sha256_file(path)
            hashes.remember(path, digest)
        found[path.name] = digest
    return found


def key_for(provider: Any, prompt_sha256: str, max_tokens: int, seed: int) -> SpeedKey | None:
    """The key of a probe on `provider`'s servers, or None where it has none (not a server the kit starts from
    a binary and a model on this machine, or a model whose sha256 it was not given)."""
    from kit.launch.cpu.cpu_backend import cpu_flags  # noqa: PLC0415 - launch machinery loads when a run starts
    from kit.launch.provider import NativeProvider  # noqa: PLC0415
    from kit.models.hashing import HashCache  # noqa: PLC0415
    from kit.record.provenance import cpu_model  # noqa: PLC0415

    model_sha256 = getattr(provider, "details", {}).get("model_sha256")
    if not isinstance(provider, NativeProvider) or not isinstance(model_sha256, str):
        return None
    spec, cpu = provider.spec, provider.cpu
    env = spec.env or {}
    return SpeedKey(cpu=cpu_model(), isa_sha256=sha256_json(sorted(cpu_flags())),
                    engine_files=engine_files(spec.binary, HashCache(folder() / "engine-hashes.json")),
                    cpu_backend=cpu.name if cpu else None, cpu_backend_sha256=cpu.library_sha256 if cpu else None,
                    model_sha256=model_sha256, server_args=server_args(spec.argv(0)),
                    server_env={k: v for k, v in sorted(env.items()) if k.startswith(SPEED_ENV)},
                    prompt_sha256=prompt_sha256, max_tokens=max_tokens, seed=seed)


def folder() -> Path:
    return cache_dir() / "speed"


def path_for(key: SpeedKey) -> Path:
    return folder() / f"{key.sha256()}.json"


def lookup(key: SpeedKey, now: datetime | None = None) -> Lookup:
    """The measurement kept for `key`, if a trustworthy one is kept (see the module's docstring)."""
    from kit.core.regular_file import read_regular  # noqa: PLC0415

    path = path_for(key)
    if not path.exists() and not path.is_symlink():
        return Lookup(None)

    def ignored(why: str) -> Lookup:
        return Lookup(None, f"ignoring the cached speed measurement {path}: {why}; measuring the speed again")

    try:
        entry = CachedSpeed.model_validate_json(read_regular(path, "the cached speed measurement", MAX_FILE_BYTES,
                                                             "delete it"))
    except ConfigError as exc:
        return ignored(exc.message.removeprefix(f"the cached speed measurement {path} "))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        return ignored(f"not a {SCHEMA} measurement ({where}: {first['msg']})")
    if entry.key != key:
        return ignored("it was measured under another key (another engine, model, machine or prompt)")
    now = now or datetime.now(timezone.utc)
    if entry.measured_at > now + timedelta(minutes=5):
        return ignored(f"it says it was measured at {entry.measured_at.isoformat()}, in the future")
    if now - entry.measured_at > timedelta(days=MAX_AGE_DAYS):
        return ignored(f"it was measured at {entry.measured_at.isoformat()}, more than {MAX_AGE_DAYS} days ago")
    return Lookup(entry)


def keep(key: SpeedKey, entry: CachedSpeed) -> Path:
    """Write `entry` as `key`'s cache file (atomically); its path."""
    path = path_for(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, entry.model_dump_json(by_alias=True, indent=1) + "\n")
    return path
