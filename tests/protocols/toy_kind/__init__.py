"""A protocol kind in a package of its own, outside the kit: `toy` asks the engine one prompt a number of times
and counts the distinct answers. tests/protocols/test_add_a_kind.py copies this package into a temporary
folder and registers it the documented way (docs/architecture.md, "How to add"): an entry point of the group
`kit.kinds`, `toy = "toy_kind"`, naming the module that holds `KIND`."""

from .protocol import KIND

__all__ = ["KIND"]
