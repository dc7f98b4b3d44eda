"""Fig. 3 never draws a flip rate from a handful of positions as if it were a measurement: a margin bin
with fewer than FEW_POSITIONS positions is hatched, drawn without an interval and labelled with its n."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer

from kit.analysis import figures
from kit.analysis.findings_model import from_json

DEMO_FINDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "findings" / "demo-20261201-070851.json"


@pytest.fixture
def drawn(monkeypatch):
    """The figure figure_3 draws, kept instead of only saved."""
    kept = []

    def keep(fig, folder, stem):
        kept.append(fig)
        return [f"figures/{stem}.png"]

    monkeypatch.setattr(figures, "_save", keep)
    monkeypatch.setattr(figures.import_pyplot(), "close", lambda fig: None)
    return kept


def _bars(fig):
    left = fig.axes[0]
    return [(p.get_height(), p.get_hatch()) for p in left.patches], [t.get_text() for t in left.texts]


def _intervals(fig):
    return [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]


def test_a_bin_of_one_position_is_hatched_and_labelled_with_its_n(drawn):
    findings = json.loads(DEMO_FINDINGS.read_text())
    bins = findings["mechanism"]["reset"]["per_format"]["Q4_1"]["hazard"]["bins"]
    occupied = [b for b in bins if b["positions"]]
    assert any(b["positions"] == 1 and b["hazard"] == 1.0 for b in occupied)  # the 100 % from one position
    figures.figure_3(figures.data_3(from_json(findings)), Path("unused"))
    heights, labels = _bars(drawn[0])
    assert heights == [(100 * b["hazard"], "///") for b in occupied]
    assert labels == [f"n={b['positions']}" for b in occupied]
    assert not _intervals(drawn[0])  # no interval drawn for a hatched bin
    assert f"fewer than {figures.FEW_POSITIONS} positions" in drawn[0].axes[0].get_title()


def test_a_bin_with_enough_positions_is_a_solid_bar_with_its_interval(drawn):
    findings = json.loads(DEMO_FINDINGS.read_text())
    block = findings["mechanism"]["reset"]["per_format"]["Q4_1"]["hazard"]
    full = copy.deepcopy(block["bins"][2])
    full.update(positions=figures.FEW_POSITIONS, flips=5, hazard=0.25, ci_lo=0.1, ci_hi=0.45)
    block["bins"] = [full]
    figures.figure_3(figures.data_3(from_json(findings)), Path("unused"))
    heights, labels = _bars(drawn[0])
    assert heights == [(25.0, None)] and labels == [f"5/{figures.FEW_POSITIONS}"]
    assert "fewer than" not in drawn[0].axes[0].get_title()
    assert len(_intervals(drawn[0])) == 1


def test_the_figures_are_drawn_the_costliest_first_and_each_written(tmp_path, monkeypatch):
    # with two workers the mechanism's figure (the largest data, the longest to draw) starts first, so that the
    # last figure started does not run alone; every figure and its data are written whatever the order
    from kit.analysis import parallel  # noqa: PLC0415

    started = []
    real = parallel.Pool.submit
    monkeypatch.setattr(parallel.Pool, "submit", lambda self, fn, *args: started.append(args[0]) or real(self, fn, *args))
    grid = json.loads((DEMO_FINDINGS.parent / "grid-tiny-20261201-070919.json").read_text())
    grid["mechanism"] = json.loads(DEMO_FINDINGS.read_text())["mechanism"]  # figures 1 and 2, and 3
    findings = from_json(grid)
    data = figures.figure_data(findings)["data"]
    figures.write_all(findings, tmp_path, workers=2)
    assert started == sorted(data, key=lambda stem: -figures._drawing_cost(stem, data[stem], tmp_path))
    assert started == ["fig3_mechanism", "fig1_divergence", "fig2_formats"]  # not the figures' own order
    assert {p.name for p in tmp_path.glob("*.json")} == {f"{stem}.json" for stem in data}
