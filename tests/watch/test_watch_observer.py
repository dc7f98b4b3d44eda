"""kit watch reads its calls in an observer process of its own (kit.watch.observer), on real loopback sockets (the
proxy served in a thread, a raw-socket upstream): what it records is what the proxy records reading on its own
loop; calls handed over are delivered in order when it is told to end; an observer that stops, is killed or
is stuck loses no call (the proxy reads them itself, and says so once)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from kit.watch.connections import Bounds
from kit.watch.serve import Watch, in_thread
from tests.watch.raw_upstream import RawUpstream, until

CALLS = [({"prompt": "x", "temperature": 0}, False), ({"prompt": "y", "seed": 3}, False),
         ({"prompt": "x", "temperature": 0}, True), ({"prompt": "z"}, True), ({"prompt": "x", "top_k": 1}, False)]
VOLATILE = ("started", "wall_seconds", "run_id")


def call(watch: Watch, body: dict[str, Any], stream: bool) -> bytes:
    with httpx.stream("POST", watch.url + "/completion", json={**body, "stream": stream}, timeout=10) as reply:
        assert reply.status_code == 200
        return reply.read()


def records(watch: Watch) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((watch.recorder.run_dir / "records").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def waited_for(pid: int) -> None:
    """The process ended and was waited for: not left defunct (a zombie) under the process that started it."""
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def calls_through(tmp_path: Path, observer: bool, scenario: str) -> tuple[list[bytes], list[dict[str, Any]]]:
    raw = RawUpstream(scenario)
    try:
        with in_thread(raw.url, tmp_path / f"{observer}-{scenario}", quiet=True, bounds=Bounds(max_connections=8),
                       observer=observer) as watch:
            assert (watch.proxy.observer is not None) == observer
            assert observer is False or watch.proxy.observer.pid is None  # started by the first call
            answers = [call(watch, body, stream) for body, stream in CALLS]
            assert until(lambda: watch.proxy.calls == len(CALLS))
            if observer and watch.proxy.observer.transport is not None:  # (not when it could not start)
                assert watch.proxy.observer.pid not in (None, os.getpid())
    finally:
        raw.stop()
    if observer and watch.proxy.observer.pid is not None:
        waited_for(watch.proxy.observer.pid)
    return answers, [{k: v for k, v in record.items() if k not in VOLATILE} for record in records(watch)]


@pytest.mark.parametrize("scenario", ["ok", "events"])
def test_the_observer_process_records_what_the_proxy_records_on_its_own_loop(tmp_path, scenario):
    answers, seen = calls_through(tmp_path, True, scenario)
    same_answers, same_seen = calls_through(tmp_path, False, scenario)
    assert answers == same_answers and seen == same_seen
    assert [record["seq"] for record in seen] == list(range(len(CALLS)))
    assert all(record["state"]["state"] == "full_kv" and record["error"] is None for record in seen)
    assert [record["alarms"] for record in seen] == [[]] * len(CALLS)  # one answer per request: no alarm


ENDS = {"killed": "its output ended", "stuck then killed": "its output ended", "stuck then told to end": None,
        "stuck to the end": "it did not end within 0.5 s of its last call"}


@pytest.mark.parametrize("end", ENDS)
def test_an_observer_that_ends_or_is_stuck_loses_no_call(tmp_path, capfd, monkeypatch, end):
    from kit.watch import observer as module

    monkeypatch.setattr(module, "CLOSE_SECONDS", 0.5)
    raw = RawUpstream("ok")
    try:
        with in_thread(raw.url, tmp_path, quiet=True, bounds=Bounds(max_connections=8)) as watch:
            observer = watch.proxy.observer
            assert observer is not None and observer.pid is None  # started by the first call
            call(watch, *CALLS[0])
            assert until(lambda: watch.proxy.calls == 1) and observer.pid is not None
            os.kill(observer.pid, signal.SIGKILL if end == "killed" else signal.SIGSTOP)
            for body, stream in CALLS[1:]:
                call(watch, body, stream)
            if end == "stuck then killed":
                assert until(lambda: len(observer.pending) == len(CALLS) - 1)  # handed over, not back
                assert watch.proxy.calls == 1
                os.kill(observer.pid, signal.SIGKILL)
            elif end == "stuck then told to end":
                os.kill(observer.pid, signal.SIGCONT)  # it sends back what it was handed when the watch stops
            assert end.startswith("stuck t") or until(lambda: watch.proxy.calls == len(CALLS))
    finally:
        raw.stop()
    waited_for(observer.pid)
    manifest = json.loads((watch.recorder.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["watch"]["calls_recorded"] == len(CALLS)
    assert [record["seq"] for record in records(watch)] == list(range(len(CALLS)))
    said = capfd.readouterr().err
    assert said.count("the observer process stopped") == (ENDS[end] is not None)
    assert ENDS[end] is None or f"the observer process stopped ({ENDS[end]}); calls are read on the proxy's loop" in said


def test_an_observer_that_cannot_start_leaves_the_calls_to_the_proxy_and_says_so(tmp_path, capfd, monkeypatch):
    from kit.watch.observer import Observer

    monkeypatch.setattr(Observer, "command", (str(tmp_path / "no-such-python"), "-m", "kit.watch.observer"))
    answers, seen = calls_through(tmp_path, True, "ok")
    assert len(answers) == len(seen) == len(CALLS) and all(record["error"] is None for record in seen)
    assert "the observer process stopped (it could not start: No such file or directory); calls are read on the " \
           "proxy's loop from now on" in capfd.readouterr().err
