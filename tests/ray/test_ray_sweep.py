"""A tiny sweep plan (2 formats x 2 histories, one short BFCL episode) through Ray equals the same plan run
locally, record for record, episode for episode: every pass a Ray task with its own fresh server serving its
format's file (found on the node by sha256) and its own BFCL worker."""

import pytest

from kit.record.manifest import Manifest
from kit.run import runner
from tests.protocols.test_sweep_run import TINY as SWEEP
from tests.ray.same_run import assert_same

# 12 BFCL passes of ~4,400-token prompts (6 local, 6 on Ray): minutes on two cores, so only with KIT_SLOW=1
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(1800)]  # 574 s quiet; 1,025 s at load 4-6

# the engine tier's tiny sweep (tests/protocols/test_sweep_run.py), with two histories and one reference order
TINY = SWEEP + "histories: 2\nreference_orders: [0]\n"


def _sweep(tmp_path, **options):
    protocol = tmp_path / "tiny-sweep.yaml"
    protocol.write_text(TINY)
    return runner.run(runner.RunOptions(protocol=str(protocol), out=tmp_path / "runs", threads=1, **options),
                      say=lambda _: None)


def test_a_tiny_sweep_on_ray_equals_the_local_run(ray_cluster, tmp_path_factory):
    local = _sweep(tmp_path_factory.mktemp("local"))
    on_ray = _sweep(tmp_path_factory.mktemp("ray"), executor="ray", cpus_per_task=1.0)
    assert (local.status, on_ray.status) == ("finished", "finished"), (local.reason, on_ray.reason)
    assert_same(on_ray.run_dir, local.run_dir, "sweep.json")
    passes = Manifest.load(on_ray.run_dir).run.passes
    assert sorted(passes) == sorted(["Q4_1-ref-o0", "Q4_1-h0-on", "Q4_1-h1-on", "F16-ref-o0", "F16-h0-on",
                                     "F16-h1-on"])
    served = {info.format: info.launch["argv"][info.launch["argv"].index("-m") + 1] for info in passes.values()}
    assert served["Q4_1"] != served["F16"]  # each pass's server serves its own format's file
    assert all(info.model_extra["executor"]["attempt"] == 1 for info in passes.values())
