"""An engine spanning several GPUs (kit.run.ray_placement): `--gpus-per-task N`, N > 1, reserves the N GPUs
of one node together in a STRICT_PACK placement group, the unit's task runs in it, and the group is removed
when the unit ends, fails or is cancelled; a task no node can hold is refused in one line before anything
starts. The tier's cluster declares two GPUs on each of its two nodes (tests/ray/conftest.py)."""

import threading
import time

import pytest

from kit.core.errors import ConfigError, EngineError
from kit.protocols.procedure import RunContext, Unit
from kit.record.manifest import Manifest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

from kit.run.ray_placement import Placement  # noqa: E402 - needs Ray

NODES = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0}},
         {"NodeID": "b", "Alive": True, "Resources": {"CPU": 4.0}},
         {"NodeID": "c", "Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]  # a dead node holds nothing


def test_more_gpus_per_task_than_any_live_node_has_is_refused():
    with pytest.raises(ConfigError) as refused:
        Placement(cpus=1, gpus=3).check(NODES)
    line = refused.value.line()
    assert "--gpus-per-task 3: no node of the Ray cluster has that many GPUs (the most on one node: 2" in line
    assert "\n" not in line
    Placement(cpus=1, gpus=2).check(NODES)  # two on one node: fits
    with pytest.raises(ConfigError, match=r"--cpus-per-task 9 with --gpus-per-task 2: no node .* has both \(the "
                                          r"most CPUs on one node: 8\)"):
        Placement(cpus=9, gpus=2).check(NODES)
    with pytest.raises(ConfigError, match=r"--gpus-per-task 1.5: above one GPU, a task takes whole GPUs"):
        Placement(cpus=1, gpus=1.5).check(NODES)


def test_a_group_only_where_an_engine_spans_gpus_and_the_slots_the_nodes_have():
    assert Placement(cpus=2, gpus=2).bundles() == [{"CPU": 2, "GPU": 2}]
    assert [Placement(gpus=gpus).grouped for gpus in (0, 0.5, 1, 2)] == [False, False, False, True]
    assert Placement(cpus=2).slots(NODES) == 4 + 2 and Placement(cpus=1, gpus=1).slots(NODES) == 2
    assert Placement(cpus=0.5, gpus=2).slots(NODES) == 1 and Placement(cpus=0.01).slots(NODES, most=32) == 32
    assert Placement(cpus=2).slots_by_node(NODES) == {"a": 4, "b": 2}
    assert Placement(cpus=1, gpus=1).slots_by_node(NODES) == {"a": 2}  # b has no GPU, c is dead
    assert Placement(cpus=1).slots_by_node(NODES, most=10) == {"a": 8, "b": 2}


def unit_in_group(ctx: RunContext, unit: Unit) -> None:
    """A pass that starts no engine: its manifest entry records where it ran (its group, its GPUs)."""
    ctx.manifest.set_pass(unit.name, status="running")
    with ctx.records(f"records/{unit.name}.jsonl") as writer:
        writer.write_line(b'{"seq":0}\n')
    while unit.payload == "wait":  # until cancelled: the node's stop ends it
        ctx.checkpoint()
        time.sleep(0.05)
    if unit.payload == "fail":
        raise EngineError(f"unit {unit.name} failed on purpose")
    ctx.manifest.set_pass(unit.name, status="OK")


def _where(run_dir, name):
    """The executor entry of the pass `name` in the run's manifest."""
    return Manifest.load(run_dir).run.passes[name].model_extra["executor"]


def _when_removed(group_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while (found := ray.util.placement_group_table().get(group_id, {})).get("state") != "REMOVED":
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    return found


@pytest.mark.ray
def test_each_unit_runs_in_its_own_strict_pack_group_removed_when_it_ends_or_fails(ray_cluster, tmp_path):
    from kit.run.ray_executor import RayExecutor

    manifest = Manifest.create(tmp_path, protocol={"name": "t", "kind": "t"})
    ctx = RunContext(tmp_path, manifest, provider=None, emit=lambda _event: None)
    executor = RayExecutor(cpus_per_task=0.5, gpus_per_task=2)
    with pytest.raises(EngineError, match="unit u2 failed on purpose"):
        executor.map(ctx, unit_in_group, [Unit("u0", None), Unit("u1", None), Unit("u2", "fail")])
    where = {name: _where(tmp_path, name) for name in ("u0", "u1", "u2")}
    assert len({entry["placement_group"] for entry in where.values()} - {None}) == 3  # one group per unit
    for name, entry in where.items():
        table = _when_removed(entry["placement_group"])  # removed once its unit ended, the failed one included
        assert table["strategy"] == "STRICT_PACK" and table["name"].startswith(f"kit-unit-{name}-1-")
        assert [dict(bundle) for bundle in table["bundles"].values()] == [{"CPU": 0.5, "GPU": 2.0}]
        assert len(entry["gpus"]) == 2  # the task holds both of its node's GPUs


@pytest.mark.ray
def test_a_cancelled_units_group_is_removed(ray_cluster, tmp_path):
    from kit.run.ray_executor import RayExecutor

    stop = threading.Event()
    manifest = Manifest.create(tmp_path, protocol={"name": "t", "kind": "t"})
    ctx = RunContext(tmp_path, manifest, provider=None, emit=lambda _event: None, stop=stop)
    outcome = {}

    def run() -> None:
        try:
            RayExecutor(cpus_per_task=0.5, gpus_per_task=2).map(ctx, unit_in_group, [Unit("w0", "wait")])
        except BaseException as exc:  # noqa: BLE001 - the stop, looked at below
            outcome["raised"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / "records" / "w0.jsonl").is_file():  # the unit runs, in its group
        assert time.monotonic() < deadline
        time.sleep(0.1)
    stop.set()
    thread.join(120)
    assert type(outcome.get("raised")).__name__ == "RunStopped"
    assert _when_removed(_where(tmp_path, "w0")["placement_group"])["strategy"] == "STRICT_PACK"


@pytest.mark.ray
def test_a_run_no_node_can_place_is_refused_before_anything_is_written(ray_cluster, tmp_path):
    from kit.run import runner

    with pytest.raises(ConfigError) as refused:
        runner.run(runner.RunOptions("demo", out=tmp_path, executor="ray", gpus_per_task=3), say=lambda _: None)
    assert "no node of the Ray cluster has that many GPUs (the most on one node: 2" in refused.value.line()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ray
def test_the_command_line_refuses_it_in_one_line(ray_cluster, tmp_path):
    import subprocess
    import sys

    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "kit.cli", "demo", "--executor", "ray", "--ray-address", address,
                           "--gpus-per-task", "3", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert lines[0].startswith("kit: error: --gpus-per-task 3: no node of the Ray cluster has that many GPUs")
    assert not (tmp_path / "out").exists()
