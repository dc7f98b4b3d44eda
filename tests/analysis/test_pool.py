"""The analysis's worker pool (kit.analysis.parallel.Pool): jobs run where and when `kit analyze` relies on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.analysis import parallel
from tests.analysis.records_builder import position, write_grid_like

ROOT = Path(__file__).resolve().parents[2]
EPISODES = ["e0", "e1"]


def _fails(x):
    raise ValueError(f"job {x} failed")


def _double(x):
    return 2 * x


def test_without_workers_a_job_runs_when_its_result_is_asked_for_and_fails_then():
    ran: list = []
    with parallel.Pool(1) as pool:
        bad = pool.submit(_fails, 1)
        good = pool.submit(lambda x: ran.append(x) or 2 * x, 3)
        assert ran == []  # nothing ran at submit
        assert good.result() == 6 and ran == [3]
        with pytest.raises(ValueError, match="job 1 failed"):
            bad.result()
        assert pool.map(_double, [(1,), (5,), (2,)], cost=lambda x: x) == [2, 10, 4]


def _collector_on(_):
    import gc

    return gc.isenabled()


@pytest.mark.parametrize("workers", [1, 2])
def test_jobs_run_with_the_collector_paused_and_it_is_back_on_after(workers):
    import gc

    assert gc.isenabled()
    with parallel.Pool(workers) as pool:
        assert pool.map(_collector_on, [(0,), (1,)]) == [False, False]
        with pytest.raises(ValueError, match="job 7 failed"):
            pool.submit(_fails, 7).result()
    assert parallel.parallel_map(_collector_on, [(0,)], workers=1) == [False]
    assert gc.isenabled()  # after a job that returned, and one that raised
    if workers > 1:  # and in the workers: a job asking only for a later job's state
        with parallel.Pool(workers) as pool:
            with pytest.raises(ValueError, match="job 1 failed"):
                pool.submit(_fails, 1).result()
            assert pool.executor.submit(gc.isenabled).result() is True  # a worker's own state, between jobs


def _pid(_):
    return os.getpid()


def test_with_workers_jobs_submitted_later_run_on_the_same_worker_processes():
    with parallel.Pool(2) as pool:
        first = pool.map(_pid, [(i,) for i in range(4)])
        later = pool.beside(pool.map, _pid, [(i,) for i in range(4)]).result()  # from a thread, as the bootstrap
    assert os.getpid() not in first + later
    assert len(set(first + later)) <= 2  # no second pool was forked for them


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=300)
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_worker_tells_glibc_to_keep_freed_memory():
    assert _run("from kit.analysis.parallel import keep_freed_memory; print(keep_freed_memory())") == "True"


def test_reading_a_run_needs_no_statistics_stack(tmp_path):
    """The workers are forked before the main process imports scipy.stats and arch (kit.analysis.findings.compute):
    a read that imported them would pay that second or so in every worker."""
    steps = {u: [(f"{u}-p0", [position(1, 1.5, 2, 2)], 0), (f"{u}-p1", [position(3, 0.5, 4, 2)], 5)]
             for u in EPISODES}
    passes = {p: {"arm": arm, "order": EPISODES, "episodes": steps}
              for p, arm in (("on1", "on"), ("on2", "on"), ("off1", "off"), ("off2", "off"))}
    grid = write_grid_like(tmp_path / "grid", passes)
    sweep = write_grid_like(tmp_path / "sweep", {p: passes[p] for p in ("on1", "off1")},
                            sweep={"format": "F16", "history": 0}, model_name="toy-F16", cache_ram=0)
    code = f"""
import json, sys
from pathlib import Path
from kit.analysis import findings
from kit.analysis.collect import collect
runs = collect([Path({str(grid)!r}), Path({str(sweep)!r})])
before = set(sys.modules)
counts, positions = findings._grid_run(runs.of_kind("grid")[0])
cell, found = findings._sweep_cell(runs.of_kind("sweep")[0], True)
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("arch", "pandas", "statsmodels")
               or m.startswith("scipy.stats"))
print(json.dumps({{"heavy": heavy, "interval": counts["comparisons"]["path"].get("interval", "absent"),
                  "positions": len(positions.margin), "cell": sorted(cell)}}))
"""
    seen = json.loads(_run(code))
    assert seen["heavy"] == []
    assert seen["interval"] is None  # left for the main process (grid_findings.add_intervals)
    assert seen["positions"] > 0 and seen["cell"]
