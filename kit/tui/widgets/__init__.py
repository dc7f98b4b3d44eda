"""Small launcher widgets: the cache-state strip and the divergence plot."""
