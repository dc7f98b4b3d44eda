"""The grid: BFCL multi-turn episodes served with prefix caching on and off, each arm twice.

Passes run in the protocol's order (`server`): all on one server (`shared`, the paper's llama.cpp
grid: on, off, on, off), each arm's passes on a server of their own (`per_arm`: vLLM fixes prefix
caching per server process; the paper's vLLM grid ran on, on, off, off that way), or each pass on a
fresh server (`per_pass`). Every request becomes a record; every episode gets an episode record with
BFCL's verdict. As soon as an episode exists in both passes of a comparison, its verdict is emitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field

from kit.protocols.grid import results as grid_results
from kit.record.divergence import episode_divergence
from kit.core.errors import ConfigError
from kit.core.events import (
    EpisodeVerdict,
    KindEvent,
    Notice,
    PlanEstimate,
    SessionStarted,
)
from kit.launch.provider import for_arm
from kit.core.paths import RunPaths
from kit.protocols import bounds as b
from kit.protocols.estimate import Speed, probe
from kit.protocols.grid.bfcl_pass import GridGates, run_pass
from kit.protocols.kind import Analysis, CpuEstimate, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs, Unit
from kit.protocols.spec import ProtocolBase, Strict
from kit.protocols.grid.results import GridResults
from kit.record.model import BfclRecord
from kit.workloads.bfcl import (
    RENDERERS,
    BfclWorker,
    ensure_bfcl,
)
from kit.workloads.bfcl.agent import opening_messages
from kit.engines.registry import VLLM


@dataclass(frozen=True)
class PassPlan:
    pass_id: str
    arm: str
    repeat: int  # 1 for the first pass of its arm under its order, 2 for the second
    order: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest records of the pass once its server is up, besides what every pass records."""
        return {}

PromptFormat = Literal["auto", "chatml", "qwen25", "llama31"]  # a protocol's workload.prompt_format
FAMILY_RENDERERS: dict[str, PromptFormat] = {"chatml": "chatml", "qwen": "qwen25", "llama3": "llama31"}  # registry family -> prompt_format


def _arm(value: Any) -> Any:
    """YAML 1.1 reads a bare `on`/`off` as true/false: take those as the arm names they were meant as."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


Arm = Annotated[Literal["on", "off"], BeforeValidator(_arm)]


class BfclWorkload(Strict):
    episodes: int = b.count(1, b.EPISODES_MAX, 80)
    # explicit episode ids instead of the first N in ascending order (at least one, each once)
    ids: Annotated[tuple[str, ...], b.UNIQUE, Field(min_length=1, max_length=b.EPISODES_MAX)] | None = None
    # (with ids, `episodes` below their number keeps the first ones: `--episodes 1` sizes such a file down)
    prompt_format: PromptFormat = "auto"
    max_tokens_cap: b.MaxTokens = 4096
    # a smoke-test cap; the paper has none
    max_requests_per_episode: int | None = b.count(1, b.REQUESTS_PER_EPISODE_MAX, None)
    # a sizing knob for slow engines: the system prompt lists only the first N of the episode's function docs
    # (BFCL's order; every function can still be called and runs as BFCL runs it); the paper lists them all
    function_docs_max: int | None = b.count(1, b.FUNCTION_DOCS_MAX, None)

    def system_prompt(self, worker: Any, episode_id: str) -> str:
        """The episode's system prompt as this workload sends it (all function docs, or the first N)."""
        if self.function_docs_max is None:
            return str(worker.system_prompt(episode_id))
        return str(worker.system_prompt(episode_id, functions=self.function_docs_max))

    def chosen_ids(self) -> list[str] | None:
        return list(self.ids[:self.episodes]) if self.ids else None

    @property
    def count(self) -> int:
        chosen = self.chosen_ids()
        return len(chosen) if chosen is not None else self.episodes


class BfclPassesProtocol(ProtocolBase):
    """What every protocol of BFCL passes shares (grid, sweep, flag × order): the workload, how episode
    orders are drawn, sentinel isolation, log-probability depth and the cache-state gates."""

    workload: BfclWorkload = BfclWorkload()
    order_seed: b.Seed = 20261007
    sentinel: bool = Field(False, strict=True)  # overwrite the cache with a fixed sentinel prompt before every episode
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 1)
    gates: GridGates = GridGates()


class GridProtocol(BfclPassesProtocol):
    """Cache on/off × repeated passes over the BFCL multi-turn base episodes, under one or more
    episode orders (0 = canonical ascending id; k = random order k drawn with (order_seed, k))."""

    protocol: Literal["grid"]
    passes: tuple[Arm, ...] = ("on", "off", "on", "off")
    orders: Annotated[tuple[b.OrderIndex, ...], b.UNIQUE] = Field((0,), min_length=1, max_length=b.ORDERS_MAX)
    # shared: one server for every pass; per_arm: one server per cache arm, serving all of that arm's passes
    # (both cache-on passes from one process); per_pass: a fresh server for every pass
    server: Literal["shared", "per_arm", "per_pass"] = "shared"


def pass_plan(protocol: GridProtocol) -> list[PassPlan]:
    """Every pass in run order: for each order, the protocol's arms (on1, off1, on2, off2 for the
    paper's order; with several orders the ids carry the order: on1-o0, off1-o0, ...)."""
    plans = []
    for order in protocol.orders:
        seen: dict[str, int] = {}
        for arm in protocol.passes:
            seen[arm] = seen.get(arm, 0) + 1
            suffix = f"-o{order}" if len(protocol.orders) > 1 else ""
            plans.append(PassPlan(f"{arm}{seen[arm]}{suffix}", arm, seen[arm], order))
    return plans


def episode_order(episodes: list, order: int, seed: int) -> list:
    """Order 0 keeps the canonical order; order k is a permutation drawn with numpy's generator seeded
    by (seed, k), the same for every format and protocol that uses it."""
    if order == 0:
        return list(episodes)
    return [episodes[i] for i in np.random.default_rng([seed, order]).permutation(len(episodes))]


def prepare_bfcl(protocol: BfclPassesProtocol, plan: dict[str, Any], inputs: RunInputs) -> Prepared:
    """BFCL installed (its progress told to `inputs.say`) and described, and the plan every BFCL protocol
    shows (`plan` adds its own keys)."""
    install = ensure_bfcl(say=inputs.say)
    workload = protocol.workload
    count = workload.count
    plan = {"episodes": count, **plan, "sentinel": protocol.sentinel, "top_logprobs": protocol.top_logprobs,
            "max_tokens_cap": workload.max_tokens_cap, "max_requests_per_episode": workload.max_requests_per_episode,
            **({"function_docs_max": workload.function_docs_max} if workload.function_docs_max else {})}
    description = {"source": "bfcl multi_turn_base", "episodes": count, "ids": workload.chosen_ids() or [],
                   **({"function_docs_max": workload.function_docs_max} if workload.function_docs_max else {}),
                   **install.to_manifest()}
    return Prepared(plan=plan, workload=description, payload=install,
                    seeds={"request_seed": protocol.seed, "order_seed": protocol.order_seed})


def prepare(protocol: GridProtocol, inputs: RunInputs) -> Prepared:
    passes = pass_plan(protocol)
    return prepare_bfcl(protocol, {"passes": [p.pass_id for p in passes], "orders": list(protocol.orders),
                                   "server": protocol.server,
                                   "comparisons": list(grid_results.comparisons([p.as_json() for p in passes]))},
                        inputs)


def results(run_dir: Path) -> dict[str, Any]:
    return grid_results.write(run_dir)


def renderer_for(protocol: BfclPassesProtocol, engine_details: dict[str, Any]):
    name = protocol.workload.prompt_format
    if name == "auto":
        family = engine_details.get("model_family")
        if family not in FAMILY_RENDERERS:
            raise ConfigError("cannot tell which prompt format this model uses",
                              "set workload.prompt_format to chatml, qwen25 or llama31 in the protocol")
        name = FAMILY_RENDERERS[family]
    return name, RENDERERS[name]


class LiveComparer:
    """Keeps each finished episode's (prompt hash, tokens) per pass and emits a verdict per comparison
    (`pairs`: comparison name -> (pass a, pass b))."""

    def __init__(self, pairs: dict[str, tuple[str, str]], ctx: RunContext):
        self.pairs = pairs
        self.ctx = ctx
        self.done: dict[str, dict[str, list]] = {}

    def episode_finished(self, pass_id: str, unit: str, requests: list) -> None:
        self.done.setdefault(pass_id, {})[unit] = requests
        for name, (first, second) in self.pairs.items():
            if pass_id in (first, second) and unit in self.done.get(first, {}) and unit in self.done.get(second, {}):
                verdict = episode_divergence(self.done[first][unit], self.done[second][unit])
                self.ctx.emit(EpisodeVerdict(name, (first, second), unit, verdict.diverged, verdict.kind,
                                             verdict.request_index, verdict.token_index))


def estimate(workload: BfclWorkload, arms: list[str], speed: Speed, episodes: int,
             fresh_server_per_pass: bool) -> PlanEstimate:
    """A rough duration of passes of `arms` at the measured speed: per episode ~2 requests per turn of
    ~3 turns, full prompts recomputed on the cache-off arm, plus a server start per pass that has its own."""
    out = min(workload.max_tokens_cap, 128)
    per_request = {"off": speed.request_seconds(speed.prompt_tokens, out), "on": speed.request_seconds(200, out)}
    requests = min(6, workload.max_requests_per_episode or 6)
    startup = speed.startup_seconds if fresh_server_per_pass else 0.0
    seconds = sum(per_request[arm] * requests * episodes + startup for arm in arms)
    return PlanEstimate(round(seconds, 1), round(speed.prefill_tokens_per_s, 1), round(speed.decode_tokens_per_s, 1),
                        f"{len(arms)} passes; {requests} requests per episode of ~{speed.prompt_tokens} prompt tokens, "
                        f"~{out} new tokens each" + (f"; {startup:.0f} s server start per pass" if startup else ""))


def served(todo: list, key: Callable[[Any], str], start: Callable[[Any, str], Any],
           ctx: RunContext, keys: list[str] | None = None) -> Generator[tuple[Any, Any], None, None]:
    """(pass, live session) for the passes `todo` in order. Passes with the same `key` share one server:
    `start(pass, key)` opens its session (a context manager) at the first of them, and it is closed after
    the last, so passes of different keys that alternate keep their servers up at once. `keys`: every
    server of the run in order, where `todo` is a part of its passes (how SessionStarted numbers them)."""
    keys = keys or list(dict.fromkeys(key(p) for p in todo))
    last = {key(p): p.pass_id for p in todo}
    servers: dict[str, tuple[ExitStack, Any, str]] = {}
    try:
        for plan in todo:
            label = key(plan)
            if label not in servers:
                stack = ExitStack()
                # which server a pass ran on, unique within the run (a resumed run starts new ones)
                servers[label] = (stack, stack.enter_context(start(plan, label)), f"{label}/{uuid.uuid4().hex[:8]}")
                ctx.emit(SessionStarted(label, keys.index(label) + 1, len(keys), servers[label][1].launch))
            ctx.manifest.set_pass(plan.pass_id, server_session=servers[label][2])
            yield plan, servers[label][1]
            if last[label] == plan.pass_id:
                servers.pop(label)[0].close()
    finally:
        for stack, *_ in servers.values():
            stack.close()


def rerun_whole(plans: list, key: Callable[[Any], str], ctx: RunContext, what: str) -> None:
    """Passes that must share one server history (the same `key`) run again together: where some of a
    key's passes finished before the run stopped and some did not, the finished ones are superseded
    (kept aside in records/superseded/) and run again with the rest on a new server."""
    for label in dict.fromkeys(key(p) for p in plans):
        own = [p.pass_id for p in plans if key(p) == label]
        finished = [pass_id for pass_id in own if pass_id in ctx.done]
        if finished and len(finished) < len(own):
            ctx.emit(Notice(f"{what} {label} stopped after {', '.join(finished)}: its passes share one server, "
                            "so it runs again whole (earlier records kept in records/superseded/)"))
            for pass_id in finished:
                ctx.manifest.supersede(pass_id)
                ctx.done.discard(pass_id)


SERVER_KEY: dict[str, Callable[[PassPlan], str]] = {  # grid `server` setting -> which passes share a server
    "shared": lambda plan: "grid", "per_arm": lambda plan: f"arm-{plan.arm}", "per_pass": lambda plan: plan.pass_id}


def grid_server(protocol: GridProtocol, provider: Any, plan: PassPlan) -> Any:
    """The provider of a grid pass's server: the run's for one server of both arms (`shared`: refused where the
    arm is a server's setting), else its arm's."""
    return provider if protocol.server == "shared" else for_arm(provider, plan.arm)


def together(todo: list, key: Callable[[Any], str]) -> list[list]:
    """The passes `todo` (in run order) cut into units: a cut falls only where no server is up, so every
    server's passes, and the passes of servers up at once (keys that alternate), stay in one unit."""
    last = {key(plan): index for index, plan in enumerate(todo)}
    units: list[list] = []
    reach = -1  # the last pass of the servers the current unit has started
    for index, plan in enumerate(todo):
        if index > reach:
            units.append([])
        units[-1].append(plan)
        reach = max(reach, last[key(plan)])
    return units


@dataclass(frozen=True)
class EpisodeFinished(KindEvent):
    """An episode a pass finished, on its way to the run's LiveComparer (from a unit run elsewhere, too)."""

    pass_id: str
    unit: str
    requests: list


def compared(comparer: LiveComparer, emit: Callable[[Any], None]) -> Callable[[Any], None]:
    """`emit` with each EpisodeFinished handed to `comparer` instead (it emits the verdicts)."""
    def route(event: Any) -> None:
        if isinstance(event, EpisodeFinished):
            comparer.episode_finished(event.pass_id, event.unit, event.requests)
        else:
            emit(event)
    return route


@contextmanager
def bfcl_passes(protocol: BfclPassesProtocol, prepared: Prepared, ctx: RunContext, arms: list[str],
                fresh_server_per_pass: bool, estimate_provider: Any = None) -> Iterator[tuple[Any, list, Any]]:
    """What every run of BFCL passes starts with: the prompt format, the BFCL worker (described in the
    workload), the canonical episodes, and the estimated duration of the passes still to run (`arms`),
    measured on a server of its own started by `estimate_provider` (default: the run's), so the probe
    leaves nothing in any pass's cache. Yields (worker, canonical episodes, renderer)."""
    format_name, render = renderer_for(protocol, ctx.provider.describe())
    ctx.manifest.update(prompt_format=format_name)
    workload = protocol.workload
    with BfclWorker(prepared.payload, log_path=RunPaths(ctx.run_dir).logs / "bfcl-worker.log") as worker:
        # what the BFCL worker is (versions, environment, confinement in force) goes into the workload
        ctx.manifest.update(workload={**ctx.manifest.run.workload.to_json(), "worker": worker.hello()})
        canonical = (worker.load_episodes(ids=workload.chosen_ids()) if workload.ids
                     else worker.load_episodes(count=workload.episodes))
        if arms and ctx.manifest.run.estimate is None:
            first = render(opening_messages(workload.system_prompt(worker, canonical[0].id), canonical[0].turns[0]))
            # uncached, so on a server of the cache-off arm where each arm has its own
            speed = probe(for_arm(estimate_provider or ctx.provider, "off"), RunPaths(ctx.run_dir).logs, protocol.seed,
                          first)
            guess = estimate(workload, arms, speed, len(canonical), fresh_server_per_pass)
            ctx.manifest.update(estimate=asdict(guess))
            ctx.emit(guess)
        yield worker, canonical, render


@dataclass(kw_only=True)
class BfclUnit:
    """What every unit of BFCL passes carries (an executor's unit, kit.protocols.procedure.Unit): the protocol, the
    canonical episodes, the prompt renderer and BFCL's install. `worker` is the run's BFCL worker where the unit
    runs in the run's process; shipped elsewhere it is left behind, and the unit starts a worker of its own."""

    protocol: Any
    canonical: list
    render: Any
    install: Any
    worker: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "worker": None}  # a process handle stays where it was started

    def bfcl_worker(self, stack: ExitStack, ctx: RunContext, unit: str) -> Any:
        """The run's BFCL worker, else one of the unit's own (`logs/bfcl-worker-<unit>.log`) closed with `stack`."""
        return self.worker or stack.enter_context(
            BfclWorker(self.install, log_path=RunPaths(ctx.run_dir).logs / f"bfcl-worker-{unit}.log"))


@dataclass(kw_only=True)
class PassesUnit(BfclUnit):
    """Passes in run order, each with the label of the server it shares (`passes`); `servers`, every server label of
    the run's passes still to run; `server(protocol, provider, pass)`, the provider of a pass's server (module-level)."""

    passes: list[tuple[PassPlan, str]]
    servers: list[str]
    server: Callable[[Any, Any, Any], Any]  # (protocol, provider, pass): a PassPlan, or a kind's own subclass


def run_passes(ctx: RunContext, unit: Unit) -> None:
    """A unit's passes in order, on servers started for them (`served`): each pass's episodes in its order."""
    job: PassesUnit = unit.payload
    logs, label = RunPaths(ctx.run_dir).logs, {plan.pass_id: name for plan, name in job.passes}
    with ExitStack() as stack:
        worker = job.bfcl_worker(stack, ctx, unit.name)
        sessions = served([plan for plan, _ in job.passes], lambda plan: label[plan.pass_id],
                          lambda plan, name: job.server(job.protocol, ctx.provider, plan).session(name, logs), ctx,
                          job.servers)
        for plan, live in stack.enter_context(closing(sessions)):
            fields = plan.manifest_fields()
            if fields:
                ctx.manifest.set_pass(plan.pass_id, **fields)
            episodes = episode_order(job.canonical, plan.order, job.protocol.order_seed)
            run_pass(job.protocol, ctx, live, worker, episodes, job.render, plan,
                     lambda pass_id, episode, requests: ctx.emit(EpisodeFinished(pass_id, episode, requests)))


def drive(protocol: BfclPassesProtocol, prepared: Prepared, ctx: RunContext, todo: list[PassPlan],
          key: Callable[[Any], str], server: Callable[[Any, Any, Any], Any], pairs: dict[str, tuple[str, str]],
          fresh_server_per_pass: bool, estimate_provider: Any = None) -> None:
    """Run the BFCL passes `todo` (in run order; passes of the same `key` share one server, whose provider is
    `server(protocol, provider, pass)`): handed to the executor as units of passes whose servers are up together
    (`together`), every episode in its pass's order; verdicts of the comparisons `pairs` as soon as both passes
    have an episode (`bfcl_passes` first)."""
    comparer = LiveComparer(pairs, ctx)
    with bfcl_passes(protocol, prepared, ctx, [p.arm for p in todo], fresh_server_per_pass, estimate_provider) as \
            (worker, canonical, render):
        servers = list(dict.fromkeys(key(p) for p in todo))
        units = [Unit("+".join(dict.fromkeys(key(p) for p in group)),
                      PassesUnit(protocol=protocol, passes=[(p, key(p)) for p in group], servers=servers,
                                 server=server, canonical=canonical, render=render, install=prepared.payload,
                                 worker=worker))
                 for group in together(todo, key)]
        ctx.executor.map(replace(ctx, emit=compared(comparer, ctx.emit)), run_passes, units)


def run(protocol: GridProtocol, prepared: Prepared, ctx: RunContext) -> None:
    plans, key = pass_plan(protocol), SERVER_KEY[protocol.server]
    if protocol.server == "per_arm":
        rerun_whole(plans, key, ctx, "server")
    todo = [p for p in plans if p.pass_id not in ctx.done]
    drive(protocol, prepared, ctx, todo, key, grid_server, grid_results.comparisons([p.as_json() for p in plans]),
          protocol.server == "per_pass")


def bfcl_episodes(data: dict[str, Any]) -> int:
    """BFCL episodes a protocol file asks for: its explicit ids (at most `episodes` of them), else `episodes`."""
    workload = data.get("workload") or {}
    ids = workload.get("ids")
    return min(len(ids), workload.get("episodes", len(ids))) if ids else workload.get("episodes", 80)


BFCL_EPISODES = Number("Episodes", "workload.episodes", bfcl_episodes)  # the size of every BFCL protocol


def bfcl_estimate(data: dict[str, Any], passes: int, servers: int = 0, how: str = "") -> CpuEstimate:
    """The launcher's rough duration of a BFCL file on the embedded CPU engine (two cores): about two
    minutes per episode and pass, five seconds per server started; `how` says how passes are served."""
    episodes = bfcl_episodes(data)
    return CpuEstimate(f"{episodes} episodes x {passes} passes{how}", episodes * passes * 120 + servers * 5)


def estimate_on_cpu(data: dict[str, Any]) -> CpuEstimate:
    """The launcher's rough duration of a grid file on the embedded CPU engine (one server)."""
    return bfcl_estimate(data, len(data.get("passes") or ()) or 4)


def on_vllm(protocol: GridProtocol, starts_servers: bool) -> None:
    """What a vLLM run cannot serve in a grid: every pass from one server (vLLM fixes prefix caching per server
    process) and, on servers the kit starts for the run, `per_arm` servers that would both be up at once (its
    arms alternate): they share one GPU and each vLLM server takes 90% of its memory by default."""
    if protocol.server == "shared":
        raise ConfigError("this grid serves every pass from one server (server: shared), but vLLM fixes prefix "
                          "caching per server process",
                          "use a protocol with server: per_arm (e.g. grid-vllm: both cache-on passes from one "
                          "process) or server: per_pass (grid-vllm-fresh: a fresh server per pass)")
    if not starts_servers or protocol.server != "per_arm":
        return
    arms = [p.arm for p in pass_plan(protocol)]
    runs = [arm for index, arm in enumerate(arms) if index == 0 or arm != arms[index - 1]]  # each arm's stretches
    if len(runs) != len(set(runs)):
        raise ConfigError(f"with server: per_arm, passes {' '.join(protocol.passes)} (orders "
                          f"{', '.join(map(str, protocol.orders))}) keep a cache-on and a cache-off vLLM server up at "
                          "once, and each takes 90% of the GPU's memory",
                          "run each arm's passes back to back (passes [on, on, off, off], one order: grid-vllm), "
                          "use server: per_pass, or start the two servers yourself and give --engine-url on=/off=")


KIND = Kind(
    results_model=GridResults,
    name="grid", model=GridProtocol, prepare=prepare, run=run, results=results, table="grid",
    render=Lazy("kit.protocols.grid.view:grid_table"),
    launcher=Launcher(
        measures="BFCL agent episodes, cache on/off x repeats: run-to-run and path divergence",
        needs="any llama.cpp engine (vLLM: a server per cache arm, server: per_arm or per_pass) + BFCL (fetched once); "
              "long prompts, slow on a CPU", estimate=estimate_on_cpu,
        size=BFCL_EPISODES),
    analysis=Analysis("grid"), units=True, record=BfclRecord, engine_rules={VLLM.name: on_vllm}, plot_rows=Lazy("kit.protocols.grid.view:plot_rows"),
    headline=Lazy("kit.protocols.grid.view:headline"))
