"""The executor seam without an engine: the local executor runs a procedure's units in order in this process,
each with its own provider; `--executor` is checked before anything is fetched or written; a resume runs where
it is asked now; the Ray executor's relays (records, manifest changes) on the node side."""

import threading
from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.launch.native import ServerSpec
from kit.launch.provider import ExternalProvider, NativeProvider
from kit.protocols import kinds
from kit.protocols.procedure import LOCAL, RunContext, Unit
from kit.run import executors
from kit.run.runner import RunOptions


def _ctx(tmp_path, provider="run's provider", emit=None):
    return RunContext(tmp_path, manifest=None, provider=provider, emit=emit or (lambda _e: None))


def test_the_local_executor_runs_every_unit_in_order_with_its_provider(tmp_path):
    seen = []
    units = [Unit("s1", 1), Unit("q8-h0-on", 2, provider="q8's provider"), Unit("s3", 3)]
    LOCAL.map(_ctx(tmp_path), lambda ctx, unit: seen.append((unit.name, unit.payload, ctx.provider)), units)
    assert seen == [("s1", 1, "run's provider"), ("q8-h0-on", 2, "q8's provider"), ("s3", 3, "run's provider")]


def test_the_local_executor_stops_at_the_first_unit_that_fails(tmp_path):
    seen = []

    def run_unit(ctx, unit):
        seen.append(unit.name)
        if unit.name == "s2":
            raise ConfigError("s2 failed")

    with pytest.raises(ConfigError, match="s2 failed"):
        LOCAL.map(_ctx(tmp_path), run_unit, [Unit("s1", None), Unit("s2", None), Unit("s3", None)])
    assert seen == ["s1", "s2"]


def test_a_procedure_opens_its_records_in_the_run_folder(tmp_path):
    with _ctx(tmp_path).records("records/s1.jsonl", run_id="r", pass_id="s1") as writer:
        writer.write_line(b'{"a":1}\n')
    assert (tmp_path / "records" / "s1.jsonl").read_bytes() == b'{"a":1}\n' and writer.count == 1


def _kind(name):
    return kinds.KINDS[name]


def _native():
    return NativeProvider(ServerSpec(binary=Path("/nonexistent/llama-server"), model=Path("/nonexistent/m.gguf")))


def test_local_is_the_default_and_needs_nothing(tmp_path):
    assert executors.make(RunOptions("demo"), _kind("grid"), ExternalProvider("http://127.0.0.1:9")) is LOCAL


def test_the_kinds_that_hand_their_units_to_the_executor_are_the_ones_ray_runs():
    assert executors.ray_kinds() == ["reset", "grid", "sweep", "flag_order"]  # as each declares (Kind.units)


@pytest.mark.parametrize("kind", sorted(set(kinds.KINDS) - {"reset", "grid", "sweep", "flag_order"}))
def test_ray_refuses_the_kinds_whose_passes_run_here_only(kind):
    with pytest.raises(ConfigError) as refused:
        executors.check(RunOptions("x", executor="ray"), _kind(kind))
    assert f"of kind {kind}" in refused.value.line() and "without --executor ray" in refused.value.line()


def test_ray_refuses_an_engine_it_cannot_start_on_a_node():
    with pytest.raises(ConfigError, match="this run's engine is external"):
        executors.make(RunOptions("demo", executor="ray"), _kind("reset"), ExternalProvider("http://127.0.0.1:9"))


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(executors, "ray_installed", lambda: False)
    with pytest.raises(ConfigError) as refused:
        executors.make(RunOptions("demo", executor="ray"), _kind("reset"), _native())
    line = refused.value.line()
    assert "needs Ray, which is not installed" in line and "pip install -e '.[ray]'" in line and "\n" not in line


def test_a_resume_runs_where_it_is_asked_now_never_where_the_folder_says():
    saved = {"threads": 2, "executor": "ray", "ray_address": "ray://cluster.example:10001", "cpus_per_task": 4.0}
    assert executors.resumed(saved, {}) == {"threads": 2}
    assert executors.resumed(saved, {"executor": "ray"}) == {"threads": 2, "executor": "ray"}


def test_the_cli_refuses_ray_options_without_the_ray_executor():
    import click

    from kit.run.executor_cli import chosen

    assert chosen("local", None, 1.0, 0.0) == {"executor": "local"}
    assert chosen("ray", "auto", 0.5, 1.0) == {"executor": "ray", "ray_address": "auto", "cpus_per_task": 0.5,
                                               "gpus_per_task": 1.0}
    with pytest.raises(click.BadParameter, match="apply to --executor ray"):
        chosen("local", "auto", 1.0, 0.0)


def test_on_a_node_records_and_manifest_changes_go_to_the_driver_not_to_disk(tmp_path):
    ray_executor = pytest.importorskip("kit.run.ray_executor")
    from kit.record.manifest import RunManifest

    relay = ray_executor._Relay()
    manifest = ray_executor._RelayedManifest(tmp_path, RunManifest.model_validate({"run_id": "r", "passes": {}}),
                                             relay)
    ctx = ray_executor._TaskContext(tmp_path, manifest, _native(), lambda e: relay.put("event", e),
                                    stop=threading.Event(), relay=relay)
    manifest.set_pass("s1", status="running", file="records/s1.jsonl")
    with ctx.records("records/s1.jsonl", run_id="r", pass_id="s1") as writer:
        writer.write_line(b'{"seq":0}\n')
        writer.write_line(b'{"seq":1}\n')
    manifest.set_pass("s1", status="OK", records=writer.count)
    sent = []
    while not relay.out.empty():
        sent.append(relay.out.get())
    assert sent == [("set_pass", "s1", {"status": "running", "file": "records/s1.jsonl"}),
                    ("record", "records/s1.jsonl", b'{"seq":0}\n'), ("record", "records/s1.jsonl", b'{"seq":1}\n'),
                    ("set_pass", "s1", {"status": "OK", "records": 2})]
    assert manifest.run.passes["s1"].status == "OK"  # the unit reads its own changes back
    assert list(tmp_path.iterdir()) == []  # nothing written on the node
