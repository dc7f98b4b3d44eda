"""The ray tier: one local Ray cluster for the whole tier (this machine's two CPUs, fractional CPUs per task)."""

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
    yield ray
    ray.shutdown()
