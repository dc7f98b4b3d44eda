"""Models reach Ray tasks by sha256 without a shared disk (kit.run.model_shipping): a node that has no file
with the run's sha256 (not at the recorded path, not in its own model cache) gets the driver's copy through
Ray's object store, in chunks, shipped once per run, and keeps it in its model cache only with the recorded
sha256; a corrupted shipment is refused. The tier's cluster has two nodes, each with a model cache of its
own (tests/ray/conftest.py): each node receives a model it lacks once per run, however many of its units
ask at once. Elsewhere "another node" is a model cache given through Ray's runtime_env. The recorded path
exists nowhere."""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from kit.core.events import Notice
from kit.launch.native import ServerSpec
from kit.launch.provider import NativeProvider
from kit.models.hashing import sha256_file
from kit.protocols.procedure import RunContext, Unit
from kit.record.manifest import Manifest
from kit.run import model_shipping

pytestmark = pytest.mark.ray


def _model(path: Path, size: int = 3 * 2**20 + 5) -> tuple[bytes, str]:
    """A GGUF-shaped file no registry knows (as a derived sweep format is): its bytes and sha256."""
    data = b"GGUF" + os.urandom(size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data, hashlib.sha256(data).hexdigest()


def report_model(ctx: RunContext, unit: Unit) -> None:
    """The unit records which model file its node gave it, and that file's sha256 as read on the node."""
    model = ctx.provider.spec.model
    with ctx.records(f"records/{unit.name}.jsonl") as writer:
        writer.write_line(f'{{"model":"{model}","sha256":"{sha256_file(model)}"}}\n'.encode())


def test_a_node_without_the_model_gets_the_drivers_copy_verified(ray_cluster, tmp_path, monkeypatch):
    from kit.run.ray_executor import RayExecutor

    driver_cache, node_cache = tmp_path / "driver-cache", tmp_path / "node-cache"
    monkeypatch.setenv("KIT_CACHE_DIR", str(driver_cache))
    monkeypatch.setattr(model_shipping, "CHUNK_BYTES", 2**20)  # several chunks
    data, sha = _model(tmp_path / "seed.gguf")
    recorded = tmp_path / "not-on-this-node" / "model.gguf"  # the run's recorded path: on no node
    _model_at = model_shipping.shipped_path(sha)  # the driver has it in its own model cache, by sha256
    _model_at.parent.mkdir(parents=True)
    _model_at.write_bytes(data)
    provider = NativeProvider(ServerSpec(binary=Path(sys.executable), model=recorded), {"model_sha256": sha}, None)
    manifest = Manifest.create(tmp_path / "run", protocol={"name": "t", "kind": "t"})
    events = []
    ctx = RunContext(tmp_path / "run", manifest, provider=provider, emit=events.append)
    executor = RayExecutor(cpus_per_task=0.5, runtime_env={"env_vars": {"KIT_CACHE_DIR": str(node_cache)}})
    executor.map(ctx, report_model, [Unit(f"u{i}", None) for i in range(3)])

    on_node = node_cache / "models" / "by-sha256" / f"{sha}.gguf"
    assert on_node.read_bytes() == data
    for i in range(3):
        line = (tmp_path / "run" / "records" / f"u{i}.jsonl").read_text()
        assert line == f'{{"model":"{on_node}","sha256":"{sha}"}}\n'
    shipping = [event.text for event in events if isinstance(event, Notice) and "shipping" in event.text]
    assert len(shipping) == 1 and sha[:12] in shipping[0]  # put into the object store once for the run
    assert executor.shipped == {}  # released once the map ends

    events.clear()  # the node keeps it: a second run on this node ships nothing
    executor.map(ctx, report_model, [Unit("u3", None)])
    assert not [event for event in events if isinstance(event, Notice) and "shipping" in event.text]


def test_a_corrupted_shipment_is_refused_and_not_kept(ray_cluster, tmp_path):
    import ray

    data, sha = _model(tmp_path / "seed.gguf", size=2**20)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF  # one flipped byte in transit
    chunks = (ray.put(bytes(bad[:2**19])), ray.put(bytes(bad[2**19:])))
    shipment = model_shipping.Shipment(sha, len(data), ".gguf", chunks)
    node_cache = tmp_path / "node-cache"

    @ray.remote(num_cpus=0.5, runtime_env={"env_vars": {"KIT_CACHE_DIR": str(node_cache)}})
    def on_node(path, shipment):
        try:
            return str(model_shipping.node_model(Path(path), sha, shipment))
        except model_shipping.ConfigError as exc:
            return type(exc).__name__ + ": " + exc.line()

    refused = ray.get(on_node.remote(str(tmp_path / "nowhere.gguf"), shipment))
    assert refused.startswith("ConfigError: ") and f"not the run's {sha[:12]}" in refused and "refused" in refused
    cached = node_cache / "models" / "by-sha256"
    assert not cached.is_dir() or not any(cached.iterdir())  # nothing kept, not even a staging file
    assert ray.get(on_node.remote(str(tmp_path / "nowhere.gguf"), None)).startswith("NeedsModel: ")
    good = model_shipping.Shipment(sha, len(data), ".gguf", (ray.put(data),))
    assert ray.get(on_node.remote(str(tmp_path / "nowhere.gguf"), good)) == str(cached / f"{sha}.gguf")


@pytest.mark.parametrize("sha256", ["../../../etc/x", "A" * 64, "0" * 63, "0" * 64 + "/.."])
def test_a_sha256_that_is_not_64_hex_digits_never_names_a_path(sha256, tmp_path, monkeypatch):
    # a run folder's manifest (perhaps a stranger's) names the model's sha256: it never leads out of the cache
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(model_shipping.ConfigError, match="is not 64 lowercase hex digits"):
        model_shipping.shipped_path(sha256)
    good = "0" * 64
    assert model_shipping.shipped_path(good, "/../../x").name == f"{good}.gguf"  # an odd suffix: .gguf
    assert model_shipping.shipped_path(good, ".gguf").parent.is_relative_to(tmp_path / "cache")


def test_a_users_model_folder_gets_no_side_file(tmp_path, monkeypatch):
    # the recorded model path names a folder the kit did not make (a user's, or a stranger's manifest's choice):
    # the sha256 memo goes into the kit's own model cache, nothing is written beside the model
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    users = tmp_path / "users-models"
    _, sha256 = _model(users / "mine.gguf", size=1000)
    keep = tmp_path / "keep.txt"
    keep.write_text("keep\n")
    (users / "hashes.json").hardlink_to(keep)  # a side file a stranger placed: neither read as ours nor written
    assert model_shipping.local_copy(users / "mine.gguf", sha256) == users / "mine.gguf"
    assert sorted(p.name for p in users.iterdir()) == ["hashes.json", "mine.gguf"] and keep.read_text() == "keep\n"
    assert sha256 in (tmp_path / "cache" / "models" / "hashes.json").read_text()


def report_node_copy(ctx: RunContext, unit: Unit) -> None:
    """The unit records its node's model cache, the file its node gave it (its inode: a file received
    again would be a new one) and that file's sha256 as read there; it lasts long enough that the units of
    a wave run side by side, two on each node."""
    model = ctx.provider.spec.model
    line = {"cache": os.environ["KIT_CACHE_DIR"], "model": str(model), "inode": model.stat().st_ino,
            "sha256": sha256_file(model)}
    with ctx.records(f"records/{unit.name}.jsonl") as writer:
        writer.write_line(json.dumps(line).encode() + b"\n")
    time.sleep(1.0)


def test_two_nodes_each_receive_a_model_they_lack_once(ray_cluster, ray_node_caches, tmp_path, monkeypatch):
    from kit.run.ray_executor import RayExecutor

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "driver-cache"))
    data, sha = _model(tmp_path / "seed.gguf")
    _model_at = model_shipping.shipped_path(sha)  # the driver's copy, in its own model cache
    _model_at.parent.mkdir(parents=True)
    _model_at.write_bytes(data)
    recorded = tmp_path / "on-no-node" / "model.gguf"
    provider = NativeProvider(ServerSpec(binary=Path(sys.executable), model=recorded), {"model_sha256": sha}, None)
    manifest = Manifest.create(tmp_path / "run", protocol={"name": "t", "kind": "t"})
    events = []
    ctx = RunContext(tmp_path / "run", manifest, provider=provider, emit=events.append)
    names = [f"n{i}" for i in range(6)]
    RayExecutor(cpus_per_task=0.5).map(ctx, report_node_copy, [Unit(name, None) for name in names])

    lines = [json.loads((tmp_path / "run" / "records" / f"{name}.jsonl").read_text()) for name in names]
    assert all(line["sha256"] == sha for line in lines)  # verified where it arrived
    assert {line["cache"] for line in lines} == {str(cache) for cache in ray_node_caches.values()}  # both nodes
    for cache in ray_node_caches.values():
        on_node = cache / "models" / "by-sha256" / f"{sha}.gguf"
        assert on_node.read_bytes() == data
        served = [line for line in lines if line["cache"] == str(cache)]
        assert {line["model"] for line in served} == {str(on_node)}
        assert len({line["inode"] for line in served}) == 1  # received once on this node, its other units took it
    shipping = [event.text for event in events if isinstance(event, Notice) and "shipping" in event.text]
    assert len(shipping) == 1  # put into the object store once for the run, whichever nodes asked


def test_tasks_of_one_node_receiving_at_once_write_the_file_once(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "node-cache"))
    data = b"GGUF" + os.urandom(4096)
    shipment = model_shipping.Shipment(hashlib.sha256(data).hexdigest(), len(data), ".gguf", ())
    written = []

    def write(shipment, target):  # as the real one, slowly: the other tasks arrive while it writes
        written.append(threading.get_ident())
        time.sleep(0.3)
        target.write_bytes(data)
        return target

    monkeypatch.setattr(model_shipping, "_write", write)
    got = []
    tasks = [threading.Thread(target=lambda: got.append(model_shipping.receive(shipment))) for _ in range(3)]
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(30)
    assert len(written) == 1 and len(got) == 3 and len(set(got)) == 1 and got[0].read_bytes() == data
