"""A registry of plugs: the kit's own, and those installed packages register by an entry point. One class for
every such list of the kit (the protocol kinds, kit.protocols.kinds.KINDS; the engines,
kit.engines.registry.ENGINES), so that adding one from outside the kit is the same step for each: an entry point
in the group the registry names (`kit.kinds`, `kit.engines`), `<name> = "<module>"`, the module holding the
plug's registration under the registry's attribute (`KIND`, `ENGINE`), which `pip install` writes into the
package's metadata from its pyproject.toml's `[project.entry-points."<group>"]` (docs/architecture.md,
"How to add").

The registry is lazy: a plug the kit ships given as its module's name is imported when it is first looked up,
and the entry points are read only when a name the kit does not ship, or every name, is asked for (and read
again once sys.path changed). A plug set by hand (`REGISTRY["toy"] = ...`, a test's) is held as it is, over
any other of its name, until it is deleted.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from kit.core.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Plug(Generic[T]):
    """What a registry holds: its class, what one is called (`kind`, `engine`), the entry-point group of the
    installed ones, the attribute of a module holding one's registration, and how such a registration is
    written (for the error naming a module that holds none)."""

    cls: type[T]
    noun: str
    group: str
    attribute: str
    written: str  # e.g. "Kind(name={name!r}, ...)` (kit.protocols.kind)": {name} is the plug's name


class Registry(MutableMapping[str, T]):
    """Name -> plug: the kit's own (`shipped`: name -> the plug, or the module holding it, imported on the first
    look-up), then those the installed packages register under the entry-point group (see the module)."""

    def __init__(self, plug: Plug[T], shipped: Mapping[str, str | T]):
        self.plug = plug
        self.shipped: Mapping[str, str | T] = dict(shipped)
        self._found: dict[str, str] = {}  # name -> module, from the entry points
        self._found_on: tuple[str, ...] | None = None  # the sys.path they were read on
        self._by_hand: dict[str, T] = {}
        self._loaded: dict[str, T] = {}  # imported so far

    def _installed(self) -> dict[str, str]:
        if self._found_on != tuple(sys.path):
            self._found, self._found_on = installed(self.plug, self.shipped), tuple(sys.path)
            self._loaded = {name: plug for name, plug in self._loaded.items() if name in self.shipped}
        return self._found

    def _names(self, found: Mapping[str, str]) -> list[str]:
        return [*self.shipped, *found, *(name for name in self._by_hand if name not in self.shipped
                                         and name not in found)]

    def __getitem__(self, name: str) -> T:
        if name in self._by_hand:
            return self._by_hand[name]
        if name not in self.shipped:
            module = self._installed()[name]  # read again: a plug it found may be gone
            if name not in self._loaded:
                self._loaded[name] = imported(self.plug, name, module, installed=True)
            return self._loaded[name]
        own = self.shipped[name]
        if not isinstance(own, str):
            return own
        if name not in self._loaded:
            self._loaded[name] = imported(self.plug, name, own, installed=False)
        return self._loaded[name]

    def __setitem__(self, name: str, plug: T) -> None:
        self._by_hand[name] = plug

    def __delitem__(self, name: str) -> None:
        del self._by_hand[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names(self._installed()))

    def __len__(self) -> int:
        return len(self._names(self._installed()))

    def __contains__(self, name: object) -> bool:
        return name in self.shipped or name in self._by_hand or name in self._installed()

    def loaded(self) -> list[T]:
        """The plugs looked up so far (their modules imported; the kit's own given as plugs), in registry order;
        no entry point is read."""
        found = self._found if self._found_on == tuple(sys.path) else {}
        return [self[name] for name in self._names(found) if name in self._by_hand or name in self._loaded
                or (name in self.shipped and not isinstance(self.shipped[name], str))]


def installed(plug: Plug[Any], shipped: Mapping[str, Any]) -> dict[str, str]:
    """What the installed packages register under `plug`'s entry-point group: name -> the module holding its
    registration, by name. An entry point that names one the kit ships, a name two packages register, or an
    object rather than a module is refused with the package that declares it."""
    found: dict[str, str] = {}
    noun, group = plug.noun, plug.group
    for point in sorted(entry_points(group=group), key=lambda point: point.name):
        package = f" of the package {point.dist.name}" if point.dist is not None else ""
        where = f"the entry point {point.name} = {point.value!r}{package} (group {group})"
        if point.name in shipped:
            raise ConfigError(f"{where} registers {_a(noun)} this kit ships", f"rename the {noun} in that package")
        if point.name in found:
            raise ConfigError(f"{where}: another package registers {_a(noun)} {point.name!r} too",
                              "uninstall one of the two packages")
        if point.attr:
            raise ConfigError(f"{where} names an object, not a module",
                              f"name the module that holds `{plug.attribute}`: {point.name} = {point.module!r}")
        found[point.name] = point.module
    return found


def imported(plug: Plug[T], name: str, module: str, *, installed: bool) -> T:
    """The registration (`plug.attribute`) of `module`, which must be that of the plug called `name`."""
    noun, attribute = plug.noun, plug.attribute
    where = (f"the {noun} {name!r} (entry point of group {plug.group}: {module!r})" if installed
             else f"the {noun} {name!r}")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        if not installed:
            raise
        raise ConfigError(f"{where} cannot be loaded: {exc}",
                          "fix the package that declares it, or uninstall it") from exc
    if not isinstance(found, plug.cls) or getattr(found, "name", None) != name:
        what = (f"registers the {noun} {getattr(found, 'name', None)!r}" if isinstance(found, plug.cls)
                else f"is a {type(found).__name__}")
        raise ConfigError(f"{where}: {module}.{attribute} {what}, not the {noun} {name!r}",
                          f"end {module} with `{attribute} = {plug.written.format(name=name)}")
    return found


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"
