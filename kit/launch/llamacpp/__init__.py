"""llama-server as the kit starts it: the embedded engine and the proof it computes here, the named fixes and allowed flags, and any build N from its sources."""
