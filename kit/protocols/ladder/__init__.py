"""The `ladder` protocol kind: its registration (`KIND`, kit.protocols.kind) and the modules it names."""

from kit.protocols.ladder.protocol import KIND

__all__ = ["KIND"]
