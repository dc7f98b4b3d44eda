"""Table IV in one notation (k of n) in its Markdown, LaTeX and CSV, the sessions kept, and the counts each
table's cells hold said in its caption."""

from __future__ import annotations

import csv
import io

from kit.analysis import tables
from kit.analysis.findings_model import Table


def iv_row(differ: list[int], items: list[int], sessions: list[str] | None = None) -> dict:
    sessions = sessions or [f"s{i + 1}" for i in range(len(items))]
    return {"run": "reset-1", "model": "smollm2", "format": "Q4_1", "sessions": sessions, "items": items,
            "recompute_reproduces": list(items), "hit_reproduces": list(items), "paths_differ": differ,
            "across_sessions": {"sessions": len(items), "items": min(items), "recompute_same_in_all": min(items) - 1,
                                "hit_same_in_all": min(items)}}


def md_cells(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in rows]


def test_table_iv_says_k_of_n_per_session_and_keeps_the_sessions():
    out = tables.render("IV", Table(rows=[iv_row([4, 4], [6, 6])]))
    header, row = md_cells(out["md"])
    cells = dict(zip(header, row))
    assert cells["sessions"] == "2 (s1, s2)"
    assert cells["paths differ"] == "4 of 6 in each session"
    assert cells["same in all sessions: recompute"] == "5 of 6"
    assert "/" not in " ".join(row)
    assert "4 of 6 in each session" in out["tex"] and "2 (s1, s2)" in out["tex"]


def test_table_iv_names_each_session_when_they_differ():
    out = tables.render("IV", Table(rows=[iv_row([4, 3], [6, 5])]))
    cells = dict(zip(*md_cells(out["md"])))
    assert cells["paths differ"] == "s1: 4 of 6, s2: 3 of 5"
    assert cells["recompute reproduces"] == "s1: 6 of 6, s2: 5 of 5"


def test_table_iv_csv_holds_every_number_the_markdown_shows():
    table = Table(rows=[iv_row([4, 3], [6, 5])])
    out = tables.render("IV", table)
    lines = list(csv.DictReader(io.StringIO(out["csv"])))
    assert [(line["session"], line["paths_differ"], line["items"]) for line in lines] == [("s1", "4", "6"),
                                                                                          ("s2", "3", "5")]
    assert {line["sessions"] for line in lines} == {"2"}
    cells = dict(zip(*md_cells(out["md"])))
    for line in lines:
        assert f"{line['session']}: {line['paths_differ']} of {line['items']}" in cells["paths differ"]
        assert cells["same in all sessions: recompute"] == f"{line['recompute_same_in_all']} of " \
                                                          f"{line['items_in_all_sessions']}"


def test_every_caption_says_what_k_of_n_counts():
    for name, make in tables.LAYOUTS.items():
        layout = make(Table())
        uses_k_of_n = name in ("III", "IV", "VI", "VII")
        assert ("k of n" in layout.caption or "k of the n" in layout.caption) == uses_k_of_n, name
