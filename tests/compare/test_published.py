"""The published values ship as data (kit/compare/paper.yaml) and are validated on load: a bad entry
fails with a one-line error naming it."""

from __future__ import annotations

import copy
from importlib import resources

import pytest
import yaml

from kit.compare.measures import MEASURES, TABLES
from kit.compare.published import load_reference, parse_reference
from kit.core.errors import ConfigError


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load(resources.files("kit.compare").joinpath("paper.yaml").read_text(encoding="utf-8"))


def value(reference, row_id, quantity):
    row = next(r for r in reference.rows if r.id == row_id)
    return next(v for v in row.values if v.quantity == quantity)


def test_the_packaged_values_load_and_cover_every_table():
    reference = load_reference("paper")
    assert {r.table for r in reference.rows} == set(TABLES)
    assert set(reference.sections) == set(MEASURES)
    for row in reference.rows:
        assert row.source and row.scale and row.model.endswith("-Instruct")
        assert row.engine in ("llama.cpp", "vLLM")


def test_the_values_are_those_the_paper_prints():
    reference = load_reference()
    # Table IV and its text: paths differ on 2 / 43 / 43 / 60 of 100 items
    formats = ("F16", "Q8_0", "Q4_K_M", "Q3_K_M")
    assert [value(reference, f"IV/{f}", "paths_differ").k for f in formats] == [2, 43, 43, 60]
    # Table III, flag x order: 31/80, 62/80, 1/80, 1/80
    cells = ("default-adjacent", "default-between", "disabled-adjacent", "disabled-between")
    assert [value(reference, f"III/{c}", "on_r2r").k for c in cells] == [31, 62, 1, 1]
    # Table VI: the paper's rounding wins over REFERENCE.md's 0.77125
    q3 = value(reference, "VI/Q3_K_M", "mean")
    assert (q3.point, q3.lo, q3.hi) == (77.1, 68.2, 85.4)
    diffs = [value(reference, f"VI/{f}", "diff") for f in ("Q8_0", "Q4_K_M", "Q3_K_M")]
    assert [(d.point, d.lo, d.hi) for d in diffs] == [(22.1, 9.9, 34.4), (45.1, 34.9, 55.6), (39.8, 26.9, 52.1)]
    trend = value(reference, "VI/trend-qwen7b", "glmm_odds_ratio")
    assert (trend.point, trend.lo, trend.hi) == (2.30, 1.76, 3.15)
    assert value(reference, "VI/trend-qwen7b", "permutation_p").alternative == "two-sided"
    # Table V: counts beside the printed percent; Table VII bridge counts and flips
    path = value(reference, "V/llamacpp-qwen14b-Q4_K_M", "path")
    assert (path.k, path.n, path.point) == (73, 80, 91.2)
    big = value(reference, "VII/qwen7b-Q4_K_M-500", "path_divergence")
    assert (big.k, big.n, big.point) == (227, 500, 45.4)
    bridge = ("qwen7b-F16-200", "qwen7b-Q8_0-200", "qwen7b-Q4_K_M-200", "qwen7b-Q3_K_M-200", "qwen7b-Q4_K_M-500",
              "qwen14b-Q4_K_M-200")
    assert [value(reference, f"VII/{r}", "flips").k for r in bridge] == [0, 4, 4, 3, 12, 1]


def first_values(data, row_id):
    return next(r for r in data["rows"] if r["id"] == row_id)["values"]


@pytest.mark.parametrize("change, needle", [
    (lambda d: first_values(d, "III/default-adjacent")[0].update(quantity="on_rerun"), "on_rerun"),
    (lambda d: first_values(d, "III/default-adjacent")[0].update(k=30), "does not round to the printed"),
    (lambda d: first_values(d, "V/llamacpp-qwen7b-F16")[2].update(lo=40.0), "does not hold the value"),
    (lambda d: first_values(d, "VI/trend-qwen7b")[2].pop("alternative"), "alternative"),
    (lambda d: first_values(d, "VI/Q8_0")[2].update(kind="rate"), "is a difference, not a rate"),
    (lambda d: first_values(d, "IV/F16")[2].update(k=120), "exceeds n"),
    (lambda d: d["rows"][1].update(id=d["rows"][0]["id"]), "used twice"),
    (lambda d: d["rows"][0].update(format="Q4KM"), "format 'Q4KM'"),
    (lambda d: d["rows"][0].update(engine="ollama"), "engine"),
    (lambda d: d["rows"][0]["conditions"].update(cache="on"), "conditions"),
    (lambda d: d.update(rows=[r for r in d["rows"] if r["table"] != "VII"]), "no rows for Table VII"),
])
def test_a_bad_entry_fails_on_load_naming_it(raw, change, needle):
    data = copy.deepcopy(raw)
    change(data)
    with pytest.raises(ConfigError) as err:
        parse_reference(data, "paper.yaml")
    line = err.value.line()
    assert needle in line and line.startswith("paper.yaml: ") and "\n" not in line


def test_the_unchanged_copy_parses(raw):
    assert len(parse_reference(copy.deepcopy(raw), "paper.yaml").rows) == len(raw["rows"])


def test_unknown_reference_and_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown reference 'nature'"):
        load_reference("nature")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rows: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_reference(path=bad)
