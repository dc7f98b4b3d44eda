"""The three rules by which `kit verify` compares a rendered table (kit.bundle.rendered), on small tables."""

from __future__ import annotations

from kit.bundle import rendered

OURS = b"""**Table X.** Counts; k of n: items.

| Model | Weights | paths differ |
|---|---|---|
| smollm2 | Q4_1 | 4 of 6 in each session |
"""
SOURCE = {"rows": [{"model": "smollm2", "format": "Q4_1", "paths_differ": [4, 4], "items": [6, 6]}]}


def compare(theirs: bytes, relaid: str | None = None) -> rendered.Outcome:
    return rendered.compare_table("runs/r/analysis/tables/table_X.md", theirs, OURS, SOURCE, relaid)


def test_this_kits_rendering_is_compared_line_by_line():
    outcome = compare(OURS)
    # the values compared: the row's three cells and the caption
    assert (outcome.mismatches, outcome.rule, outcome.values) == ([], rendered.EXACT, 3 + 1)
    changed = compare(OURS.replace(b"4 of 6", b"3 of 6"))
    assert [(m.key, m.bundled) for m in changed.mismatches] == [("rows[0][2]", "3 of 6 in each session")]


def test_another_wording_passes_when_its_numbers_line_up_and_its_words_are_ours():
    older = OURS.replace(b"Counts; k of n: items.", b"Counts.").replace(b"4 of 6 in each session", b"4/6")
    outcome = compare(older)
    # the numbers compared, in order: 2 (smollm2), 4 and 1 (Q4_1), 4 and 6
    assert (outcome.mismatches, outcome.rule, outcome.values) == ([], rendered.IN_ORDER, 5)
    assert compare(older.replace(b"4/6", b"4/5")).mismatches
    assert compare(older.replace(b"smollm2", b"llama")).mismatches  # a word this kit's row does not have


def test_a_relaid_table_is_compared_by_the_numbers_it_shows():
    older = b"| Model | Weights | items | differ |\n|---|---|---|---|\n| smollm2 | Q4_1 | 6/6 | 4/4 |\n"
    assert compare(older).mismatches  # without `relaid`: the numbers do not line up, a mismatch
    outcome = compare(older, relaid="Table X before its k of n notation")
    assert (outcome.mismatches, outcome.rule) == ([], rendered.FOUND)
    forged = compare(older.replace(b"4/4", b"5/5"), relaid="Table X before its k of n notation")
    assert [m.recomputed for m in forged.mismatches] == ["<no recomputed value reads 5>"] * 1
    renamed = compare(older.replace(b"smollm2", b"llama"), relaid="Table X before its k of n notation")
    assert [m.recomputed for m in renamed.mismatches] == ["<no recomputed value reads 'llama'>"]
