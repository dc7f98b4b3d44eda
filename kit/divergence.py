"""Comparing emitted token sequences: identical, or where they first differ."""

from __future__ import annotations

from typing import Sequence


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """Index of the first position where `a` and `b` differ (a length difference counts), else None."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def emitted(record: dict) -> list:
    """The emitted tokens of a record: ids where the engine gave them, else token strings."""
    completion = record["completion"]
    ids = completion.get("token_ids")
    return list(ids) if ids is not None else list(completion.get("tokens") or ())
