"""Workloads: what drives an engine during a pass (BFCL agent episodes, GSM8K items, prose)."""
