"""Weight formats a protocol serves: where each format's GGUF comes from, resolved to verified files.

A format is the run's own model (`model: source`), a registry model or a path (`model: NAME|PATH`),
or a file produced here with gguf (`derive: F16|Q8_0|Q4_0|...`, from the run's model or from another
format named by `of`). Every file is pinned by its sha256 in the manifest; derived files also record
what they were made from and, when the protocol names one, the digest they were expected to have
(a mismatch is reported, not hidden: e.g. the paper's own dequantized file).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict

from pydantic import model_validator

from kit.core.errors import ConfigError
from kit.models.derived import ensure_format
from kit.launch.provider import EngineProvider
from kit.models.fetch import ModelFile, default_cache_dir, ensure_model
from kit.protocols.spec import Strict

SOURCE = "source"
LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")


class FormatSource(Strict):
    """Where one weight format's file comes from."""

    model: str | None = None  # "source" (the run's model), a registry name or a GGUF path
    derive: str | None = None  # produce this format with gguf ...
    of: str | None = None  # ... from this other format (default: the run's model)
    expect_sha256: str | None = None  # a digest the produced file is compared with (reported, not enforced)

    @model_validator(mode="after")
    def _one_way(self) -> FormatSource:
        if (self.model is None) == (self.derive is None):
            raise ValueError("give either 'model' (source, a registry name or a path) or 'derive' (a format)")
        if self.of is not None and self.derive is None:
            raise ValueError("'of' only goes with 'derive'")
        return self


def check_labels(formats: dict[str, FormatSource]) -> None:
    """Labels become pass ids and file names; `of` must name a format listed before it."""
    seen: list[str] = []
    for label, source in formats.items():
        if not LABEL.match(label):
            raise ValueError(f"format label {label!r}: use letters, digits, '_', '.' or '-'")
        if source.of is not None and source.of not in seen:
            raise ValueError(f"format {label!r} derives of {source.of!r}, which is not a format listed before it")
        seen.append(label)


def served_as_is(formats: dict[str, FormatSource]) -> str:
    """The one format of an engine that serves its checkpoint as it is (vLLM): `{LABEL: {model: source}}`;
    its label (e.g. BF16). Anything else needs GGUF files of other formats, which only llama.cpp serves."""
    if len(formats) != 1 or next(iter(formats.values())).model != SOURCE:
        raise ConfigError(f"formats {', '.join(formats)}: vLLM serves one checkpoint as it is, so a sweep on it has "
                          "one format, the run's own model", "give formats: {BF16: {model: source}} (sweep-vllm), "
                          "or run the formats on llama.cpp")
    return next(iter(formats))


# A format's entry in the manifest's `formats`: how its file was made or found, then the file itself
FormatEntry = TypedDict("FormatEntry", {
    "how": str, "from": str, "from_sha256": str, "converter_record": str, "expect_sha256": str,
    "matches_expected": bool, "path": str, "file": str, "sha256": str, "name": str | None}, total=False)


def run_model(provider: EngineProvider) -> ModelFile:
    """The model the run was started with, as its engine provider describes it."""
    details = provider.describe()
    path, digest = details.get("model_path"), details.get("model_sha256")
    if not path or not digest:
        raise ConfigError("this protocol derives weight formats from the run's model, but the engine provider "
                          "does not say which model file it serves", "run it with the embedded engine or --model")
    return ModelFile(Path(path), str(digest), details.get("model_name"), "the run's model")


def resolve(formats: dict[str, FormatSource], provider: EngineProvider, say=print,
            cache_dir: Path | None = None) -> dict[str, tuple[ModelFile, FormatEntry]]:
    """Every format's verified file and its manifest entry, in the protocol's order."""
    cache_dir = cache_dir or default_cache_dir()
    resolved: dict[str, tuple[ModelFile, FormatEntry]] = {}
    for label, source in formats.items():
        entry: FormatEntry
        if source.derive is not None:
            base = resolved[source.of][0] if source.of else run_model(provider)
            say(f"format {label}: {source.derive} from {base.path.name} (gguf; converted once, then cached)")
            made = ensure_format(base, source.derive, cache_dir)
            entry = {"how": f"derived {source.derive}", "from": source.of or SOURCE, "from_sha256": base.sha256,
                     "converter_record": made.path.name + ".json"}
            if source.expect_sha256:
                entry["expect_sha256"] = source.expect_sha256
                entry["matches_expected"] = made.sha256 == source.expect_sha256
        elif source.model == SOURCE:
            made, entry = run_model(provider), {"how": "the run's model"}
        elif source.model is not None:
            made, entry = ensure_model(source.model), {"how": f"model {source.model}"}
        else:  # FormatSource's validator: a model or a derivation, always one
            raise ValueError(f"format {label} names neither a model nor a derivation")
        resolved[label] = (made, {**entry, "path": str(made.path), "file": made.path.name, "sha256": made.sha256,
                                  "name": made.name})
    return resolved


def engine_details(label: str, model: ModelFile) -> dict[str, Any]:
    """What a pass's engine description says about the file it serves."""
    details = {"model_path": str(model.path), "model_name": model.name or model.path.name,
               "model_sha256": model.sha256, "format": label}
    if model.entry is not None:
        details["model_family"] = model.entry.family
    return details
