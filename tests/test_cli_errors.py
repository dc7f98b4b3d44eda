"""Bad input: a one-line error saying what to do, a non-zero exit, and records already written kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from kit.run import runner
from kit.core.events import RequestDone, SessionStarted
from kit.record.files import read_records
from tests.bundle.kit_cli import run_here
from tests.console_text import printed


def kit(*args, cwd=None):
    """`kit` in a process of its own (for signals, engines and locks; refusals use `run_here`)."""
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def one_line_error(result, *needles):
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kit: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_unknown_protocol(tmp_path):
    one_line_error(run_here("run", "nope", "--out", str(tmp_path)), "unknown protocol 'nope'", "reset")
    assert not any(tmp_path.iterdir())


def test_invalid_protocol_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("protocol: reset\nmax_tokens: lots\nphases: []\n")
    one_line_error(run_here("run", str(bad), "--out", str(tmp_path / "o")), "bad.yaml", "max_tokens")


def test_missing_gsm8k_file(tmp_path):
    one_line_error(run_here("run", "reset", "--gsm8k", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)),
                   "GSM8K file not found", "--gsm8k")


def test_missing_model(tmp_path):
    one_line_error(run_here("demo", "--model", str(tmp_path / "none.gguf"), "--out", str(tmp_path)), "none.gguf")


def test_missing_server_binary(tmp_path):
    one_line_error(run_here("demo", "--server-bin", str(tmp_path / "llama-server"), "--out", str(tmp_path)),
                   "llama-server binary not found", "--server-bin")


@pytest.mark.engine
def test_port_in_use(tmp_path, embedded_binary):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = kit("demo", "--port", str(port), "--out", str(tmp_path))
    one_line_error(result, f"port {port} is already in use", "--port")


@pytest.mark.engine
def test_engine_that_dies_during_startup(tmp_path, embedded_binary):
    not_a_model = tmp_path / "broken.gguf"
    not_a_model.write_bytes(b"GGUF" + b"\0" * 64)  # GGUF magic, nothing valid behind it
    result = kit("demo", "--model", str(not_a_model), "--out", str(tmp_path))
    one_line_error(result, "llama-server exited during start-up", "log")
    run_dir = next(tmp_path.glob("demo-*"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "exited during start-up" in manifest["reason"]
    # no bundle of a run that did not finish: the run's end says why, and `kit resume` writes one once it has
    assert printed(f"no bundle written: {run_dir} is not a finished run (status 'failed':", result.stdout)
    assert not (tmp_path / "bundles").exists()


@pytest.mark.engine
def test_engine_that_dies_mid_run_keeps_records_and_says_why(tmp_path, embedded_binary):
    pid = {}

    def kill_after_five(event):
        if isinstance(event, SessionStarted):
            pid["server"] = event.launch["pid"]
        if isinstance(event, RequestDone) and event.seq == 5:
            os.kill(pid["server"], signal.SIGKILL)

    options = runner.RunOptions(protocol="demo", out=tmp_path, overrides={"max_tokens": 4})
    result = runner.run(options, emit=kill_after_five, say=lambda _: None)
    assert result.status == "failed"
    assert "engine died during session s1" in result.reason
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"] == result.reason
    records = read_records(result.run_dir / "records" / "s1.jsonl")
    assert len(records.records) == 5 and not records.torn_tail
    session = result.table["sessions"][0]
    assert session["status"] == "failed" and "paths_differ" not in session  # never reported as a result


@pytest.mark.engine
def test_terminating_the_kit_stops_its_engine_and_marks_the_run_interrupted(tmp_path, embedded_binary):
    proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "demo", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:  # wait until the engine is up and serving
        if line.startswith("session s1"):
            break
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 130
    manifest = json.loads(next(tmp_path.glob("demo-*/manifest.json")).read_text())
    assert manifest["status"] == "interrupted"
    pid = manifest["passes"]["s1"]["launch"]["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server it started is gone
