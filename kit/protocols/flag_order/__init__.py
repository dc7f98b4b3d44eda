"""The `flag_order` protocol kind: its registration (`KIND`, kit.protocols.kind) and the modules it names."""

from kit.protocols.flag_order.protocol import KIND

__all__ = ["KIND"]
