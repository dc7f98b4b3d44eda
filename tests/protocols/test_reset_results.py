"""The restored-state control's results from records as read: each item's outputs per path (`ItemPaths`), the
session's counts and correctness, and a record of neither path refused in one line."""

from __future__ import annotations

import pytest

from kit.core.errors import KitError
from kit.protocols.reset.results import ItemPaths, counts, item_paths, outcomes


def _record(seq: int, unit: str, expect: str, ids: list[int], text: str = "", reference: str | None = None,
            outcome: str = "ok") -> dict:
    return {"seq": seq, "unit": unit, "expect": expect, "reference": reference,
            "completion": {"outcome": outcome, "text": text, "token_ids": ids}}


def _item(unit: str, first: int, cold: tuple[list[int], list[int]], warm: tuple[list[int], list[int]],
          texts: tuple[str, str] = ("", ""), reference: str | None = None) -> list[dict]:
    """An item's four phases (cold, warm, cold, warm), in seq order from `first`."""
    return [_record(first, unit, "cold", cold[0], texts[0], reference),
            _record(first + 1, unit, "warm", warm[0], texts[1], reference),
            _record(first + 2, unit, "cold", cold[1], texts[0], reference),
            _record(first + 3, unit, "warm", warm[1], texts[1], reference)]


def test_each_items_outputs_per_path_and_the_sessions_counts():
    records = [*_item("same", 0, ([1, 2], [1, 2]), ([1, 2], [1, 2])),
               *_item("cache", 4, ([1, 2], [1, 2]), ([1, 3], [1, 3])),
               *_item("noisy", 8, ([1, 2], [1, 4]), ([1, 2], [1, 2]))]
    units = item_paths(list(reversed(records)))  # read in any order: phases are put back in seq order
    assert units["cache"] == ItemPaths(cold=[(1, 2), (1, 2)], warm=[(1, 3), (1, 3)], texts={"cold": "", "warm": ""})
    assert counts(units) == {"items": 3, "recompute_reproduces": 2, "hit_reproduces": 3, "paths_differ": 1,
                             "cache_caused": 1}


def test_an_item_with_a_failed_phase_or_missing_phases_is_left_out():
    failed = _item("failed", 0, ([1], [1]), ([1], [1]))
    failed[1]["completion"]["outcome"] = "error"
    assert item_paths([*failed, *_item("short", 4, ([1], [1]), ([1], [1]))[:3]]) == {}


def test_correctness_per_path_and_the_flips_from_the_texts():
    units = item_paths([*_item("lost", 0, ([1], [1]), ([2], [2]), ("#### 4", "#### 5"), "4"),
                        *_item("kept", 4, ([1], [1]), ([1], [1]), ("#### 7", "#### 7"), "7"),
                        *_item("unscored", 8, ([1], [1]), ([1], [1]))])
    scored = outcomes(units)
    assert scored is not None
    assert (scored.items, scored.recompute_correct, scored.hit_correct) == (2, 2, 1)
    assert (scored.recompute_right_hit_wrong, scored.recompute_wrong_hit_right) == (1, 0)
    assert outcomes(item_paths(_item("unscored", 0, ([1], [1]), ([1], [1])))) is None


def test_a_record_of_neither_path_is_refused_in_one_line_naming_its_unit():
    records = _item("q1", 0, ([1], [1]), ([1], [1]))
    records[2]["expect"] = "lukewarm"
    with pytest.raises(KitError) as caught:
        item_paths(records)
    assert caught.value.line().startswith("a reset record of unit 'q1' expects 'lukewarm', neither cold nor warm")
