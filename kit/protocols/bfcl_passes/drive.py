"""BFCL passes run: BFCL prepared and its worker started, passes on the servers they share (handed to the
executor as units of passes whose servers are up together), and each episode's verdict as soon as both passes
of a comparison have it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kit.core.errors import ConfigError
from kit.core.events import Emit, Event, EpisodeVerdict, KindEvent, Notice, PlanEstimate, SessionStarted
from kit.core.paths import RunPaths
from kit.protocols.bfcl_passes.model import FAMILY_RENDERERS, BfclPassesProtocol, BfclWorkload, PassPlan, episode_order
from kit.protocols.bfcl_passes.one_pass import run_pass
from kit.protocols.estimate import Speed, probe
from kit.protocols.procedure import Prepared, RunContext, RunInputs, Unit
from kit.record.divergence import episode_divergence
from kit.workloads.bfcl import RENDERERS, BfclWorker, ensure_bfcl
from kit.workloads.bfcl.client import Episode
from kit.workloads.bfcl.provision import BfclInstall
from kit.workloads.bfcl.render import Renderer
from kit.workloads.bfcl.agent import opening_messages

if TYPE_CHECKING:  # annotations only: reading a grid run's files (kit analyze, kit verify) loads no launch machinery
    from kit.launch.provider import EngineProvider, EngineSession

P = TypeVar("P", bound=PassPlan)  # a pass's plan: the grid's, or a kind's own subclass
Pr = TypeVar("Pr", bound=BfclPassesProtocol)  # a kind's protocol
T = TypeVar("T")
ServerOf = Callable[[Pr, "EngineProvider", P], "EngineProvider"]  # (protocol, the run's provider, pass) -> its server's


def prepare_bfcl(protocol: BfclPassesProtocol, plan: dict[str, Any], inputs: RunInputs) -> Prepared:
    """BFCL installed (its progress told to `inputs.say`) and described, and the plan every BFCL protocol
    shows (`plan` adds its own keys)."""
    install = ensure_bfcl(say=inputs.say)
    workload = protocol.workload
    count = workload.count
    docs = {"function_docs_max": workload.function_docs_max} if workload.function_docs_max else {}  # where trimmed
    plan = {"episodes": count, **plan, "sentinel": protocol.sentinel, "top_logprobs": protocol.top_logprobs,
            "max_tokens_cap": workload.max_tokens_cap, "max_requests_per_episode": workload.max_requests_per_episode,
            **docs}
    description = {"source": "bfcl multi_turn_base", "episodes": count, "ids": workload.chosen_ids() or [], **docs,
                   **install.to_manifest()}
    return Prepared(plan=plan, workload=description, payload=install,
                    seeds={"request_seed": protocol.seed, "order_seed": protocol.order_seed})


def renderer_for(protocol: BfclPassesProtocol, family: object) -> tuple[str, Renderer]:
    """The prompt format's name and renderer: the protocol's, or under `auto` the one of the model's `family` (as the
    engine's provider describes it)."""
    name = protocol.workload.prompt_format
    if name == "auto":
        if not isinstance(family, str) or family not in FAMILY_RENDERERS:
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
                        f"~{out} new tokens each" + (f"; {startup:.0f} s server start per pass" if startup else ""),
                        speed.source)


def served(todo: Sequence[P], key: Callable[[P], str], start: Callable[[P, str], AbstractContextManager[EngineSession]],
           ctx: RunContext, keys: list[str] | None = None) -> Generator[tuple[P, EngineSession], None, None]:
    """(pass, live session) for the passes `todo` in order. Passes with the same `key` share one server:
    `start(pass, key)` opens its session (a context manager) at the first of them, and it is closed after
    the last, so passes of different keys that alternate keep their servers up at once. `keys`: every
    server of the run in order, where `todo` is a part of its passes (how SessionStarted numbers them)."""
    keys = keys or list(dict.fromkeys(key(p) for p in todo))
    last = {key(p): p.pass_id for p in todo}
    servers: dict[str, tuple[ExitStack, EngineSession, str]] = {}
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


def rerun_whole(plans: Sequence[P], key: Callable[[P], str], ctx: RunContext, what: str) -> None:
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


def together(todo: Sequence[T], key: Callable[[T], str]) -> list[list[T]]:
    """The passes `todo` (in run order) cut into units: a cut falls only where no server is up, so every
    server's passes, and the passes of servers up at once (keys that alternate), stay in one unit."""
    last = {key(plan): index for index, plan in enumerate(todo)}
    units: list[list[T]] = []
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


def compared(comparer: LiveComparer, emit: Emit) -> Emit:
    """`emit` with each EpisodeFinished handed to `comparer` instead (it emits the verdicts)."""
    def route(event: Event) -> None:
        if isinstance(event, EpisodeFinished):
            comparer.episode_finished(event.pass_id, event.unit, event.requests)
        else:
            emit(event)
    return route


@contextmanager
def bfcl_passes(protocol: BfclPassesProtocol, prepared: Prepared, ctx: RunContext, arms: list[str],
                fresh_server_per_pass: bool, estimate_provider: EngineProvider | None = None,
                ) -> Iterator[tuple[BfclWorker, list[Episode], Renderer]]:
    """What every run of BFCL passes starts with: the prompt format, the BFCL worker (described in the
    workload), the canonical episodes, and the estimated duration of the passes still to run (`arms`),
    measured on a server of its own started by `estimate_provider` (default: the run's), so the probe
    leaves nothing in any pass's cache. Yields (worker, canonical episodes, renderer)."""
    format_name, render = renderer_for(protocol, ctx.provider.describe().get("model_family"))
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
            from kit.launch.provider import for_arm  # noqa: PLC0415 - launch machinery loads when a run starts
            speed = probe(for_arm(estimate_provider or ctx.provider, "off"), RunPaths(ctx.run_dir).logs, protocol.seed,
                          first, notice=lambda text: ctx.emit(Notice(text)))
            guess = estimate(workload, arms, speed, len(canonical), fresh_server_per_pass)
            ctx.manifest.update(estimate=asdict(guess))
            ctx.emit(guess)
        yield worker, canonical, render


@dataclass(kw_only=True)
class BfclUnit:
    """What every unit of BFCL passes carries (an executor's unit, kit.protocols.procedure.Unit): the protocol, the
    canonical episodes, the prompt renderer and BFCL's install. `worker` is the run's BFCL worker where the unit
    runs in the run's process; shipped elsewhere it is left behind, and the unit starts a worker of its own."""

    protocol: BfclPassesProtocol
    canonical: list[Episode]
    render: Renderer
    install: BfclInstall
    worker: BfclWorker | None = None

    def __getstate__(self) -> object:
        return {**self.__dict__, "worker": None}  # a process handle stays where it was started

    def bfcl_worker(self, stack: ExitStack, ctx: RunContext, unit: str) -> BfclWorker:
        """The run's BFCL worker, else one of the unit's own (`logs/bfcl-worker-<unit>.log`) closed with `stack`."""
        return self.worker or stack.enter_context(
            BfclWorker(self.install, log_path=RunPaths(ctx.run_dir).logs / f"bfcl-worker-{unit}.log"))


@dataclass(kw_only=True)
class PassesUnit(BfclUnit, Generic[Pr, P]):
    """Passes in run order, each with the label of the server it shares (`passes`); `servers`, every server label of
    the run's passes still to run; `server(protocol, provider, pass)`, the provider of a pass's server (module-level)."""

    protocol: Pr
    passes: list[tuple[P, str]]
    servers: list[str]
    server: ServerOf[Pr, P]


def run_passes(ctx: RunContext, unit: Unit) -> None:
    """A unit's passes in order, on servers started for them (`served`): each pass's episodes in its order."""
    job: PassesUnit[BfclPassesProtocol, PassPlan] = unit.payload
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


def drive(protocol: Pr, prepared: Prepared, ctx: RunContext, todo: list[P], key: Callable[[P], str],
          server: ServerOf[Pr, P], pairs: dict[str, tuple[str, str]], fresh_server_per_pass: bool,
          estimate_provider: EngineProvider | None = None) -> None:
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
