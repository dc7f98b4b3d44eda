"""Importers: records of other harnesses as kit run folders (`kit import`)."""
