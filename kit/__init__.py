"""The cache-divergence reproducibility kit."""

__version__ = "0.1.0"
