"""Reading a YAML data file the kit ships (the model registry, the paper's published values), or a
user's file in its place, and validating it: one way, with one-line errors naming the file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kit.core.errors import ConfigError, KitError


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


Model = TypeVar("Model", bound=BaseModel)


def validated(model: type[Model], data: Any, origin: str, where: Callable[[tuple[Any, ...], Any], str],
              fix: str, error: type[KitError] = ConfigError) -> Model:
    """`data` as `model`; else an `error` (a ConfigError) naming `origin`, the first problem's place
    (`where(loc, data)`), what is wrong and how many more problems there are."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first, more = err.errors()[0], err.error_count() - 1
        extra = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise error(f"{origin}: {where(tuple(first['loc']), data)}: {first['msg']}{extra}", fix) from None
