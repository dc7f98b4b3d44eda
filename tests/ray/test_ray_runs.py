"""`--executor ray` on a local Ray cluster (two nodes) with the real embedded engine: the demo's two
fresh-server sessions as Ray tasks, one on each node, give the run folder a local run gives, record for
record; a worker killed mid-pass ends with the same records after its unit is queued again; an interrupted
Ray run resumes to the same."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kit.record.manifest import Manifest
from kit.run import runner
from kit.run.resume import resume
from tests.ray.same_run import assert_same, records

pytestmark = pytest.mark.ray

DEMO = {"workload": {"items": 3}, "max_tokens": 24}  # the demo's two sessions, sized down
RESULTS = "reset_table.json"


def _demo(out, **options):
    return runner.run(runner.RunOptions("demo", overrides=DEMO, out=out, threads=1, **options), say=lambda _: None)


@pytest.fixture(scope="module")
def local_demo(tmp_path_factory):
    result = _demo(tmp_path_factory.mktemp("local"))
    assert result.status == "finished", result.reason
    return result.run_dir


def test_demo_on_ray_equals_the_local_run(ray_cluster, local_demo, tmp_path):
    result = _demo(tmp_path, executor="ray", cpus_per_task=1.0)
    assert result.status == "finished", result.reason
    assert_same(result.run_dir, local_demo, RESULTS)
    manifest = Manifest.load(result.run_dir)
    nodes = {pass_id: info.model_extra["executor"] for pass_id, info in manifest.run.passes.items()}
    assert set(nodes) == {"s1", "s2"}
    assert len({where["node_id"] for where in nodes.values()}) == 2  # a session on each of the cluster's nodes
    for where in nodes.values():  # which node, CPU and engine build served each pass
        assert where["name"] == "ray" and where["node"] and where["cpu"] and where["attempt"] == 1
        assert where["cpu_backend_sha256"] == manifest.run.provenance.cpu_backend["library_sha256"]
    assert sorted(p.name for p in (result.run_dir / "logs").glob("server-*.log")) == ["server-s1.log", "server-s2.log"]
    assert manifest.run.options["executor"] == "ray"


def _when(check, timeout=300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def _started(out, pass_id):
    """(run folder, the pass's manifest entry) once the pass has written a record."""
    def check():
        for run_dir in out.glob("demo-*"):
            path = run_dir / "records" / f"{pass_id}.jsonl"
            if path.is_file() and path.read_bytes().count(b"\n") >= 1:
                info = Manifest.load(run_dir).run.passes.get(pass_id)
                if info is not None and "executor" in (info.model_extra or {}):
                    return run_dir, info
        return None
    return _when(check)


def test_a_worker_killed_mid_pass_is_run_again_to_the_same_records(ray_cluster, local_demo, tmp_path):
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=_demo(tmp_path, executor="ray",
                                                                         cpus_per_task=1.0)))
    thread.start()
    run_dir, info = _started(tmp_path, "s1")
    worker, server = info.model_extra["executor"]["worker_pid"], info.launch["pid"]
    os.kill(worker, signal.SIGKILL)
    thread.join(600)
    result = outcome["result"]
    assert result.status == "finished", result.reason
    assert_same(result.run_dir, local_demo, RESULTS)
    again = Manifest.load(result.run_dir).run.passes["s1"].model_extra["executor"]
    assert again["attempt"] == 2 and again["worker_pid"] != worker
    lost = list((result.run_dir / "records" / "superseded").glob("s1.jsonl.*"))
    assert len(lost) == 1 and lost[0].read_bytes().count(b"\n") >= 1  # the lost attempt's records, kept aside
    _when(lambda: not _running(server), 30)  # the lost worker's engine was stopped with it


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_an_interrupted_ray_run_resumes_to_the_same_records(ray_cluster, local_demo, tmp_path):
    stop = threading.Event()
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=_demo(tmp_path, executor="ray", stop=stop)))
    thread.start()
    _started(tmp_path, "s2")
    stop.set()
    thread.join(600)
    stopped = outcome["result"]
    assert stopped.status == "interrupted", stopped.reason
    assert records(stopped.run_dir) != records(local_demo)
    resumed = resume(stopped.run_dir, say=lambda _: None, executor={"executor": "ray"})
    assert resumed.status == "finished", resumed.reason
    assert_same(resumed.run_dir, local_demo, RESULTS)
