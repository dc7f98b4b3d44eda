"""`kit run ladder --engine-url URL`: the rungs that need no server of their own (L0, L2; L1 where the server
already has the slots) run on a llama-server the kit did not start; every other rung and fix is listed as
"needs a server the kit starts" (reasons of their own kept). The server is the shared fake llama-server."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kit.cli import cli
from kit.protocols.ladder import plan
from tests.fake_engine.llamacpp import LlamaCpp


def _design(slots: int) -> plan.Design:
    return plan.Design(trials=3, neighbours=4, chunk=16, formats=("F16",), threads=0, other_threads=0, url_slots=slots)


def test_by_url_only_the_passes_that_need_no_restart_run():
    assert [p.pass_id for p in plan.passes(_design(1))] == [plan.BASE]
    assert [p.pass_id for p in plan.passes(_design(4))] == [plan.BASE, plan.BATCH]
    rungs = {(c.rung, c.what.split(",")[0]): c for c in plan.rungs(_design(1))}
    measured = {key[0] for key, c in rungs.items() if c.not_measured is None}
    assert measured == {"L0", "L2"}
    l1 = next(c for (rung, _), c in rungs.items() if rung == "L1")
    assert "-np 4" in (l1.not_measured or "") and "1 slot" in (l1.not_measured or "")
    assert all(c.not_measured == plan.NEEDS_START for (rung, _), c in rungs.items() if rung in ("L3", "L5"))
    assert any(c.not_measured == plan.TP_REASON for c in rungs.values())  # a reason of its own is kept
    assert "L1" in {c.rung for c in plan.rungs(_design(4)) if c.not_measured is None}
    fixes = {c.fix: c.not_measured for c in plan.fixes(_design(1))}
    assert fixes["prefix reuse off"] is None and fixes["chunk-aligned cache"] == plan.NEEDS_START


def test_the_ladder_runs_by_url_on_a_server_the_kit_did_not_start(tmp_path):
    fake = LlamaCpp()
    with fake.serve() as url:
        result = CliRunner().invoke(cli, ["run", "ladder", "--engine-url", url, "--items", "4", "--max-tokens", "3",
                                          "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    [run_dir] = [p for p in tmp_path.iterdir() if (p / "manifest.json").is_file()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert list(manifest["passes"]) == ["base"] and manifest["passes"]["base"]["fresh_server"] is False
    assert manifest["ladder"]["design"]["url_slots"] == 1
    table = json.loads((run_dir / "results" / "ladder.json").read_text())
    assert table["headline"]["rungs"]["L0"] != "not measured" and table["headline"]["rungs"]["L3"] == "not measured"
    assert any(r.get("reason") == plan.NEEDS_START and r["status"] == "not measured" for r in table["rungs"])
    assert fake.posted("/completion") and not [r for r in fake.requests if r.url.path.startswith("/slots")]
