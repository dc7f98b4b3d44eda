"""The `sweep` protocol kind: its registration (`KIND`, kit.protocols.kind) and the modules it names."""

from kit.protocols.sweep.protocol import KIND

__all__ = ["KIND"]
