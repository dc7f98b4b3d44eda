"""`kit resume` trusts nothing: the protocol text a manifest keeps runs only if it still has its recorded
sha256, and a run whose results cannot be written still ends `failed` with the reason, never `started`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from kit.run import runner
from kit.run.resume import check_stored_protocol, resume
from kit.record.manifest import Manifest
from kit.protocols import kinds
from kit.protocols.procedure import Prepared
from tests.cli_main import run_main
from tests.stopped_run import stopped_run


_kit = run_main


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    files = (p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}




def test_resume_refuses_a_tampered_protocol_text_and_changes_nothing(tmp_path, monkeypatch, capsys):
    run_dir = stopped_run(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    recorded = manifest["protocol"]["sha256"]
    manifest["protocol"]["content"] += "\n# harmless-looking edit\n"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    tampered = hashlib.sha256(manifest["protocol"]["content"].encode()).hexdigest()
    before = _snapshot(tmp_path)
    monkeypatch.setattr(runner, "provider_for", lambda *a: pytest.fail("no engine may be provided"))

    code, out, err = _kit(monkeypatch, capsys, "resume", str(run_dir))

    assert code != 0 and not out.strip()
    assert err.count("\n") == 1 and err.startswith("kit: error: ")
    assert f"{run_dir}/manifest.json" in err and recorded in err and tampered in err
    assert _snapshot(tmp_path) == before


def test_resume_refuses_a_manifest_without_protocol_text(tmp_path):
    run_dir = stopped_run(tmp_path)
    manifest = Manifest.load(run_dir)
    manifest.run.protocol.content = None
    manifest.save()
    with pytest.raises(runner.KitError, match="no protocol text"):
        resume(run_dir)


def test_resume_refuses_no_protocol_text_even_where_the_sha256_says_none(tmp_path):
    run_dir = stopped_run(tmp_path)
    manifest = Manifest.load(run_dir)
    manifest.run.protocol.content = None
    manifest.run.protocol.sha256 = "none (no protocol text)"  # what the check used to compare a missing text with
    manifest.save()
    with pytest.raises(runner.KitError, match="no protocol text"):
        resume(run_dir)


def test_an_untampered_protocol_passes_the_check(tmp_path):
    check_stored_protocol(tmp_path, Manifest.load(stopped_run(tmp_path)).run.protocol)


class _Provider:
    fresh_servers = True

    def describe(self):
        return {"kind": "fake"}


def _failing_results(monkeypatch, error: BaseException) -> None:
    def results(run_dir):
        raise error

    real = kinds.KINDS["reset"]
    fake = dataclasses.replace(real, prepare=lambda protocol, inputs: Prepared(plan={}, workload={}),
                               run=lambda *a: None, results=results)
    monkeypatch.setattr(kinds, "of", lambda protocol: fake)
    monkeypatch.setattr(runner, "provider_for", lambda *a: _Provider())


def test_results_that_raise_end_the_run_failed_with_the_reason(tmp_path, monkeypatch):
    _failing_results(monkeypatch, RuntimeError("disk full"))
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert result.status == "failed"
    assert result.reason == "writing the results failed: internal error: RuntimeError: disk full"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"] == result.reason and manifest["ended"]


def test_ctrl_c_while_writing_results_still_ends_the_manifest(tmp_path, monkeypatch):
    _failing_results(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    manifest = json.loads((next(tmp_path.iterdir()) / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "KeyboardInterrupt" in manifest["reason"]


def test_the_cli_exits_non_zero_with_one_line_when_results_fail(tmp_path, monkeypatch, capsys):
    _failing_results(monkeypatch, RuntimeError("disk full"))
    code, _, err = _kit(monkeypatch, capsys, "run", "reset", "--yes", "--out", str(tmp_path))  # full size: it fails at once
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("kit: error: the run failed: writing the results failed")
    run_dir = next(p for p in tmp_path.iterdir() if p.name.startswith("reset-"))
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"


def test_a_run_whose_engine_url_credentials_were_dropped_is_refused(tmp_path):
    run_dir = stopped_run(tmp_path)
    manifest = Manifest.load(run_dir)
    manifest.run.options.update(engine_url="http://127.0.0.1:8080?token=[REDACTED]",
                                    **{runner.CREDENTIALS_DROPPED: True})
    manifest.save()
    with pytest.raises(runner.KitError, match="credentials were never stored"):
        resume(run_dir)


@pytest.mark.parametrize("options, needle", [
    ({"threads": "all"}, "options.threads is str 'all', not the int the kit records"),
    ({"threads": True}, "options.threads is bool"),
    ({"engine_urls": ["http://x"]}, "options.engine_urls is list"),
    ({"launcher": "ssh"}, "options.launcher 'ssh' or options.cpu_backend"),
    ({"threads": 0}, "a recorded option does not hold here: --threads 0 is outside"),
])
def test_recorded_options_of_the_wrong_type_or_range_are_refused_in_one_line(tmp_path, monkeypatch, options, needle):
    run_dir = stopped_run(tmp_path)
    manifest = Manifest.load(run_dir)
    manifest.run.options.update(options, unknown_to_this_kit="ignored")
    manifest.save()
    monkeypatch.setattr(runner, "provider_for", lambda *a: pytest.fail("no engine may be provided"))
    with pytest.raises(runner.KitError, match=needle):
        resume(run_dir, say=lambda line: None)


def test_a_recorded_out_folder_that_cannot_be_made_here_does_not_stop_a_resume(tmp_path, monkeypatch):
    """`out` is where the run folder was made; a resume writes into the folder where it is now."""
    run_dir = stopped_run(tmp_path)
    manifest = Manifest.load(run_dir)
    manifest.run.options["out"] = "/proc/not-here"
    manifest.save()

    def provider_for(options, protocol, say):
        raise runner.KitError(f"provided, out {options.out}")
    monkeypatch.setattr(runner, "provider_for", provider_for)
    with pytest.raises(runner.KitError, match="provided, out None"):
        resume(run_dir, say=lambda line: None)


@pytest.mark.parametrize("change, needle", [
    (lambda m: m.update(options="x"), "manifest.json: options: Input should be a valid dictionary"),
    (lambda m: m.update(engine=5), "manifest.json: engine: Input should be a valid dictionary"),
    (lambda m: m.pop("status"), "status not laid out"),
    (lambda m: m["protocol"].update(overrides=[1]), "protocol.overrides not laid out"),
    (lambda m: m.setdefault("provenance", {}).update(cpu_backend={"name": "x"}), "provenance.cpu_backend is not"),
])
def test_a_manifest_not_laid_out_as_kit_run_writes_it_is_refused_in_one_line(tmp_path, monkeypatch, capsys,
                                                                              change, needle):
    run_dir = stopped_run(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    change(manifest)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _kit(monkeypatch, capsys, "resume", str(run_dir))
    assert code != 0 and err.count("\n") == 1 and err.startswith("kit: error: ") and needle in err
