"""The headline the report opens with and `kit show` prints: per run what diverged, how often, with its
interval, and whether its controls held, read from the run's own results files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.protocols.flag_order import results as flag_order_run
from kit.bundle import report
from kit.bundle.content import BundledRun, runs_from_files
from kit.bundle.headline import headline, paper_tables
from kit.protocols.headline import FEW, few
from kit.bundle.show import describe_runs
from kit.stats.intervals import wilson_interval
from tests.protocols.test_flag_order_results import run_dir as flag_dir  # noqa: F401 - a fixture
from tests.bundle.conftest import bundled_run, synthetic_grid_run

RECORDS_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"


def _run(folder: Path, extra: dict[str, bytes] | None = None) -> BundledRun:
    files = {f"runs/{folder.name}/{p.relative_to(folder)}": p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and p.relative_to(folder).parts[0] not in ("records", "logs")}
    files.update({f"runs/{folder.name}/{name}": data for name, data in (extra or {}).items()})
    return runs_from_files(files)[0]


def _grid(tmp_path: Path, change=None) -> tuple[BundledRun, dict]:
    folder = synthetic_grid_run(tmp_path / "grid-toy")
    table = json.loads((folder / "results" / "grid.json").read_text())
    if change:
        change(table)
    return _run(folder, {"results/grid.json": json.dumps(table).encode()}), table


def test_grid_verdict_is_the_path_count_with_its_interval(tmp_path):
    run, table = _grid(tmp_path)
    path = table["comparisons"]["path"]
    h = headline(run)
    assert h.verdict[0].startswith(f"path divergence (cache on vs cache off): {path['diverged']}/{path['episodes']} "
                                   f"episodes ({100 * path['diverged'] / path['episodes']:.1f}%, 95% CI")
    assert f"[{100 * path['interval']['lo']:.1f}, {100 * path['interval']['hi']:.1f}]" in h.verdict[0]
    assert h.held is None and h.controls == ["no cache-off repeat: the control was not run"]


def test_a_cache_off_repeat_that_diverged_means_the_controls_did_not_hold(tmp_path):
    def broken(table):
        table["comparisons"]["run-to-run cache-off"] = {**table["comparisons"]["path"], "passes": ["off1", "off2"]}

    run, table = _grid(tmp_path, broken)
    h = headline(run)
    assert table["comparisons"]["path"]["diverged"] > 0 and h.held is False
    assert h.controls[0].startswith("cache-off run-to-run (should not diverge): ")
    page = report.render([run], {"created": "2026", "kit": {"version": "0"}})
    assert '<span class="broken">controls did NOT hold</span>' in page


def test_results_laid_out_otherwise_are_said_so_not_raised(tmp_path):
    run, _ = _grid(tmp_path, lambda table: table.update(comparisons=[]))
    h = headline(run)
    assert h.verdict == ["results/grid.json is not laid out as this kit reads it: comparisons: Input should be a valid "
                         "dictionary; see the raw file"]  # the field its kind's model refused, in one line
    assert "not laid out as this kit reads it" in report.render([run], {})


def test_reset_run_of_an_earlier_release(tmp_path):
    folder = RECORDS_V1 / "demo-20261201-070851"
    table = json.loads((folder / "results" / "reset_table.json").read_text())
    h = headline(_run(folder))
    assert h.kind == "reset" and h.held is True
    wilson = [wilson_interval(s["paths_differ"], s["items"]) for s in table["sessions"]]
    assert h.verdict[0] == ("2 sessions: the cache-hit path differs from the recompute path in "
                            + ", ".join(f"{s['session']} {s['paths_differ']}/{s['items']}" for s in table["sessions"])
                            + " items; attributable to the cache: "
                            + ", ".join(f"{s['session']} {s['cache_caused']}" for s in table["sessions"]))
    assert h.verdict[1:] == [f"session {s['session']}: the cache-hit path differs from the recompute path in "
                         f"{s['paths_differ']}/{s['items']} items ({100 * s['paths_differ'] / s['items']:.1f}%, 95% CI "
                         f"(wilson) [{100 * lo:.1f}, {100 * hi:.1f}]){few(s['items'])}; {s['cache_caused']} "
                         "attributable to the cache" for s, (lo, hi) in zip(table["sessions"], wilson)]
    assert [t.rows for t in h.tables] == [[[s["session"], "OK", *(str(s[k]) for k in (
        "items", "recompute_reproduces", "hit_reproduces", "paths_differ", "cache_caused"))] for s in table["sessions"]]]


def test_pinning_run_of_an_earlier_release():
    folder = RECORDS_V1 / "pinning-tiny-20261201-071511"
    table = json.loads((folder / "results" / "pinning.json").read_text())
    h = headline(_run(folder))
    assert h.held is (table["gate"]["status"] == "PASS")
    assert h.verdict[0].startswith("pure vs contaminated arm: " + ("outputs DIFFER" if table["arms"]["differ"]
                                                                   else "identical outputs"))
    assert [row[0] for row in h.tables[0].rows] == [s["state"] for s in table["states"]]


def test_the_paper_tables_come_from_the_findings_left_by_kit_analyze():
    folder = RECORDS_V1 / "demo-20261201-070851"
    found = json.loads((RECORDS_V1 / "findings" / f"{folder.name}.json").read_bytes())
    shown, absent = paper_tables(_run(folder, {"analysis/findings.json": json.dumps(found).encode()}))
    with_rows = [name for name, t in found["tables"].items() if t["rows"]]
    assert [t.name for t in shown] == with_rows and with_rows
    assert [a.split(":")[0] for a in absent] == [f"Table {n}" for n in found["tables"] if n not in with_rows]
    assert all(t["skipped"][0]["reason"] in a for a, t in zip(absent, (found["tables"][n] for n in found["tables"]
                                                                        if n not in with_rows)))
    assert paper_tables(_run(folder)) == ([], [])


@pytest.mark.parametrize("n, flagged", [(1, True), (FEW - 1, True), (FEW, False), (500, False)])
def test_a_rate_from_few_observations_says_so(n, flagged):
    assert bool(few(n)) is flagged and (f"n={n}" in few(n)) is flagged


def test_show_prints_the_same_headline_and_tables_as_rich_tables_not_json(tmp_path):
    run, table = _grid(tmp_path)
    lines = describe_runs([run], {"created": "2026", "kit": {"version": "0"}}, width=100)
    h = headline(run)
    assert [f"  - {line}" for line in h.verdict] == lines[lines.index("verdict:") + 1:lines.index("controls: not judged")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    path = table["comparisons"]["path"]
    assert ["path", " vs ".join(path["passes"]), f"{path['diverged']}/{path['episodes']}"] in [c[:3] for c in cells]
    assert not any('{"' in line or '": ' in line for line in lines if not line.startswith(("overrides:", "seeds:")))
    assert max(len(line) for line in lines if line.startswith(("│", "┃", "┏", "└"))) <= 100


def test_flag_order_verdict_per_cell_and_fresh_servers_as_the_control(flag_dir):  # noqa: F811 - the fixture
    table = flag_order_run.write(flag_dir)
    h = headline(_run(flag_dir))
    assert h.held is table["fresh_server_per_arm"] is True
    assert [line.split(": cache-on run-to-run divergence ")[1].split(" (")[0] for line in h.verdict] == [
        f"{c['run_to_run']['diverged']}/{c['run_to_run']['episodes']} episodes" for c in table["cells"].values()]
    assert [row[2] for row in h.tables[0].rows] == [
        f"{c['run_to_run']['diverged']}/{c['run_to_run']['episodes']}" for c in table["cells"].values()]


def test_sweep_verdict_per_format_and_the_reference_as_the_control():
    spread = {"per_history": {"0": 2, "1": 4}, "histories": 2, "mean": 0.3, "sd": 0.1414, "min": 0.2, "max": 0.4,
              "episodes": 10, "episodes_status_varies": 2, "varying_episodes": ["e1", "e2"]}
    table = {"table": "sweep", "run_id": "sweep-toy", "formats": {"F16": spread, "Q8_0": {"skipped": "no OK cell"}},
             "cells": {}, "replicates": {}, "void_passes": [],
             "reference_check": {"F16": {"passes": ["ref-a", "ref-b"], "episodes": 10, "diverged": 1,
                                         "interval": {"rate": 0.1, "lo": 0.018, "hi": 0.404, "k": 1, "n": 10,
                                                      "method": "wilson"}, "identical": False}}}
    run = bundled_run("sweep-toy", {"protocol": {"kind": "sweep"}, "status": "finished"},
                      {"results/sweep.json": json.dumps(table).encode()})
    h = headline(run)
    assert h.verdict[0].startswith("F16: path divergence 30.0% on average over 2 histories of 10 episodes "
                                   "(range 20.0–40.0%) (n=2 only: little evidence)")
    assert h.verdict[1] == "Q8_0: no OK cell"
    assert h.held is False and h.controls == ["F16 reference under two orders (should not diverge): 1/10 episodes "
                                              "(10.0%, 95% CI (wilson) [1.8, 40.4])"]


def test_the_readme_opens_with_the_same_headline(tmp_path):
    from kit.bundle import readme  # noqa: PLC0415

    run, _ = _grid(tmp_path)
    h = headline(run)
    text = readme.render([run], {"created": "2026", "kit": {"version": "0"}}, "b").decode()
    head = text[text.index("## Headline"):text.index("## What was run")]
    assert f"- **{run.run_id}** ({h.kind}, {h.status})" in head
    for line in h.verdict:
        assert f"  - {readme.text(line)}" in head
    assert "  - controls not judged; no cache-off repeat: the control was not run" in head


def test_the_report_reads_the_typed_manifest_and_names_a_field_that_is_not_one():
    """A bundled run's manifest is read through RunManifest (kit.record.manifest) once the bundle verifies;
    a manifest that is not one (only in a bundle that does not verify) is named with its first wrong field,
    which `kit show --no-verify` turns into its one-line refusal."""
    from kit.bundle.content import summary  # noqa: PLC0415

    run = bundled_run("grid-x", {"status": "finished", "protocol": {"name": "grid-x", "kind": "grid"},
                                 "engine": {"model_name": "toy", "gpus": "none", "image_identity": None}})
    found = summary(run)
    assert (found["status"], found["protocol"], found["model"], found["overrides"]) == (
        "finished", "grid-x (kind grid)", "toy", "{}")
    assert run.typed() is run.typed() and run.typed().engine.model_name == "toy"
    odd = bundled_run("grid-x", {"status": 5})
    with pytest.raises(ValueError, match=r"^runs/grid-x/manifest.json: status: Input should be a valid string"):
        summary(odd)
    with pytest.raises(ValueError, match="status"):
        headline(odd)
    with pytest.raises(ValueError, match="status"):
        describe_runs([odd], {})


def test_the_report_s_headline_row_names_every_session_and_the_paper_s_findings():
    """The overview row shows a run's first verdict line: for a two-session reset run it names both sessions;
    beside it, whether the paper's qualitative findings hold (read from the results table: not analysed)."""
    folder = RECORDS_V1 / "demo-20261201-070851"
    h = headline(_run(folder))
    assert h.qualitative[0] == ("qualitative: the paper's findings hold on this run (4 claims measured: "
                                "Table IV 4/4)")
    assert any(line.startswith("Table IV, each path reproduces itself: holds (") for line in h.qualitative[1:])
    page = report.render([_run(folder)], {"created": "2026", "kit": {"version": "0"}})
    overview = page[page.index("<h2>Headline</h2>"):page.index("</table>", page.index("<h2>Headline</h2>"))]
    assert "s1 1/2, s2 1/2 items" in overview
    assert "the paper&#x27;s findings hold on this run (4 claims measured: Table IV 4/4)" in overview
    assert "consistent with the published value" not in page


def test_a_run_whose_path_does_not_reproduce_says_the_finding_does_not_hold(tmp_path):
    folder = tmp_path / "demo-20261201-070851"
    table = json.loads((RECORDS_V1 / folder.name / "results" / "reset_table.json").read_text())
    table["sessions"][1]["hit_reproduces"] -= 1  # warm != warm2 on one item of s2
    run = _run(RECORDS_V1 / folder.name, {"results/reset_table.json": json.dumps(table).encode()})
    h = headline(run)
    assert h.qualitative[0].startswith("qualitative: 3 of the paper's 4 measured findings hold on this run")
    assert "does not hold: IV/each-path-reproduces" in h.qualitative[0]
    lines = describe_runs([run], {"created": "2026", "kit": {"version": "0"}}, width=100)
    assert h.qualitative[0] in lines


def test_analysed_findings_decide_the_headline_s_findings_when_the_run_has_them():
    folder = RECORDS_V1 / "demo-20261201-070851"
    findings = (RECORDS_V1 / "findings" / f"{folder.name}.json").read_bytes()
    h = headline(_run(folder, {"analysis/findings.json": findings}))
    assert h.qualitative[0] == ("qualitative: the paper's findings hold on this run (6 claims measured: "
                                "Table IV 4/4, Table VII 2/2)")


def test_a_runs_results_are_parsed_once_per_render_and_again_when_one_changes(tmp_path, monkeypatch):
    """The headline, the qualitative findings, the paper's tables and the report all read `run.tables()`:
    each results file is parsed once per render, and again only when the file itself was replaced."""
    from kit.bundle import content

    run, table = _grid(tmp_path)
    parsed: list[int] = []
    real_load = content.load_json
    monkeypatch.setattr(content, "load_json", lambda data: (parsed.append(1), real_load(data))[1])
    page = report.render([run], {})
    json_files = [name for name in run.computed() if name.endswith(".json")]
    assert json_files and len(parsed) == len(json_files), (len(parsed), json_files)
    assert "grid" in page
    tables = run.tables()
    tables.clear()  # a caller's own copy: the run's parsed tables are not changed through it
    assert run.tables()["results/grid.json"] == table
    table["changed"] = True
    run.files["results/grid.json"] = json.dumps(table).encode()
    assert run.tables()["results/grid.json"]["changed"] is True and len(parsed) == len(json_files) + 1
