"""Protocols: validated protocol files (data) and the procedures that run them, one registered kind
each (kit.protocols.kind: what a kind is and how to add one; kit.protocols.kinds: the list)."""
