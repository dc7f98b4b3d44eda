"""Protocol files: YAML, validated on load with errors that name the file, the key and what is allowed."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from kit.core.errors import ConfigError
from kit.core.paths import protocols_dir
from kit.engines import registry
from kit.protocols import yaml_strict
from kit.protocols.bounds import FIRST_ITEM_MAX, ITEMS_MAX, CacheRam, CtxSize, Seed, count

# The command-line options that override protocol keys: an error in such a value names the option.
OPTION_FOR = {"workload.items": "--items", "workload.episodes": "--episodes", "sessions": "--sessions",
              "histories": "--histories", "max_tokens": "--max-tokens", "cycles": "--cycles",
              "per_arm": "--per-arm", "calibration.rounds": "--calibration-rounds",
              "regimes.always_fresh": "--always-fresh", "regimes.steady": "--steady",
              "engine.cache_ram": "--cache-ram"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSettings(Strict):
    """Server settings the protocol fixes (the launcher adds host, port, model and threads)."""

    ctx_size: CtxSize = 4096
    cache_ram: CacheRam | None = Field(0, description="server-level prompt cache in MiB; 0 disables, null = default")
    # The engine the file is written for: the launcher calls it ready only where `kit doctor` finds that engine,
    # and offers only engines of it. Not in the run's resolved protocol (`kit run --engine` says what ran).
    kind: str = Field(registry.DEFAULT, exclude=True)

    @field_validator("kind")
    @classmethod
    def _runs(cls, name: str) -> str:
        """An engine `kit run` runs (kit.engines.registry.run_choices)."""
        if name not in registry.run_choices():
            raise ValueError(f"{name!r} is not an engine kit run runs: give one of {', '.join(registry.run_choices())}")
        return name


class Workload(Strict):
    source: Literal["auto", "gsm8k", "arithmetic"] = "auto"
    items: int = count(1, ITEMS_MAX, 100)
    first_item: int = count(0, FIRST_ITEM_MAX, 0)
    system_prompt: str | None = None


class ProtocolBase(Strict):
    """What every protocol file has: its kind, a description, the engine settings and the request seed."""

    protocol: str
    description: str = ""
    engine: EngineSettings = EngineSettings()
    seed: Seed = 42

    @field_validator("max_tokens", check_fields=False)
    @classmethod
    def _fits_context(cls, max_tokens: int, info: ValidationInfo) -> int:
        """Kinds with a `max_tokens` key: an answer cannot be longer than the server's context."""
        engine = info.data.get("engine")
        if engine is not None and max_tokens > engine.ctx_size:
            raise ValueError(f"{max_tokens} exceeds engine.ctx_size {engine.ctx_size} (max_tokens <= ctx_size)")
        return max_tokens


def resolve(name_or_path: str) -> Path:
    """A protocol name (`reset`) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"protocol file not found: {path}", "check the path")
        return path
    candidate = protocols_dir() / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in protocols_dir().glob("*.yaml"))
    raise ConfigError(f"unknown protocol {name_or_path!r}", f"choose one of {', '.join(known)} or give a YAML path")


Setting = Union[int, float, bool, str, None]  # a value an option or the launcher's form sets a protocol key to
# protocol keys -> what they are set to, nested as in the file (`{"workload": {"items": 5}}`); `merge` applies them
Overrides: TypeAlias = "dict[str, Setting | Overrides]"

M = TypeVar("M", bound=Strict)  # the protocol model a file validates against (parse, load)

def _where(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(top level)"


def _got(error: ErrorDetails) -> str:
    value = error.get("input")
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 40):
        return f" (got {value!r})"
    return ""


def overridden_keys(overrides: Overrides | None, prefix: str = "") -> list[str]:
    """The dotted keys an overrides mapping sets (`{"workload": {"items": 5}}` -> `["workload.items"]`)."""
    keys = []
    for key, value in (overrides or {}).items():
        dotted = f"{prefix}{key}"
        keys.extend(overridden_keys(value, f"{dotted}.") if isinstance(value, dict) else [dotted])
    return keys


def parse(data: Any, source: str, models: Mapping[str, type[M]], options: dict[str, str] | None = None) -> M:
    """Validate protocol data against the model of its kind; raise ConfigError naming `source`, the key
    and the allowed values, or the option (from `options`: dotted key -> option) that set the value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a protocol file must be a YAML mapping", "see protocols/reset.yaml")
    kind = data.get("protocol")
    if not isinstance(kind, str) or kind not in models:
        raise ConfigError(f"{source}: key 'protocol' is {kind!r}",
                          f"allowed values: {', '.join(sorted(models))}")
    try:
        return models[kind].model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _where(first)
        first["msg"] = first["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        option = (options or {}).get(where)
        if option:
            raise ConfigError(f"option {option}: {first['msg']}{_got(first)} (it sets the protocol's '{where}')",
                              f"give {option} a value within the limits in docs/protocols.md") from None
        raise ConfigError(f"{source}: key '{where}': {first['msg']}{_got(first)}{more}",
                          "fix the protocol file; the limits are in docs/protocols.md") from None


def load(name_or_path: str, models: Mapping[str, type[M]],
         overrides: Overrides | None = None) -> tuple[M, Path, str]:
    """Load, override and validate a protocol. Returns (protocol, file, sha256 of the file's bytes)."""
    path = resolve(name_or_path)
    raw = path.read_bytes()
    data = yaml_strict.load(raw, str(path))
    if overrides and isinstance(data, dict):
        data = merge(data, overrides)
    options = {key: OPTION_FOR[key] for key in overridden_keys(overrides) if key in OPTION_FOR}
    return parse(data, str(path), models, options), path, hashlib.sha256(raw).hexdigest()


def merge(base: Overrides, extra: Overrides) -> Overrides:
    """`base` (overrides, or a protocol file's mapping as YAML read it, before validation) with `extra` set in it:
    a mapping in both is merged key by key, any other value of `extra` replaces the one in `base`."""
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        merged[key] = merge(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
    return merged
