"""The `grid` protocol kind: its registration (`KIND`, kit.protocols.kind) and the modules it names."""

from kit.protocols.grid.protocol import KIND

__all__ = ["KIND"]
