"""Helpers every layer uses: errors, digests, atomic files, paths, limits, safe text, run events."""
