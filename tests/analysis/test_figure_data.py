"""Each figure's data is written beside its image (figures/<stem>.json) and holds what the image draws, taken
from the findings (here those `kit analyze` computed for the real runs of tests/fixtures/records_v1)."""

from __future__ import annotations

import json
from pathlib import Path

from kit.analysis import figures
from kit.analysis.findings_model import from_json

FINDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "findings"


def load(run: str) -> dict:
    return json.loads((FINDINGS / f"{run}.json").read_text())


def test_figure_1_data_holds_every_bar_of_every_grid_run():
    found = load("grid-tiny-20261201-070919")
    data = figures.figure_data(from_json(found))
    (group,) = data["data"]["fig1_divergence"]["groups"]
    comparisons = found["grid"][0]["comparisons"]
    assert set(group["bars"]) == set(comparisons)
    for key, bar in group["bars"].items():
        assert bar == {k: comparisons[key]["interval"][k] for k in ("rate", "lo", "hi", "k", "n")}
    assert data["data"]["fig2_formats"]["grid"] == {r["format"]: r["path_rate"] for r in found["tables"]["V"]["rows"]}
    assert set(data["skipped"]) == {"fig3"}


def test_write_all_writes_each_figures_data_beside_its_images(tmp_path):
    found = load("demo-20261201-070851")
    written = figures.write_all(from_json(found), tmp_path)
    assert written["fig3"] == [f"figures/fig3_mechanism.{ext}" for ext in ("png", "pdf", "json")]
    assert sorted(written["skipped"]) == ["fig1", "fig2"]
    data = json.loads((tmp_path / "fig3_mechanism.json").read_text())
    assert data == figures.figure_data(from_json(found))["data"]["fig3_mechanism"]
    block = found["mechanism"][data["source"]]
    for fmt in block["formats"]:
        assert data["per_format"][fmt]["hazard"]["bins"] == block["per_format"][fmt]["hazard"]["bins"]
    assert (tmp_path / "fig3_mechanism.png").read_bytes().startswith(b"\x89PNG")


def test_figure_1_orders_grid_runs_whose_findings_name_no_engine_model_or_format():
    found = load("grid-tiny-20261201-070919")
    bare = json.loads(json.dumps(found["grid"][0]))
    for key in ("engine", "model", "format"):
        bare.pop(key, None)
    found["grid"].append(bare)  # an older findings.json: the run's configuration unknown
    groups = figures.data_1(from_json(found))["groups"]
    assert len(groups) == 2
    assert groups[1]["bars"] == groups[0]["bars"]
