"""Model files: a registry pinned by sha256, fetching, verification and format conversion."""
