"""The number-by-number comparison kit verify relies on."""

from __future__ import annotations

import json

from kit.bundle.value_diff import compare_file, compare_json


def test_equal_values_give_no_mismatch():
    value = {"a": 1, "b": [1.5, "x", None, True], "c": {"d": float("nan")}}
    assert compare_json(value, json.loads(json.dumps(value)), "f.json") == []


def test_floats_agree_within_tolerance_only():
    assert compare_json({"p": 0.1 + 0.2}, {"p": 0.3}, "f") == []
    [mismatch] = compare_json({"p": 0.3}, {"p": 0.3001}, "f")
    assert (mismatch.file, mismatch.key, mismatch.bundled, mismatch.recomputed) == ("f", "p", 0.3, 0.3001)


def test_integers_strings_and_types_must_match_exactly():
    found = compare_json({"n": 4, "s": "OK", "t": 1, "b": True}, {"n": 5, "s": "VOID", "t": "1", "b": 1}, "f")
    assert sorted(m.key for m in found) == ["b", "n", "s", "t"]


def test_nested_keys_are_named_with_their_path():
    bundled = {"sessions": [{"paths_differ": 2}, {"paths_differ": 1}]}
    recomputed = {"sessions": [{"paths_differ": 2}, {"paths_differ": 3}]}
    [mismatch] = compare_json(bundled, recomputed, "results/t.json")
    assert mismatch.key == "sessions[1].paths_differ"
    assert "results/t.json sessions[1].paths_differ: bundled 1, recomputed 3" in mismatch.line()


def test_missing_keys_and_list_lengths_are_reported():
    found = compare_json({"a": [1, 2], "gone": 1}, {"a": [1], "new": 2}, "f")
    assert {m.key for m in found} == {"a.length", "gone", "new"}


def test_csv_cells_compare_as_numbers():
    assert compare_file("t.csv", b"a,b\n1,0.5\n", b"a,b\r\n1,0.50\r\n") == []
    [mismatch] = compare_file("t.csv", b"a,b\n1,0.5\n", b"a,b\n2,0.5\n")
    assert mismatch.key == "[1][0]" and (mismatch.bundled, mismatch.recomputed) == (1, 2)


def test_unreadable_json_is_a_mismatch():
    [mismatch] = compare_file("f.json", b"{not json", b"{}")
    assert mismatch.file == "f.json"


def test_a_damaged_csv_is_a_mismatch_not_a_crash():
    [mismatch] = compare_file("t.csv", b"a,b\r1,2\x0b", b"a,b\n1,2\n")
    assert mismatch.file == "t.csv" and "unreadable" in mismatch.bundled
