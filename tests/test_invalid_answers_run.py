"""An engine answer without what a verdict needs voids the pass it served, with the reason naming the field,
and the run goes on with the next pass; the answer bounds a run used are recorded in its manifest."""

from __future__ import annotations

import json

import pytest

from kit.run import execution, runner
from kit.core.errors import InvalidAnswer
from kit.core.events import ignore
from kit.record.manifest import Manifest
from kit.protocols.procedure import Prepared
from kit.record.files import cut_short, read_records
from tests.adversarial.hostile_engine import HostileEngine


@pytest.fixture
def broken_engine():
    engine = HostileEngine("no-content")
    yield engine
    engine.stop()


def test_every_pass_served_by_a_broken_engine_is_void_with_the_field_named(broken_engine, tmp_path):
    options = runner.RunOptions(protocol="demo", engine_url=broken_engine.url, out=tmp_path,
                                overrides={"workload": {"items": 1}, "sessions": 2, "max_tokens": 4},
                                max_answer_bytes=1 << 20, request_deadline=5.0)
    said: list[str] = []
    result = runner.run(options, say=said.append)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    passes = manifest["passes"]
    assert result.status == "finished" and sorted(passes) == ["s1", "s2"]  # s2 ran after s1 was voided
    for info in passes.values():
        assert info["status"] == "VOID" and "answered POST /completion with an answer without `content`" in info["reason"]
        assert info["records"] == 0 == len(read_records(result.run_dir / info["file"]).records)
    assert all(row["status"] == "VOID" for row in result.table["sessions"])  # no verdict from empty answers
    assert cut_short(result.run_dir, Manifest.load(result.run_dir).run.passes) == {}  # a voided pass is whole: resume keeps it, analysis reads it
    assert manifest["options"]["max_answer_bytes"] == 1 << 20 and manifest["options"]["request_deadline"] == 5.0


def test_the_default_bounds_are_recorded_too(broken_engine, tmp_path):
    options = runner.RunOptions(protocol="demo", engine_url=broken_engine.url, out=tmp_path,
                                overrides={"workload": {"items": 1}, "sessions": 1, "max_tokens": 4})
    manifest = json.loads((runner.run(options, say=lambda _: None).run_dir / "manifest.json").read_text())
    assert manifest["options"]["max_answer_bytes"] == 64 << 20 and manifest["options"]["request_deadline"] is None


class _RerunsWhole:
    """A kind whose passes share one server (as grid.rerun_whole): a pass finished before a re-entry is
    superseded and run again, and this engine's answer is never usable."""

    def __init__(self):
        self.entries = 0

    def run(self, protocol, prepared, ctx):
        self.entries += 1
        for pass_id in ("p1", "p2"):
            if pass_id in ctx.done:
                ctx.manifest.supersede(pass_id)
                ctx.done.discard(pass_id)
        ctx.manifest.set_pass("p1", file="records/p1.jsonl", status="running")
        raise InvalidAnswer("llama-server answered POST /completion with an answer without `content`", "check it")

    def results(self, run_dir):
        return {}


def test_a_pass_voided_twice_fails_the_run_instead_of_looping(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    kind = _RerunsWhole()
    result = execution.execute(None, kind, Prepared(plan={}, workload={}), None, Manifest.create(run_dir, protocol={"name": "shared"}), ignore,
                             lambda _: None)
    assert kind.entries == 2  # voided once and went on; the same pass again: the run stops
    assert result.status == "failed" and "without `content`" in result.reason
