"""How `--executor ray` scales: the same plan of fresh-server passes run by 1, 2, 4 and 8 Ray workers side by
side in one run, through the kit's own executor (kit.run.ray_executor: tasks stream their records to the
driver, the one writer), plus the real embedded engine's two-worker case on this machine.

The fake engine has a fixed latency and no model: each pass starts a tiny loopback HTTP server in its task
(its "engine", stopped when the pass ends) and sends it `--requests` requests, each answered after
`--latency-ms`; every answer becomes one record line written by the driver. The work is latency-bound, so
it scales past this machine's cores: the speed-up of N workers over one should be at least 0.9 x N.

Each count runs as `kit run --executor ray` does: `RayExecutor.prepare()` (before the run folder exists)
starts one warm-up task per slot, so the workers start and import the kit while the driver prepares the
run. The bench has no preparation of its own to overlap, so it waits for the warm-up and reports it apart
("start"): "passes" is the map from its first unit to its last record, the figure that scales; "of ideal"
is the latency-bound ideal (passes per worker x requests x latency) over "passes", which the load of a
shared machine moves less than the speed-up over a one-worker run measured minutes earlier. Also
reported: the driver's CPU per unit (the one writer: records, manifest, events) and the workers' CPU per
unit (the fake engine and its client included), both measured, and the load average (a shared machine).

    PYTHONPATH=. python bench/bench_ray_scaling.py [--passes 16] [--requests 50] [--latency-ms 200]
                                                   [--workers 1,2,4,8] [--real]

`--real`: `kit demo` (two fresh-server sessions, --threads 1) locally and on two Ray workers, timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import ray

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from kit.protocols.procedure import RunContext, Unit  # noqa: E402
from kit.record.manifest import Manifest  # noqa: E402
from kit.run.ray_executor import RayExecutor  # noqa: E402


class FakeEngine:
    """A loopback server answering every POST after a fixed latency (the pass's own, started in its task)."""

    def __init__(self, latency: float):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                self.rfile.read(int(self.headers.get("content-length", 0)))
                time.sleep(latency)
                body = json.dumps({"content": "42", "tokens": [52]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/completion"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEngine:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_pass(ctx: RunContext, unit: Unit) -> None:
    """One pass on its own fake engine: `requests` requests, one record line each (through ctx.records)."""
    requests, latency = unit.payload
    name = f"records/{unit.name}.jsonl"
    ctx.manifest.set_pass(unit.name, status="running", file=name)
    with FakeEngine(latency) as engine, httpx.Client(timeout=30) as client, ctx.records(name) as writer:
        for seq in range(requests):
            ctx.checkpoint()
            answer = client.post(engine.url, json={"prompt": f"{unit.name} {seq}", "n_predict": 1}).json()
            writer.write_line(json.dumps({"pass_id": unit.name, "seq": seq, "answer": answer}).encode() + b"\n")
    ctx.manifest.set_pass(unit.name, status="OK", records=writer.count)


def _cpu_seconds(pids: set[int]) -> dict[int, float]:
    """The CPU seconds (user + system) each live process has used, from /proc (Linux)."""
    found, tick = {}, os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / tick
    return found


def fake_run(workers: int, cores: int, passes: int, requests: int, latency: float) -> dict[str, float]:
    executor = RayExecutor(cpus_per_task=cores / workers)
    started = time.perf_counter()
    executor.prepare()  # as kit run does before its run folder exists: workers started and warmed
    warm = set(ray.get(executor.warming))
    start_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        manifest = Manifest.create(run_dir, protocol={"name": "bench", "kind": "bench"})
        ctx = RunContext(run_dir, manifest, provider=None, emit=lambda _event: None)
        units = [Unit(f"p{index}", (requests, latency)) for index in range(passes)]
        before, driver_cpu = _cpu_seconds(warm), time.process_time()
        started = time.perf_counter()
        executor.map(ctx, fake_pass, units)
        seconds = time.perf_counter() - started
        driver_cpu = time.process_time() - driver_cpu
        written = sum(len((run_dir / "records" / f"p{i}.jsonl").read_bytes().splitlines()) for i in range(passes))
        assert written == passes * requests, written
        infos = Manifest.load(run_dir).run.passes.values()
        assert all(info.status == "OK" for info in infos)
        used = {info.model_extra["executor"]["worker_pid"] for info in infos}
        after = _cpu_seconds(used)
        worker_cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)  # a worker started late: all of it
    return {"start": start_s, "seconds": seconds, "driver_cpu": driver_cpu / passes,
            "worker_cpu": worker_cpu / passes, "workers_used": len(used), "fresh": len(used - warm)}


def real_demo() -> None:
    from kit.run import runner  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        for executor in ("local", "ray"):
            started = time.perf_counter()
            result = runner.run(runner.RunOptions("demo", out=Path(folder) / executor, threads=1, executor=executor,
                                                  cpus_per_task=1.0), say=lambda _text: None)
            print(f"kit demo, {executor:5}: {time.perf_counter() - started:6.1f} s  ({result.status})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=16)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--real", action="store_true", help="also time kit demo locally and on two Ray workers")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    cores = max(counts)  # logical CPUs of the local cluster: N workers ask for cores/N each
    ray.init(num_cpus=cores, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
    ideal = args.passes * args.requests * args.latency_ms / 1000
    print(f"{args.passes} passes x {args.requests} requests x {args.latency_ms:.0f} ms "
          f"(one worker, ideal: {ideal:.0f} s)")
    print("workers  start s  passes s  speed-up  x N   of ideal  driver CPU/unit  worker CPU/unit  load (1 min)")
    base = None
    for workers in counts:
        got = fake_run(workers, cores, args.passes, args.requests, args.latency_ms / 1000)
        base = base or got["seconds"] * counts[0]
        speedup = base / got["seconds"]
        rounds = -(-args.passes // workers)  # passes one worker runs, one after another
        of_ideal = rounds * args.requests * args.latency_ms / 1000 / got["seconds"]
        print(f"{workers:7}  {got['start']:7.1f}  {got['seconds']:8.1f}  {speedup:8.2f}  {speedup / workers:4.2f}  "
              f"{of_ideal:8.2f}  "
              f"{got['driver_cpu']:13.3f} s  {got['worker_cpu']:13.3f} s  {os.getloadavg()[0]:5.2f}", flush=True)
        if got["fresh"]:
            print(f"         ({got['fresh']} of the {got['workers_used']} workers used were not the warmed ones)")
    ray.shutdown()
    if args.real:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
        real_demo()


if __name__ == "__main__":
    main()
