"""Protocol files: YAML, validated on load with errors that name the file, the key and what is allowed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kit.errors import ConfigError
from kit.paths import protocols_dir


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSettings(Strict):
    """Server settings the protocol fixes (the launcher adds host, port, model and threads)."""

    ctx_size: int = Field(4096, ge=256)
    cache_ram: int | None = Field(0, description="server-level prompt cache in MiB; 0 disables, null = default")


class Workload(Strict):
    source: Literal["auto", "gsm8k", "arithmetic"] = "auto"
    items: int = Field(100, ge=1)
    first_item: int = Field(0, ge=0)
    system_prompt: str | None = None


class ProtocolBase(Strict):
    """What every protocol file has: its kind, a description, the engine settings and the request seed."""

    protocol: str
    description: str = ""
    engine: EngineSettings = EngineSettings()
    seed: int = 42


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


def parse(data: Any, source: str, models: dict[str, type[Strict]]) -> Strict:
    """Validate protocol data against the model of its kind; raise ConfigError naming `source`, the key
    and the allowed values."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a protocol file must be a YAML mapping", "see protocols/reset.yaml")
    kind = data.get("protocol")
    if kind not in models:
        raise ConfigError(f"{source}: key 'protocol' is {kind!r}",
                          f"allowed values: {', '.join(sorted(models))}")
    try:
        return models[kind].model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{source}: key '{_where(first)}': {first['msg']}{more}",
                          "fix the protocol file; see protocols/reset.yaml for a valid example") from exc


def load(name_or_path: str, models: dict[str, type[Strict]],
         overrides: dict[str, Any] | None = None) -> tuple[Strict, Path, str]:
    """Load, override and validate a protocol. Returns (protocol, file, sha256 of the file's bytes)."""
    path = resolve(name_or_path)
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})", "fix the YAML syntax") from exc
    if overrides and isinstance(data, dict):
        data = merge(data, overrides)
    return parse(data, str(path), models), path, hashlib.sha256(raw).hexdigest()


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged
