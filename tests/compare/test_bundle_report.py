"""The bundle's HTML report shows `kit compare`'s table when the run's analysis folder holds
compare-paper.json: its own small section, escaped, in place of the generic JSON view."""

from __future__ import annotations

import json

from kit.bundle.report import COMPARE_FILE, render
from tests.bundle.conftest import bundled_run

LINE = {"table": "Table V", "row": "llama.cpp Qwen2.5-7B F16", "quantity": "path divergence",
        "published": "29/80 = 36.2% [26.2, 47.2]", "this_run": "60/80 = 75.0% [64.5, 83.2]",
        "verdict": "inconsistent", "rule": "rate: the published value inside this run's 95% interval",
        "note": "", "run": "grid-x", "numbers": {"published": {"k": 29}}}


def page(doc) -> str:
    run = bundled_run("grid-x", {"run_id": "grid-x", "status": "finished"},
                      {COMPARE_FILE: json.dumps(doc).encode(), "results/table.json": b'{"a": 1}'})
    return render([run], {"created": "now", "kit": {"version": "0"}})


def test_the_report_has_a_comparison_section():
    html = page({"counts": {"consistent": 0, "inconsistent": 1}, "lines": [LINE],
                 "absent": [{"table": "Table III", "rows": ["a", "b"], "reason": "no grid runs"}]})
    assert "Against the paper's published values (kit compare)" in html
    assert "consistent 0, inconsistent 1" in html and "29/80 = 36.2% [26.2, 47.2]" in html
    assert "Not in this run: Table III: 2 published rows (no grid runs)" in html
    assert "<h3>analysis/compare-paper.json</h3>" not in html  # not shown a second time as raw JSON
    assert "numbers" not in html  # the detail stays in the file; the report keeps the table small


def test_text_from_the_file_is_escaped():
    html = page({"counts": {}, "lines": [{**LINE, "row": "<script>alert(1)</script>"}]})
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def test_a_file_of_another_shape_is_linked_not_rendered():
    html = page({"lines": "not a list"})
    assert "Against the paper's published values" not in html
    assert '<a href="runs/grid-x/analysis/compare-paper.json">' in html  # the raw file, linked
    assert "not a list" not in html  # never dumped into the page
