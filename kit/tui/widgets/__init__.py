"""Small launcher widgets: the cache-state strip, the divergence plot and the one-question modal."""
