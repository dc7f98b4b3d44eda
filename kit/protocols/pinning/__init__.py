"""The `pinning` protocol kind: its modules; its registration (`KIND`, kit.protocols.kind) is in `protocol`, which
the registry (kit.protocols.kinds) imports. Nothing is imported here: code that only reads the kind's files
(its records, results, views) loads none of the machinery that runs it (tests/test_import_cost.py)."""
