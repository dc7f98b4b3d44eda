"""The ray tier: one local Ray cluster for the whole tier, of two nodes on this machine (ray.cluster_utils:
a raylet each, one CPU and two declared GPUs each; fractional CPUs per task). Each node has a model cache
of its own (KIT_CACHE_DIR in its raylet's environment, which its workers inherit): an empty `models/`,
every other entry of this machine's kit cache (the built engine, BFCL) linked, as on a node where the same
kit and engine were installed and no model was ever fetched."""

import os
from pathlib import Path

import pytest

NODES = ("node-a", "node-b")
CPUS_PER_NODE, GPUS_PER_NODE = 1, 2  # GPUs declared, not present: Ray counts them, nothing uses them


def _node_cache(folder: Path) -> Path:
    real = Path(os.environ.get("KIT_CACHE_DIR") or Path.home() / ".cache" / "kit")
    for entry in real.iterdir() if real.is_dir() else ():
        if entry.name != "models":
            (folder / entry.name).symlink_to(entry)
    (folder / "models").mkdir()
    return folder


@pytest.fixture(scope="session")
def ray_node_caches(tmp_path_factory) -> dict[str, Path]:
    """Each simulated node's kit cache (its KIT_CACHE_DIR), by node name."""
    return {name: _node_cache(tmp_path_factory.mktemp(f"cache-{name}")) for name in NODES}


@pytest.fixture(scope="session")
def ray_cluster(ray_node_caches):
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    for index, name in enumerate(NODES):
        head = {"include_dashboard": False} if index == 0 else {}
        cluster.add_node(num_cpus=CPUS_PER_NODE, num_gpus=GPUS_PER_NODE, object_store_memory=100 * 2**20,
                         env_vars={"KIT_CACHE_DIR": str(ray_node_caches[name])}, **head)
    ray.init(address=cluster.address, log_to_driver=False)
    yield ray
    ray.shutdown()
    cluster.shutdown()
