"""`kit compare`: the files it writes beside findings.json, and one-line refusals that write nothing."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.bundle.kit_cli import run_here
from tests.compare import synthetic as syn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "records_v1"
ROOT = Path(__file__).resolve().parents[2]


def kit(*args):
    # rich wraps a table to 80 columns when stdout is not a terminal
    return run_here(*args, cwd=ROOT, env={"COLUMNS": "240"})


def refused(result, *needles):
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kit: error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_folder_without_findings_is_refused_in_one_line(tmp_path):
    before = listing(tmp_path)
    refused(kit("compare", tmp_path, "--reference", "paper"), "holds no findings.json", "kit analyze RUN_DIR")
    assert listing(tmp_path) == before


def test_a_run_folder_not_yet_analysed_is_refused_naming_kit_analyze(tmp_path):
    run = tmp_path / "demo-20261201-070851"
    shutil.copytree(FIXTURES / run.name, run)
    before = listing(tmp_path)
    refused(kit("compare", run), "run folder with no analysis/findings.json", f"kit analyze {run}")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("content, needle", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"schema": "kit.manifest/1"}), "is not a kit findings file"),
    (json.dumps({"schema": "kit.findings/1", "runs": [], "tables": {"V": {"rows": [{"run": "x"}]}}}), "Table V"),
])
def test_a_bad_findings_file_is_refused_before_anything_is_written(tmp_path, content, needle):
    (tmp_path / "findings.json").write_text(content)
    refused(kit("compare", tmp_path), needle)
    assert listing(tmp_path) == ["findings.json"]


def test_an_unknown_reference_is_a_usage_error(tmp_path):
    refused(kit("compare", tmp_path, "--reference", "nature"), "--reference")


def test_the_demo_run_folder_gets_five_files_beside_its_findings(tmp_path):
    run = tmp_path / "demo-20261201-070851"
    shutil.copytree(FIXTURES / run.name, run)
    (run / "analysis").mkdir()
    shutil.copy(FIXTURES / "findings" / f"{run.name}.json", run / "analysis" / "findings.json")
    result = kit("compare", run)
    assert result.returncode == 0, result.stderr
    assert "not comparable" in result.stdout and "SmolLM2-135M" in result.stdout
    assert "consistent 0, inconsistent 0, underpowered 0, not comparable 2" in result.stdout
    written = sorted(p.name for p in (run / "analysis").iterdir())
    assert written == ["compare-claims.json", "compare-claims.md", "compare-paper.csv", "compare-paper.json",
                       "compare-paper.md", "findings.json"]
    # not comparable in numbers, and yet the paper's qualitative findings are judged on it, in other words
    lines = result.stdout.splitlines()
    assert "qualitative: the paper's findings hold on this run (6 claims measured: Table IV 4/4, Table VII 2/2)" \
        in lines, result.stdout
    assert any(line.startswith("numeric: consistent 0,") for line in lines)
    assert "not measured by this run: the claims of Table III, Table V, Table VI" in lines
    claims = json.loads((run / "analysis" / "compare-claims.json").read_text())
    assert claims["schema"] == "kit.claims/1" and claims["counts"]["holds"] == 6
    assert not any("consistent" in c["verdict"] for c in claims["claims"])
    reproduces = next(c for c in claims["claims"] if c["id"] == "IV/each-path-reproduces")
    assert reproduces["verdict"] == "holds" and "recompute s1 2/2, s2 2/2" in reproduces["counts"]
    claims_md = (run / "analysis" / "compare-claims.md").read_text()
    assert "| Table IV | each path reproduces itself | holds |" in claims_md
    doc = json.loads((run / "analysis" / "compare-paper.json").read_text())
    assert doc["schema"] == "kit.compare/1" and doc["counts"]["not comparable"] == 2
    assert all(line["verdict"].startswith("not comparable: SmolLM2-135M vs Qwen2.5-7B") for line in doc["lines"])
    rows = list(csv.DictReader((run / "analysis" / "compare-paper.csv").open()))
    assert [r["verdict"] for r in rows] == [line["verdict"] for line in doc["lines"]]
    md = (run / "analysis" / "compare-paper.md").read_text()
    assert "| Table IV |" in md and "not comparable: SmolLM2-135M vs Qwen2.5-7B" in md
    assert "Published rows this run has nothing to set beside" in md
    assert not [p for p in (run / "analysis").iterdir() if p.name.startswith(".")]  # no staging file left


def test_an_analysis_folder_at_the_papers_scale(tmp_path):
    configs = [syn.grid_run("Q4_K_M", path_k=60, on_k=62), syn.grid_run("F16", path_k=60, on_k=16)]
    runs, grid, rows = zip(*configs)
    (tmp_path / "findings.json").write_text(json.dumps(syn.findings(list(runs), {"V": list(rows)}, grid=list(grid))))
    result = kit("compare", tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "compare-paper.json").read_text())
    assert doc["counts"] == {"consistent": 5, "inconsistent": 1, "underpowered": 0, "not comparable": 0}
    line = next(x for x in doc["lines"] if x["verdict"] == "inconsistent")
    assert (line["row"], line["quantity"]) == ("llama.cpp Qwen2.5-7B F16", "path divergence")
    assert line["numbers"]["published"] == {"quantity": "path", "kind": "rate", "value": 36.2, "lo": 26.2,
                                            "hi": 47.2, "k": 29, "n": 80}
    assert line["numbers"]["run"]["k"] == 60 and line["numbers"]["run"]["lo"] > 47.2
