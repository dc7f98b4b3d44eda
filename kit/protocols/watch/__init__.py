"""The `watch` protocol kind: its registration (`KIND`, kit.protocols.kind) and the modules it names."""

from kit.protocols.watch.protocol import KIND

__all__ = ["KIND"]
