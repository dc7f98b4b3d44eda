"""Protocol files: YAML, validated on load with errors that name the file, the key and what is allowed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kit.errors import ConfigError
from kit.paths import protocols_dir


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSettings(Strict):
    """Server settings the protocol fixes (the launcher adds host, port, model and threads)."""

    ctx_size: int = Field(4096, ge=256)
    cache_ram: int | None = Field(0, description="server-level prompt cache in MiB; 0 disables, null = default")
    fresh_server_per_session: bool = True


class Workload(Strict):
    source: Literal["auto", "gsm8k", "arithmetic"] = "auto"
    items: int = Field(100, ge=1)
    first_item: int = Field(0, ge=0)
    system_prompt: str | None = None


class Phase(Strict):
    name: str
    cache_prompt: bool
    expect: Literal["cold", "warm"]


class Gates(Strict):
    cold_max_cached_tokens: int = Field(0, ge=0)
    warm_min_cached_tokens: int = Field(1, ge=1)
    abort_violation_share: float = Field(0.10, ge=0, le=1)
    abort_after_items: int = Field(3, ge=1)


class ResetProtocol(Strict):
    """The restored-state control: each item served in phases (cold, warm, cold, warm) per session."""

    protocol: Literal["reset"]
    description: str = ""
    engine: EngineSettings = EngineSettings()
    workload: Workload = Workload()
    sessions: int = Field(3, ge=1)
    order_seed: int = 20261007
    seed: int = 42
    max_tokens: int = Field(1024, ge=1)
    top_logprobs: int = Field(5, ge=1, le=20)
    phases: tuple[Phase, ...]
    gates: Gates = Gates()

    @model_validator(mode="after")
    def _two_of_each(self) -> "ResetProtocol":
        kinds = [p.expect for p in self.phases]
        if kinds.count("cold") != 2 or kinds.count("warm") != 2:
            raise ValueError("phases must hold two cold and two warm phases (e.g. cold, warm, cold, warm)")
        return self


PROTOCOLS: dict[str, type[Strict]] = {"reset": ResetProtocol}


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


def _where(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(top level)"


def parse(data: Any, source: str) -> Strict:
    """Validate protocol data; raise ConfigError naming `source`, the key and the allowed values."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a protocol file must be a YAML mapping", "see protocols/reset.yaml")
    kind = data.get("protocol")
    if kind not in PROTOCOLS:
        raise ConfigError(f"{source}: key 'protocol' is {kind!r}",
                          f"allowed values: {', '.join(sorted(PROTOCOLS))}")
    try:
        return PROTOCOLS[kind].model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{source}: key '{_where(first)}': {first['msg']}{more}",
                          "fix the protocol file; see protocols/reset.yaml for a valid example") from exc


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> tuple[Strict, Path, str]:
    """Load, override and validate a protocol. Returns (protocol, file, sha256 of the file's bytes)."""
    path = resolve(name_or_path)
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})", "fix the YAML syntax") from exc
    if overrides and isinstance(data, dict):
        data = _merge(data, overrides)
    return parse(data, str(path)), path, hashlib.sha256(raw).hexdigest()


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
