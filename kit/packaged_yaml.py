"""Reading a YAML data file the kit ships (the model registry, the paper's published values), or a
user's file in its place: one way, with one-line errors naming the file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kit.errors import ConfigError


def read_yaml(package: str, name: str, path: Path | None, what: str) -> tuple[Any, str]:
    """(the data, where it came from) of the YAML file at `path`, or of `name` shipped in `package`."""
    if path is None:
        text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
        origin = f"{package.replace('.', '/')}/{name}"
    else:
        try:
            text, origin = Path(path).read_text(encoding="utf-8"), str(path)
        except OSError as err:
            raise ConfigError(f"cannot read {what} {path}: {err.strerror}", "check the path") from None
    try:
        return yaml.safe_load(text), origin
    except yaml.YAMLError as err:
        raise ConfigError(f"{origin}: not valid YAML ({err})", "fix the YAML syntax") from None
