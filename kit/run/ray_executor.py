"""The Ray executor: each unit of a run (the passes that share one server) is a Ray task that starts its
own engine on the node it lands on, bound to that node's loopback, and stops it when done (docs/ray.md).

One writer: a task never writes the run folder. It is a streaming generator (`num_returns="streaming"`)
that yields, in order, every record line, manifest change and event of its unit, then its server logs; the
driver (this process) alone appends the records through `RecordWriter.write_line`, updates the manifest and
emits the events, so a Ray run's folder is a local run's (timing fields and node names aside). Each pass
records in the manifest (`executor`) the node, CPU, GPUs and engine build that served it.

Models reach a task by sha256: the node's own copy (recorded path, model cache, registry), else the driver's
shipped through the object store (kit.run.model_shipping), verified there; the embedded engine is the node's
own, refused unless its CPU library has the run's sha256.

Faults: a task whose worker or node is lost is submitted again (at most `retries` times); the passes the
lost attempt had begun are superseded (their records moved to records/superseded/, never counted). Ctrl-C
or a stop cancels every task: each stops its unit between requests, which stops its engine.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray import exceptions as ray_errors
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kit.core.atomic_file import write_bytes_atomic
from kit.core.errors import ConfigError, EngineError
from kit.core.events import Notice, UnitProgress
from kit.core.paths import RunPaths
from kit.launch.llamacpp import embedded
from kit.launch import leftover_servers
from kit.launch.provider import NativeProvider
from kit.protocols.procedure import LOCAL, RunContext, Unit, UnitFunction
from kit.record.files import RecordWriter
from kit.record.manifest import Manifest, RunManifest
from kit.run.model_shipping import NeedsModel, Shipment, node_model, ship
from kit.run.ray_placement import Placement, release

RETRIES = 2  # a unit whose worker is lost runs again at most this many times
STOP_GRACE_S = 30.0  # after a stop, how long the tasks get to stop their engines before they are killed
LOST = (ray_errors.WorkerCrashedError, ray_errors.NodeDiedError, ray_errors.ObjectLostError,
        ray_errors.OwnerDiedError, ray_errors.LocalRayletDiedError)  # a lost worker, not the unit's own failure

Message = tuple[Any, ...]


# ---- on the node: one unit, its messages streamed back ----

class _Relay:
    """Where a unit's writes go on the node: a queue the task yields from."""

    def __init__(self) -> None:
        self.out: queue.Queue[Message] = queue.Queue()

    def put(self, *message: Any) -> None:
        self.out.put(message)


class _RelayedManifest(Manifest):
    """The run's manifest as the unit sees it: a copy kept up to date on the node (the unit reads it), every
    change sent to the driver, nothing saved here."""

    def __init__(self, run_dir: Path, run: RunManifest, relay: _Relay):
        super().__init__(run_dir, run)
        self.relay = relay

    def save(self) -> None:
        pass

    def update(self, **fields: Any) -> None:
        super().update(**fields)
        self.relay.put("update", fields)

    def set_pass(self, pass_id: str, **fields: Any) -> None:
        super().set_pass(pass_id, **fields)
        self.relay.put("set_pass", pass_id, fields)


class _RelayedWriter(RecordWriter):
    """A records file written on the driver: each record line is sent there (its seq counted here)."""

    def __init__(self, path: Path, name: str, relay: _Relay, **context: Any):
        self.path, self.name, self.relay, self.context = path, name, relay, context
        self.sync_each, self.count = True, 0

    def write_line(self, line: bytes) -> None:
        self.relay.put("record", self.name, line)
        self.count += 1

    def close(self) -> None:
        pass


@dataclass
class _TaskContext(RunContext):
    relay: _Relay = field(default_factory=_Relay)

    def records(self, name: str, **context: Any) -> RecordWriter:
        return _RelayedWriter(self.run_dir / name, name, self.relay, **context)


def node_provider(provider: NativeProvider, shipment: Shipment | None = None) -> NativeProvider:
    """The run's provider rebuilt on this node: its model found here by sha256 (or shipped by the driver), its
    engine this node's own."""
    spec = replace(provider.spec, model=node_model(provider.spec.model, provider.details.get("model_sha256"),
                                                   shipment))
    if provider.cpu is None:  # the user's binary, at the same path on every node
        if not spec.binary.is_file():
            raise ConfigError(f"node {socket.gethostname()} has no server binary at {spec.binary}",
                              "install the same build at the same path on every node")
        return NativeProvider(spec, provider.details, None, provider.reuse_off)
    found = embedded.locate(provider.cpu.name, say=lambda _text: None)
    if found.backend.library_sha256 != provider.cpu.library_sha256:
        raise ConfigError(f"node {socket.gethostname()}'s {provider.cpu.name} CPU backend has library sha256 "
                          f"{found.backend.library_sha256[:12]}…, the run's {provider.cpu.library_sha256[:12]}…: "
                          "one run never mixes backends", "install the same kit and engine on every node")
    return NativeProvider(replace(spec, binary=found.binary, env=found.env), provider.details, found.backend,
                          provider.reuse_off)


def node_info(provider: Any) -> dict[str, Any]:
    """What the manifest records of the node that served a pass."""
    context = ray.get_runtime_context()
    return {"name": "ray", "node": socket.gethostname(), "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(), "worker_pid": os.getpid(), "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "gpus": [str(gpu) for gpu in ray.get_gpu_ids()],
            "placement_group": context.get_placement_group_id(),  # an engine spanning GPUs (kit.run.ray_placement)
            "engine_binary": provider.spec.binary.name if isinstance(provider, NativeProvider) else None,
            "cpu_backend_sha256": provider.cpu.library_sha256 if getattr(provider, "cpu", None) else None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_unit_here(run: dict[str, Any], done: set[str], provider: Any, run_unit: UnitFunction,
                  unit: Unit, shipment: Shipment | None = None) -> Iterator[Message]:
    """Run one unit on this node, yielding its messages as they happen (the body of the Ray task). A node
    without the unit's model file asks the driver for it ("need_model") and ends; the driver runs the unit
    again with the file shipped (kit.run.model_shipping)."""
    scratch = Path(tempfile.mkdtemp(prefix="kit-ray-unit-"))
    relay, stop = _Relay(), threading.Event()
    thread = None
    try:
        given = unit.provider or provider
        try:
            here = node_provider(given, shipment) if isinstance(given, NativeProvider) else given  # else: not bound
        except NeedsModel as need:
            yield ("need_model", need.sha256, str(need.path), socket.gethostname())
            return
        yield ("node", node_info(here), str(scratch))
        manifest = _RelayedManifest(scratch, RunManifest.model_validate(run), relay)
        ctx = _TaskContext(scratch, manifest, here, lambda event: relay.put("event", event), done=set(done),
                           stop=stop, executor=LOCAL, relay=relay)

        def body() -> None:
            try:
                run_unit(ctx, unit)
                relay.put("done")
            except BaseException as exc:  # noqa: BLE001 - sent to the driver, which raises it as a local run would
                relay.put("error", exc)

        thread = threading.Thread(target=body, name=f"kit-unit-{unit.name}", daemon=True)
        thread.start()
        while True:
            try:  # never blocked for long: a cancel (an interrupt of this thread) is seen while the unit is quiet
                message = relay.out.get(timeout=0.2)
            except queue.Empty:
                continue
            if message[0] in ("done", "error"):
                yield from _logs(scratch)
                stray = sorted(str(path.relative_to(scratch)) for path in scratch.rglob("*.jsonl"))
                if message[0] == "done" and stray:  # a procedure that bypassed ctx.records: its records would be lost
                    message = ("error", EngineError(f"unit {unit.name} wrote {', '.join(stray)} on its node instead "
                                                    "of through ctx.records", "report this as a bug of the kit"))
                yield message
                return
            yield message
    except BaseException:  # cancelled (Ctrl-C on the driver): the unit stops between requests, its engine with it
        stop.set()
        if thread is not None:
            thread.join(STOP_GRACE_S)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _logs(scratch: Path) -> Iterator[Message]:
    logs = RunPaths(scratch).logs
    for path in sorted(logs.glob("*")) if logs.is_dir() else ():
        if path.is_file():
            yield ("log", path.name, path.read_bytes())


def stop_left_engines(scratch: str) -> int:
    """On the node of a lost worker: stop the engines its unit had started (the kit's notes beside their logs,
    kit.launch.leftover_servers) and remove its scratch folder; how many were stopped."""
    logs = RunPaths(Path(scratch)).logs
    stopped = leftover_servers.stop_leftovers(logs, lambda _text: None) if logs.is_dir() else []
    shutil.rmtree(scratch, ignore_errors=True)
    return len(stopped)


WARM_HOLD_S = 60.0  # the longest a warm-up task keeps its worker from the others (RayExecutor.prepare)
WARM_END_S = 5.0  # the longest the units wait for the released warm-up tasks to end (a running one ends at once)


class _Gate:
    """Where the warm-up tasks wait for each other (an async actor): each keeps its worker until all have one,
    so that Ray starts one worker per slot instead of reusing the first idle one."""

    def __init__(self, count: int):
        import asyncio  # noqa: PLC0415 - in the actor only

        self.left, self.all_in = count, asyncio.Event()

    async def arrive(self) -> None:
        import asyncio  # noqa: PLC0415

        self.left -= 1
        if self.left <= 0:
            self.all_in.set()
        try:
            await asyncio.wait_for(self.all_in.wait(), WARM_HOLD_S)
        except asyncio.TimeoutError:  # a slot the cluster never gave: the warm workers go on without it
            pass


def worker_ready(gate: Any) -> int:
    """A warm-up task: by the time it runs, its worker has started and imported this module (what a unit's
    task needs); it keeps the worker until the other warm-up tasks have theirs (or the map begins); its pid."""
    try:
        ray.get(gate.arrive.remote())
    except ray_errors.RayError:  # the gate was released: the units begin
        pass
    return os.getpid()


_unit_task = ray.remote(num_returns="streaming", max_retries=0)(run_unit_here)
_cleanup_task = ray.remote(num_cpus=0, max_retries=0)(stop_left_engines)
_ready_task = ray.remote(max_retries=0)(worker_ready)
_gate_actor = ray.remote(num_cpus=0, max_restarts=0)(_Gate)


# ---- on the driver: the one writer ----

@dataclass
class _Attempt:
    unit: Unit
    number: int
    stream: Any
    node: dict[str, Any] = field(default_factory=dict)
    scratch: str | None = None  # its folder on the node (server logs and their notes)
    shipment: Shipment | None = None  # the model the driver shipped to its node, if it had to
    group: Any = None  # its placement group (an engine spanning GPUs, kit.run.ray_placement), removed at its end
    passes: list[str] = field(default_factory=list)
    writers: dict[str, RecordWriter] = field(default_factory=dict)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
        release(self.group)
        self.group = None


class RayExecutor:
    """Units as Ray tasks (`cpus_per_task`, `gpus_per_task` each; kit.run.ray_placement) on the cluster at
    `address` (None: the one this process started or joined already, else a new local one)."""

    name = "ray"

    def __init__(self, address: str | None = None, cpus_per_task: float = 1.0, gpus_per_task: float = 0.0,
                 retries: int = RETRIES, runtime_env: dict[str, Any] | None = None):
        self.address, self.retries = address, retries
        self.placement = Placement(cpus_per_task, gpus_per_task, runtime_env)  # runtime_env: e.g. env_vars
        self.warming: list[Any] = []  # warm-up tasks started by prepare() (their results: worker pids)
        self.gate: Any = None  # where they wait for each other (an actor), released when the map begins
        self.shipped: dict[str, Shipment] = {}  # the models shipped to nodes during the map, by sha256
        self.done, self.total, self.started = 0, 0, 0.0  # the units of the map in progress (UnitProgress)

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        try:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineError(f"cannot reach the Ray cluster at {self.address or 'a new local one'}: {exc}",
                              "start it (`ray start --head`) or pass --ray-address auto|ray://HOST:PORT") from exc

    def prepare(self, warm: bool = True) -> None:
        """Before the run folder exists: the cluster reached and its nodes checked (a task no node can hold is
        refused in one line), then, with `warm`, one warm-up task per slot the cluster has: each starts a worker
        process and imports the unit's side of the kit while the driver prepares the run, so the units start
        on ready workers (Ray reuses a job's idle workers for its later tasks)."""
        self._connect()
        self.placement.check()
        if warm and not self.warming:
            slots = self.placement.slots_by_node()  # each node's own: warm-ups free to land anywhere would
            self.gate = _gate_actor.remote(sum(slots.values()))  # crowd one node (a blocked task lends its CPU)
            options = {**self.placement.options(), "name": "kit-worker-warm-up"}
            self.warming = [_ready_task.options(**options, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node, soft=True)).remote(self.gate) for node, count in slots.items() for _ in range(count)]

    def _release_warm_up(self) -> None:
        """The warm-up tasks end now, and the units wait until they have: a warm-up task blocked on the gate
        has lent its CPU back, so a unit submitted before its worker is idle again would start a new worker."""
        if self.gate is not None:
            ray.kill(self.gate)
            self.gate = None
            _, never = ray.wait(self.warming, num_returns=len(self.warming), timeout=WARM_END_S)
            for task in never:  # one no node had a slot for (a node lost since prepare): not worth waiting on
                ray.cancel(task)

    def _submit(self, ctx: RunContext, run_unit: UnitFunction, unit: Unit, number: int,
                shipment: Shipment | None = None) -> _Attempt:
        group = self.placement.reserve(f"kit-unit-{unit.name}-{number}-{os.getpid()}")
        task = _unit_task.options(**self.placement.options(group), name=f"kit-unit-{unit.name}")
        stream = task.remote(ctx.manifest.run.to_json(), set(ctx.done), ctx.provider, run_unit, unit, shipment)
        return _Attempt(unit, number, stream, shipment=shipment, group=group)

    def _ship(self, ctx: RunContext, run_unit: UnitFunction, attempt: _Attempt, message: Message) -> _Attempt:
        """A node has no copy of the unit's model: the unit again, with the driver's copy shipped (put into the
        object store once per run, whichever nodes ask)."""
        _, sha256, path, node = message
        if attempt.shipment is not None:  # shipped, and still not taken: never loop
            raise EngineError(f"unit {attempt.unit.name}: its node did not take the shipped model {sha256[:12]}…",
                              "report this as a bug of the kit")
        if sha256 not in self.shipped:
            ctx.emit(Notice(f"unit {attempt.unit.name}: node {node} has no model file with sha256 {sha256[:12]}…; "
                            "shipping this machine's copy through Ray's object store"))
            self.shipped[sha256] = ship(Path(path), sha256)
        return self._submit(ctx, run_unit, attempt.unit, attempt.number, self.shipped[sha256])

    def map(self, ctx: RunContext, run_unit: UnitFunction, units: Sequence[Unit]) -> None:
        if not units:  # nothing left to run (e.g. a resume): the warm-up ends at once
            self._release_warm_up()
            return
        self.prepare(warm=False)
        self._release_warm_up()
        self.done, self.total, self.started = 0, len(units), time.monotonic()
        running = {}
        for unit in units:
            attempt = self._submit(ctx, run_unit, unit, 1)
            running[attempt.stream] = attempt
        failed: Exception | None = None
        try:
            while running:
                ctx.checkpoint()
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
                for stream in ready:
                    attempt = running.pop(stream)
                    try:
                        again = self._advance(ctx, attempt, run_unit)
                    except Exception as exc:  # noqa: BLE001 - the unit's own failure: the others finish first
                        attempt.close()
                        failed = failed or exc
                        continue
                    if again is not None:
                        running[again.stream] = again
        except BaseException:
            self._cancel(ctx, running)
            raise
        finally:
            self.shipped.clear()  # the shipped chunks leave the object store with their last reference
            self.warming = []
        if failed is not None:  # raised once no other unit runs: only the failed unit's passes are left running
            raise failed

    def _advance(self, ctx: RunContext, attempt: _Attempt, run_unit: UnitFunction) -> _Attempt | None:
        """Handle the attempt's next message: the attempt to wait on next (itself, or a new one after a
        lost worker), or None once its unit has ended."""
        try:
            message = ray.get(next(attempt.stream))
        except StopIteration:
            attempt.close()
            self.done += 1
            ctx.emit(self._progress(attempt, "done"))
            return None
        except LOST as exc:
            attempt.close()
            if attempt.number > self.retries:
                raise EngineError(f"unit {attempt.unit.name} lost its Ray worker {attempt.number} times "
                                  f"({type(exc).__name__})", "check the cluster's nodes, then `kit resume`") from exc
            for pass_id in attempt.passes:  # the lost attempt's records: kept aside, never counted
                ctx.manifest.supersede(pass_id)
            self._stop_left_engines(ctx, attempt)
            ctx.emit(Notice(f"unit {attempt.unit.name}: its worker was lost ({type(exc).__name__}); running it "
                            f"again (attempt {attempt.number + 1})"))
            return self._submit(ctx, run_unit, attempt.unit, attempt.number + 1)
        except ray_errors.RayTaskError as exc:  # the task itself failed outside the unit (e.g. no model here)
            attempt.close()
            cause = exc.cause if isinstance(exc.cause, BaseException) else None
            raise (cause or EngineError(f"unit {attempt.unit.name} failed on Ray: {exc}")) from None
        if message[0] == "need_model":
            attempt.close()
            return self._ship(ctx, run_unit, attempt, message)
        self._handle(ctx, attempt, message)
        if message[0] == "error":
            attempt.close()
            raise message[1]
        return attempt

    def _handle(self, ctx: RunContext, attempt: _Attempt, message: Message) -> None:
        what = message[0]
        if what == "record":
            _, name, line = message
            if name not in attempt.writers:
                attempt.writers[name] = RecordWriter(ctx.run_dir / name)
            attempt.writers[name].write_line(line)
        elif what == "set_pass":
            _, pass_id, fields = message
            if pass_id not in attempt.passes:
                attempt.passes.append(pass_id)
                fields = {**fields, "executor": {**attempt.node, "attempt": attempt.number}}
            ctx.manifest.set_pass(pass_id, **fields)
        elif what == "update":
            ctx.manifest.update(**message[1])
        elif what == "event":
            ctx.emit(message[1])
        elif what == "node":
            attempt.node, attempt.scratch = message[1], message[2]
            ctx.emit(self._progress(attempt, "running"))
        elif what == "log":
            _, name, data = message
            logs = RunPaths(ctx.run_dir).logs
            write_bytes_atomic(logs / name, data)

    def _progress(self, attempt: _Attempt, state: str) -> UnitProgress:
        """Which node runs (or ran) the attempt's unit, and how far the map's units are."""
        return UnitProgress(attempt.unit.name, str(attempt.node.get("node", "?")), str(attempt.node.get("node_ip", "")),
                            state, attempt.number, self.done, self.total, time.monotonic() - self.started)

    def _stop_left_engines(self, ctx: RunContext, attempt: _Attempt) -> None:
        """The engine a lost worker started outlives it: stopped by a task on its node, where that node is up."""
        if attempt.scratch is None or not attempt.node.get("node_id"):
            return
        where = NodeAffinitySchedulingStrategy(attempt.node["node_id"], soft=False)
        try:
            ray.get(_cleanup_task.options(scheduling_strategy=where).remote(attempt.scratch), timeout=STOP_GRACE_S)
        except (ray_errors.RayError, ray_errors.GetTimeoutError) as exc:
            ctx.emit(Notice(f"unit {attempt.unit.name}: the engine its lost worker started on node "
                            f"{attempt.node.get('node')} could not be stopped ({type(exc).__name__})"))

    def _cancel(self, ctx: RunContext, running: dict[Any, _Attempt]) -> None:
        """Cancel every task; each stops its unit (and engine) between requests. Their last records are still
        written; a task that has not ended after STOP_GRACE_S is killed."""
        for stream in running:
            ray.cancel(stream)
        try:
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=STOP_GRACE_S)
                if not ready:
                    break
                for stream in ready:
                    attempt = running.pop(stream)
                    try:
                        message = ray.get(next(attempt.stream))
                    except (StopIteration, ray_errors.RayError):
                        attempt.close()
                        continue
                    if message[0] not in ("error", "done"):
                        self._handle(ctx, attempt, message)
                    running[stream] = attempt
        finally:
            for stream, attempt in running.items():
                ray.cancel(stream, force=True)
                attempt.close()
