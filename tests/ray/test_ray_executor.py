"""The Ray executor's driver side with units that start no engine (quick): every unit's records reach the
run folder through the one writer, in each file's order; a unit that fails lets the others finish, then its
error ends the map."""

import pytest

from kit.core.events import UnitProgress
from kit.core.errors import EngineError
from kit.protocols.procedure import RunContext, Unit
from kit.record.manifest import Manifest

pytestmark = pytest.mark.ray


def write_lines(ctx: RunContext, unit: Unit) -> None:
    lines, fail = unit.payload
    name = f"records/{unit.name}.jsonl"
    ctx.manifest.set_pass(unit.name, status="running", file=name)
    with ctx.records(name) as writer:
        for seq in range(lines):
            writer.write_line(b'{"seq":%d}\n' % seq)
    if fail:
        raise EngineError(f"unit {unit.name} failed on purpose")
    ctx.manifest.set_pass(unit.name, status="OK", records=writer.count)


def _map(ray_cluster, tmp_path, units):
    from kit.run.ray_executor import RayExecutor

    manifest = Manifest.create(tmp_path, protocol={"name": "t", "kind": "t"})
    events = []
    ctx = RunContext(tmp_path, manifest, provider=None, emit=events.append)
    try:
        RayExecutor(cpus_per_task=0.5).map(ctx, write_lines, units)
    finally:
        passes = Manifest.load(tmp_path).run.passes
    return passes, events


def test_every_units_records_reach_the_run_folder_in_order(ray_cluster, tmp_path):
    passes, events = _map(ray_cluster, tmp_path, [Unit(f"u{i}", (20 + i, False)) for i in range(4)])
    for i in range(4):
        lines = (tmp_path / "records" / f"u{i}.jsonl").read_bytes().splitlines()
        assert lines == [b'{"seq":%d}' % seq for seq in range(20 + i)]
        assert passes[f"u{i}"].status == "OK" and passes[f"u{i}"].records == 20 + i
        assert passes[f"u{i}"].model_extra["executor"]["name"] == "ray"
    progress = [event for event in events if isinstance(event, UnitProgress)]
    assert sorted(event.unit for event in progress if event.state == "running") == [f"u{i}" for i in range(4)]
    ended = [event for event in progress if event.state == "done"]
    assert sorted(event.done for event in ended) == [1, 2, 3, 4] and {event.total for event in ended} == {4}
    assert all(event.node and event.node_ip for event in progress)


def test_a_failed_unit_lets_the_others_finish_then_ends_the_map(ray_cluster, tmp_path):
    with pytest.raises(EngineError, match="unit u1 failed on purpose"):
        _map(ray_cluster, tmp_path, [Unit("u0", (3, False)), Unit("u1", (2, True)), Unit("u2", (3, False))])
    passes = Manifest.load(tmp_path).run.passes
    assert (passes["u0"].status, passes["u1"].status, passes["u2"].status) == ("OK", "running", "OK")
    assert (tmp_path / "records" / "u1.jsonl").read_bytes() == b'{"seq":0}\n{"seq":1}\n'  # kept, as a local run


def write_beside(ctx: RunContext, unit: Unit) -> None:
    from kit.record.files import RecordWriter

    with RecordWriter(ctx.run_dir / "records" / f"{unit.name}.jsonl") as writer:  # not ctx.records: stays on the node
        writer.write_line(b'{"seq":0}\n')


def test_records_a_unit_writes_past_ctx_records_end_it_with_an_error_not_lost_silently(ray_cluster, tmp_path):
    from kit.run.ray_executor import RayExecutor

    manifest = Manifest.create(tmp_path, protocol={"name": "t", "kind": "t"})
    ctx = RunContext(tmp_path, manifest, provider=None, emit=lambda _event: None)
    with pytest.raises(EngineError, match=r"unit u0 wrote records/u0.jsonl on its node instead of through ctx.records"):
        RayExecutor(cpus_per_task=0.5).map(ctx, write_beside, [Unit("u0", None)])


def test_prepare_warms_one_worker_per_slot_and_the_units_run_on_them(ray_cluster, tmp_path):
    import ray

    from kit.run.ray_executor import RayExecutor

    # two nodes of one CPU, one CPU a task: one slot on each. Not fractional CPUs: Ray may reclaim a node's idle
    # workers past its CPU count (num_workers_soft_limit), warmed or not, which is Ray's to decide
    executor = RayExecutor(cpus_per_task=1.0)
    executor.prepare()
    warmed = ray.get(executor.warming, timeout=120)
    assert len(warmed) == 2 and len(set(warmed)) == 2  # the gate kept each on a worker of its own
    manifest = Manifest.create(tmp_path, protocol={"name": "t", "kind": "t"})
    ctx = RunContext(tmp_path, manifest, provider=None, emit=lambda _event: None)
    executor.map(ctx, write_lines, [Unit(f"u{i}", (3, False)) for i in range(8)])
    served = {info.model_extra["executor"]["worker_pid"] for info in Manifest.load(tmp_path).run.passes.values()}
    assert served <= set(warmed)  # the units took the warmed workers, none started for them
