"""A run that does not finish says why, truly (kit.run.faults): a stop signal ends it `interrupted` naming
the signal, even when a helper the signal killed fails on the way out; a full disk or a failed write ends
it `failed` saying so in one line, never a traceback, with the final manifest written and records intact;
`kit resume` continues it. The procedure is a stand-in here; tests/test_run_faults_engine.py does the
same with the real engine (SIGTERM mid-pass, a full tmpfs)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import sys

import pytest

from kit import cli
from kit.run import faults as run_faults, runner
from kit.core.errors import KitError
from kit.protocols import kinds
from kit.protocols.procedure import Prepared
from kit.run.lock import LOCK


class _Provider:
    fresh_servers = True

    def describe(self):
        return {"kind": "fake"}


def _procedure(monkeypatch, run) -> None:
    """`kit run reset` with `run(run_dir)` as its procedure and no engine."""
    real = kinds.KINDS["reset"]
    fake = dataclasses.replace(real, prepare=lambda protocol, inputs: Prepared(plan={}, workload={}),
                               run=lambda protocol, prepared, context: run(context.run_dir, context.manifest),
                               results=lambda run_dir: {"files": {}})
    monkeypatch.setattr(kinds, "of", lambda protocol: fake)
    monkeypatch.setattr(runner, "provider_for", lambda *a: _Provider())


def _manifest(tmp_path) -> dict:
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("reset-")]
    return json.loads((run_dir / "manifest.json").read_text())


@pytest.fixture
def stop_signals():
    """The kit's stop-signal handlers in this process for the test, the old ones back afterwards."""
    saved = {number: signal.getsignal(number) for number in run_faults.STOP_SIGNALS}
    run_faults.on_stop_signals()
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)
    run_faults.clear()


def _disk_full(run_dir, manifest):
    manifest.set_pass("s1", status="running", file="records/s1.jsonl")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_ends_the_run_failed_with_that_cause_and_the_manifest_final(tmp_path, monkeypatch):
    _procedure(monkeypatch, _disk_full)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert result.status == "failed" and result.reason.startswith("the disk is full (No space left on device)")
    manifest = _manifest(tmp_path)
    assert (manifest["status"], manifest["reason"]) == ("failed", result.reason) and manifest["ended"]
    assert manifest["passes"]["s1"]["status"] == "failed"  # cut short: never reported as a result
    assert not (result.run_dir / LOCK).exists()  # the lock and its disk reserve are given back


def test_the_command_line_says_a_full_disk_in_one_line_and_how_to_go_on(tmp_path, monkeypatch, capsys):
    _procedure(monkeypatch, _disk_full)
    monkeypatch.setattr(sys, "argv", ["kit", "run", "reset", "--yes", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    err = capsys.readouterr().err
    assert ended.value.code != 0 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("kit: error: the run failed: the disk is full") and "`kit resume " in err


@pytest.mark.parametrize("number, named", [(signal.SIGTERM, "stopped by SIGTERM"), (signal.SIGHUP, "stopped by SIGHUP"),
                                           (signal.SIGINT, "stopped by Ctrl-C (SIGINT)")])
def test_a_stop_signal_ends_the_run_interrupted_naming_it(number, named, tmp_path, monkeypatch, stop_signals):
    def signalled(run_dir, manifest):
        manifest.set_pass("s1", status="running", file="records/s1.jsonl")
        os.kill(os.getpid(), number)
        raise AssertionError("the signal did not stop the run")

    _procedure(monkeypatch, signalled)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert (result.status, result.reason) == ("interrupted", f"{named}; records written so far are kept")
    assert _manifest(tmp_path)["status"] == "interrupted"


def test_what_a_killed_helper_raises_on_the_way_out_is_not_the_cause(tmp_path, monkeypatch, stop_signals):
    """SIGTERM to the process group kills the BFCL worker too; the episode's `finally` then asks the dead
    worker to release its episode, which raises. The run was stopped by SIGTERM, not broken."""
    def episode(run_dir, manifest):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            raise KitError("BFCL worker exited during 'release'", "`kit workloads install bfcl` repairs the install")

    _procedure(monkeypatch, episode)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert (result.status, result.reason) == ("interrupted", "stopped by SIGTERM; records written so far are kept")


def test_a_stop_in_the_chain_of_an_error_is_the_cause_without_a_signal(tmp_path, monkeypatch):
    def episode(run_dir, manifest):
        try:
            raise KeyboardInterrupt
        finally:
            raise KitError("BFCL worker exited during 'release'")

    _procedure(monkeypatch, episode)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert (result.status, result.reason) == ("interrupted", "stopped by the user; records written so far are kept")


def test_a_real_error_stays_the_cause(tmp_path, monkeypatch):
    def broken(run_dir, manifest):
        raise KitError("BFCL worker exited during 'release'", "see its log")

    _procedure(monkeypatch, broken)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert (result.status, result.reason) == ("failed", "BFCL worker exited during 'release'; see its log")


def test_a_second_signal_while_the_results_are_computed_stops_that_and_the_run_stays_interrupted(tmp_path, monkeypatch, stop_signals):
    def signalled(run_dir, manifest):
        os.kill(os.getpid(), signal.SIGTERM)

    def results(run_dir):
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while the results are written
        return {"files": {}}

    _procedure(monkeypatch, signalled)
    fake = kinds.of(None)
    monkeypatch.setattr(kinds, "of", lambda protocol: dataclasses.replace(fake, results=results))
    with pytest.raises(KeyboardInterrupt):  # the second stop is passed on, once the manifest is final
        runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    manifest = _manifest(tmp_path)
    assert (manifest["status"], manifest["reason"]) == ("interrupted", "stopped by SIGTERM; records written so far "
                                                                       "are kept")


def test_a_signal_during_the_final_manifest_writes_is_held_until_they_are_done(tmp_path, monkeypatch, stop_signals):
    from kit.record.manifest import Manifest

    finish = Manifest.finish

    def signalled_finish(self, status, reason=None, **fields):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the manifest is being finished
        finish(self, status, reason, **fields)

    _procedure(monkeypatch, lambda run_dir, manifest: None)
    monkeypatch.setattr(Manifest, "finish", signalled_finish)
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path), say=lambda line: None)
    assert result.status == "finished" and _manifest(tmp_path)["status"] == "finished"
    assert run_faults.received() == signal.SIGTERM  # heard, and left for whoever runs next
