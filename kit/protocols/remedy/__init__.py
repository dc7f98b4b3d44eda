"""The remedy kind: fixes held against the unfixed engine on the paper's workloads (docs/remedy.md)."""

from kit.protocols.remedy.protocol import KIND

__all__ = ["KIND"]
