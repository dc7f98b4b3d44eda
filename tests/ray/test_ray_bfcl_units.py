"""A tiny sentinel grid (a fresh server per pass) and a tiny flag x order plan (a fresh server per arm) through Ray
equal the same plans run locally, record for record, episode for episode: every unit a Ray task with its own
fresh servers (each arm's `--cache-ram`) and its own BFCL worker, its verdicts compared on the driver."""

import pytest

from kit.core.events import EpisodeVerdict, UnitProgress
from kit.protocols import speed_cache
from kit.record.manifest import Manifest
from kit.run import runner
from tests.protocols.test_flag_order_run import TINY as FLAG_ORDER
from tests.protocols.test_sentinel_run import TWO_EPISODES as SENTINEL
from tests.ray.same_run import assert_same

# each case runs its plan twice (locally, then on Ray), every pass a BFCL prompt of ~4,400 tokens and every run a
# speed probe: minutes on two cores (far more on a loaded machine), so only with KIT_SLOW=1
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(2400)]

ONE_REQUEST = {"workload": {"ids": ["multi_turn_base_29"], "max_tokens_cap": 4, "max_requests_per_episode": 1}}
# sentinel isolation: a cache-on and a cache-off pass, each on a fresh server (a unit each)
PER_PASS = {**ONE_REQUEST, "passes": ["on", "off"], "server": "per_pass", "sentinel": True}
# two arms of two cache-on passes, each arm's on a server of its own (a unit each) with its own --cache-ram
TWO_ARMS = {**ONE_REQUEST, "arms": [{"name": "default-adjacent", "cache_ram": None, "passes": ["on", "on"]},
                                    {"name": "disabled-adjacent", "cache_ram": 0, "passes": ["on", "on"]}]}


def _run(folder, text, overrides, **options):
    protocol = folder / "tiny.yaml"
    protocol.write_text(text)
    events = []
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=folder / "runs", overrides=overrides,
                                          threads=1, **options), emit=events.append, say=lambda _: None)
    assert result.status == "finished", result.reason
    return result, events


def _on_ray_and_locally(tmp_path_factory, text, overrides):
    local, local_events = _run(tmp_path_factory.mktemp("local"), text, overrides)
    with pytest.MonkeyPatch.context() as env:  # the speed probe runs again (not read from the kit's speed cache)
        env.setenv(speed_cache.FRESH, "1")     # so that where it runs shows: on the driver
        on_ray, ray_events = _run(tmp_path_factory.mktemp("ray"), text, overrides, executor="ray",
                                  cpus_per_task=1.0)
    verdicts = [sorted((e.comparison, e.unit, e.diverged) for e in events if isinstance(e, EpisodeVerdict))
                for events in (local_events, ray_events)]
    assert verdicts[0] == verdicts[1] and verdicts[0]  # every comparison's verdict, reached on the driver
    units = {e.unit for e in ray_events if isinstance(e, UnitProgress) and e.state == "done"}
    return local.run_dir, on_ray.run_dir, units


def _executors(run_dir):
    return {pass_id: info.model_extra["executor"] for pass_id, info in Manifest.load(run_dir).run.passes.items()}


def test_a_tiny_sentinel_grid_on_ray_equals_the_local_run(ray_cluster, tmp_path_factory):
    local, on_ray, units = _on_ray_and_locally(tmp_path_factory, SENTINEL, PER_PASS)
    assert_same(on_ray, local, "grid.json")
    assert units == {"on1", "off1"}  # a fresh server per pass: a unit each
    assert all(where["name"] == "ray" and where["attempt"] == 1 for where in _executors(on_ray).values())
    assert sorted(p.name for p in (on_ray / "logs").glob("server-*.log")) == [
        "server-estimate.log", "server-off1.log", "server-on1.log"]  # the speed probe's, run on the driver
    assert sorted(p.name for p in (on_ray / "logs").glob("bfcl-worker-*.log")) == ["bfcl-worker-off1.log",
                                                                                  "bfcl-worker-on1.log"]


def test_a_tiny_flag_order_plan_on_ray_equals_the_local_run(ray_cluster, tmp_path_factory):
    local, on_ray, units = _on_ray_and_locally(tmp_path_factory, FLAG_ORDER, TWO_ARMS)
    assert_same(on_ray, local, "flag_order.json")
    assert units == {"default-adjacent", "disabled-adjacent"}  # an arm's passes share its server: a unit each
    assert all(where["name"] == "ray" and where["attempt"] == 1 for where in _executors(on_ray).values())
    launch = {pass_id: info.launch for pass_id, info in Manifest.load(on_ray).run.passes.items()}
    for arm in units:  # both passes of an arm ran on one server, in one task
        assert launch[f"{arm}-on1"]["pid"] == launch[f"{arm}-on2"]["pid"]
    argv = {pass_id: found["argv"] for pass_id, found in launch.items()}
    assert "--cache-ram" not in argv["default-adjacent-on1"]
    assert argv["disabled-adjacent-on1"][argv["disabled-adjacent-on1"].index("--cache-ram") + 1] == "0"
