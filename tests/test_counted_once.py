"""A record is counted once or the run is refused, on a real run of the embedded engine: a duplicated line
is an error naming file and line (it used to change the counts silently), and a record cut in half makes
its pass "cut short": `kit analyze` and `kit bundle` refuse the run and say why, `kit resume` runs that
pass again, and then the run analyses, bundles and verifies."""

from __future__ import annotations

import json
import shutil

import pytest

from kit.run import runner
from kit.record.files import read_records
from tests.console_text import printed
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, embedded_binary, gsm8k_file):
    out = tmp_path_factory.mktemp("counted")
    options = runner.RunOptions(protocol="reset", out=out, gsm8k=gsm8k_file,
                                overrides={"workload": {"items": 2}, "sessions": 2, "max_tokens": 4,
                                           "engine": {"ctx_size": 1024}})
    result = runner.run(options, say=lambda _: None)
    assert result.status == "finished"
    return result.run_dir


def test_a_duplicated_record_line_is_refused_naming_file_and_line(finished_run, tmp_path):
    run_dir = shutil.copytree(finished_run, tmp_path / finished_run.name)
    s1 = run_dir / "records" / "s1.jsonl"
    lines = s1.read_bytes().splitlines(keepends=True)
    s1.write_bytes(b"".join(lines[:5] + lines[4:]))  # what `sed -i '5p' records/s1.jsonl` does
    for refused in (kit("analyze", str(run_dir), "--no-figures"), kit("bundle", str(run_dir))):
        one_line_error(refused, "s1.jsonl:6 repeats seq 4 of pass 's1' (first at line 5)")
    assert not (run_dir / "analysis").exists() and not (run_dir.parent / "bundles").exists()


def test_a_torn_record_cuts_its_pass_short_until_resume_runs_it_again(finished_run, tmp_path):
    run_dir = shutil.copytree(finished_run, tmp_path / finished_run.name)
    s1_before = (run_dir / "records" / "s1.jsonl").read_bytes()
    s2 = run_dir / "records" / "s2.jsonl"
    whole = s2.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1
    s2.write_bytes(whole[:last + (len(whole) - last) // 2])  # the last record cut in half

    for refused in (kit("analyze", str(run_dir), "--no-figures"), kit("bundle", str(run_dir))):
        one_line_error(refused, "pass s2: records/s2.jsonl ends inside a record (line 8 is torn)",
                       f"run `kit resume {run_dir}`")
    assert not (run_dir / "analysis").exists() and not (run_dir.parent / "bundles").exists()

    resumed = kit("resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert printed("pass s2 ended OK but is cut short (records/s2.jsonl ends inside a record", resumed.stdout)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["resumed"][-1]["passes_redone"] == ["s2"]
    assert (run_dir / "records" / "s1.jsonl").read_bytes() == s1_before  # kept as it was
    assert [r["seq"] for r in read_records(s2)] == list(range(8)) and manifest["passes"]["s2"]["records"] == 8
    superseded = list((run_dir / "records" / "superseded").iterdir())
    assert len(superseded) == 1 and read_records(superseded[0], torn="report").torn_tail

    assert kit("analyze", str(run_dir), "--no-figures").returncode == 0
    bundled = kit("bundle", str(run_dir), "-o", str(tmp_path / "run.tar.gz"))
    assert bundled.returncode == 0, bundled.stderr
    verified = kit("verify", str(tmp_path / "run.tar.gz"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_bundle_that_holds_a_pass_cut_short_does_not_verify(finished_run, tmp_path, monkeypatch):
    from kit.bundle import writer
    from kit.bundle.verify import verify_bundle

    run_dir = shutil.copytree(finished_run, tmp_path / finished_run.name)
    s2 = run_dir / "records" / "s2.jsonl"
    s2.write_bytes(s2.read_bytes()[:-40])
    monkeypatch.setattr(writer, "require_whole", lambda *a: None)  # a bundle `kit bundle` would refuse to write
    verdict = verify_bundle(writer.write_bundle([run_dir], tmp_path / "cut.tar.gz", environ={}).path)
    assert not verdict.ok
    assert any("recomputing failed: CutShort" in line and "pass s2: records/s2.jsonl ends inside a record" in line
               for line in verdict.lines()), verdict.lines()
