"""The protocol kinds the kit can run: each kind's validation model and procedure."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from kit.protocols import flag_order, grid, pinning, reset, spec, sweep

PROCEDURES: dict[str, ModuleType] = {"reset": reset, "grid": grid, "pinning": pinning, "sweep": sweep,
                                     "flag_order": flag_order}
MODELS = {kind: module.MODEL for kind, module in PROCEDURES.items()}


def load(name_or_path: str, overrides: dict[str, Any] | None = None) -> tuple[spec.ProtocolBase, Path, str]:
    """Load and validate a protocol of any known kind: (protocol, file, sha256 of the file)."""
    return spec.load(name_or_path, MODELS, overrides)


def procedure(protocol: spec.ProtocolBase) -> ModuleType:
    return PROCEDURES[protocol.protocol]


def parse_text(text: str, source: str, overrides: dict[str, Any] | None = None) -> spec.ProtocolBase:
    """Validate protocol YAML held as text (e.g. the copy a run folder's manifest keeps)."""
    return spec.parse(spec.merge(yaml.safe_load(text), overrides or {}), source, MODELS)
