"""Protocols: validated protocol files (data) and the procedures that run them."""
