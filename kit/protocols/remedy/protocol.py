"""The remedy: a workload's unfixed arm and one or more fixed arms (kit.launch.llamacpp.fixes) in one run, each on
fresh servers, arms interleaved unit by unit so load on the machine hits all alike (docs/remedy.md).

Workloads, each through the pass of the kind that owns it (no request loop of its own):
- `gsm8k`: every item cold, warm, cold, warm on a fresh server of each arm (the reset kind's session,
  kit.protocols.reset.protocol.serve_session): the paper's Table IV (paths differ) and Table VII
  (correctness flips) per arm;
- `bfcl`: every BFCL multi-turn episode on a fresh server of each arm, a cache-on pass then a cache-off
  pass (the grid's pass, kit.protocols.bfcl_passes.one_pass.run_pass): Table V (path divergence) per arm.
Units alternate the arms' order (A B C, then C B A, ...). A fix that leaves no cache hit (`reuse-off`)
gates its warm requests as recomputes (0 cached tokens) and its cache-on passes with no hit share.
"""

from __future__ import annotations

import re
from contextlib import closing
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict, TypeVar

from pydantic import Field, field_validator, model_validator

from kit.core.errors import ConfigError
from kit.core.events import Notice
from kit.core.paths import RunPaths
from kit.launch.llamacpp import fixes as fix_registry
from kit.launch.provider import EngineProvider, NativeProvider
from kit.protocols import bounds as b
from kit.protocols.bfcl_passes.drive import bfcl_passes, prepare_bfcl, rerun_whole, served
from kit.protocols.bfcl_passes.model import BfclPassesProtocol, BfclWorkload, GridGates, PassFields, PassPlan
from kit.protocols.bfcl_passes.one_pass import run_pass
from kit.protocols.kind import Analysis, CpuEstimate, FileData, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.remedy import results as remedy_results
from kit.workloads.bfcl.provision import BfclInstall
from kit.workloads.items import Item
from kit.protocols.reset.protocol import Gates, Phase, ResetProtocol, check_gate, items_for, serve_session
from kit.protocols.spec import ProtocolBase, Strict, Workload
from kit.protocols.remedy.results import RemedyResults
from kit.record.model import ResetRecord
from kit.workloads.items import MATH_SYSTEM_PROMPT

ARM_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
PHASES = ({"name": "cold", "cache_prompt": False, "expect": "cold"}, {"name": "warm", "cache_prompt": True, "expect": "warm"},
          {"name": "cold2", "cache_prompt": False, "expect": "cold"},
          {"name": "warm2", "cache_prompt": True, "expect": "warm"})
ARMS_MAX = 8


class RemedyArm(Strict):
    """One arm: its name, the named fixes and extra server flags its servers carry (none: the unfixed arm)."""

    name: str
    fixes: tuple[str, ...] = Field((), max_length=fix_registry.FIXES_MAX)
    server_args: tuple[str, ...] = Field((), max_length=fix_registry.SERVER_ARGS_MAX)

    @field_validator("name")
    @classmethod
    def _plain(cls, name: str) -> str:
        if not ARM_NAME.fullmatch(name):
            raise ValueError(f"arm name {name[:50]!r} is not 1-40 lowercase letters, digits and dashes")
        return name

    @model_validator(mode="after")
    def _known(self) -> RemedyArm:
        try:
            self.applied()
        except ConfigError as exc:
            raise ValueError(f"arm {self.name}: {exc.message}") from None
        return self

    def applied(self) -> fix_registry.Applied:
        return fix_registry.parse(self.fixes, self.server_args)


class RemedyGsm8k(Strict):
    """The GSM8K cold/warm workload (Tables IV and VII): items and answer length."""

    workload: Workload = Workload(items=3)
    max_tokens: b.MaxTokens = 128
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 1)
    gates: Gates = Gates()


class RemedyBfcl(Strict):
    """The BFCL multi-turn workload (Table V): episodes, answer cap and requests per episode."""

    workload: BfclWorkload = BfclWorkload(episodes=2)
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 1)
    gates: GridGates = GridGates()


class RemedyProtocol(ProtocolBase):
    """Arms (the first unfixed) crossed with the workloads that are given (at least one)."""

    protocol: Literal["remedy"]
    order_seed: b.Seed = 20261007
    arms: tuple[RemedyArm, ...] = Field(min_length=2, max_length=ARMS_MAX)
    gsm8k: RemedyGsm8k | None = RemedyGsm8k()
    bfcl: RemedyBfcl | None = None

    @model_validator(mode="after")
    def _arms(self) -> RemedyProtocol:
        names = [arm.name for arm in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must differ: {', '.join(names)}")
        if not self.arms[0].applied().empty:
            raise ValueError(f"the first arm ({names[0]}) is the unfixed one every fix is held against: give it no "
                             "fixes and no server_args")
        if any(arm.applied().empty for arm in self.arms[1:]):
            raise ValueError("only the first arm may be unfixed: give every other arm a fix or a server flag")
        if self.gsm8k is None and self.bfcl is None:
            raise ValueError("give at least one workload: gsm8k, bfcl or both")
        if self.gsm8k is not None and self.gsm8k.max_tokens > self.engine.ctx_size:
            raise ValueError(f"gsm8k.max_tokens {self.gsm8k.max_tokens} exceeds engine.ctx_size {self.engine.ctx_size}")
        return self


def reset_protocol(protocol: RemedyProtocol) -> ResetProtocol:
    """The GSM8K workload as the reset kind's protocol its session serves (one session, cold/warm/cold/warm)."""
    g = protocol.gsm8k
    assert g is not None
    return ResetProtocol.model_validate({
        "protocol": "reset", "engine": protocol.engine.model_dump(), "seed": protocol.seed, "sessions": 1,
        "order_seed": protocol.order_seed, "workload": g.workload.model_dump(), "max_tokens": g.max_tokens,
        "top_logprobs": g.top_logprobs, "phases": list(PHASES), "gates": g.gates.model_dump()})


def grid_protocol(protocol: RemedyProtocol, hits: bool = True) -> BfclPassesProtocol:
    """The BFCL workload as the protocol of BFCL passes its pass serves (the grid's part of it); `hits` False (a fix
    that leaves no cache hit): cache-on requests need no hit share."""
    w = protocol.bfcl
    assert w is not None
    gates = w.gates.model_dump() | ({} if hits else {"on_min_hit_share": 0.0})
    return BfclPassesProtocol.model_validate({
        "protocol": "grid", "engine": protocol.engine.model_dump(), "seed": protocol.seed,
        "order_seed": protocol.order_seed, "workload": w.workload.model_dump(), "top_logprobs": w.top_logprobs,
        "gates": gates})


@dataclass(frozen=True)
class RemedyPayload:
    """What a remedy run works from: its GSM8K items and BFCL's install, each where the protocol has that workload."""

    gsm8k: list[Item] | None = None
    bfcl: BfclInstall | None = None


def prepare(protocol: RemedyProtocol, inputs: RunInputs) -> Prepared:
    gsm8k = bfcl = None  # each workload's part: its plan, its description and what it runs from
    if protocol.gsm8k is not None:
        items, described = items_for(reset_protocol(protocol), inputs.gsm8k)
        gsm8k = Prepared(plan={"items": len(items), "phases": [p["name"] for p in PHASES],
                               "max_tokens": protocol.gsm8k.max_tokens}, workload=dict(described), payload=items)
    if protocol.bfcl is not None:
        bfcl = prepare_bfcl(grid_protocol(protocol), {"passes": ["on", "off"]}, inputs)
    parts = {name: part for name, part in (("gsm8k", gsm8k), ("bfcl", bfcl)) if part is not None}
    return Prepared(plan={"arms": [arm.name for arm in protocol.arms], "server": "fresh server per arm and unit",
                          "interleaved": "units in turn; the arms' order alternates",
                          **{name: part.plan for name, part in parts.items()}},
                    workload={name: part.workload for name, part in parts.items()},
                    payload=RemedyPayload(gsm8k.payload if gsm8k else None, bfcl.payload if bfcl else None),
                    seeds={"request_seed": protocol.seed, "order_seed": protocol.order_seed})


T = TypeVar("T")


def in_turn(arms: list[T], index: int) -> list[T]:
    """The arms' order for the unit at `index`: as listed, then reversed, and so on (A B, B A, A B ...)."""
    return list(arms) if index % 2 == 0 else list(reversed(arms))


def pass_id(arm: str, workload: str, unit: str, cache: str | None = None) -> str:
    return ".".join(part for part in (arm, workload, unit, cache) if part)


def _no_hit_check(phase: Phase, cached: int | None, gates: Gates) -> tuple[bool, str | None]:
    """A warm request on an arm that leaves no cache hit is gated as the recompute it is."""
    return check_gate(Phase(name=phase.name, cache_prompt=False, expect="cold"), cached, gates)


def run(protocol: RemedyProtocol, prepared: Prepared, ctx: RunContext) -> None:
    if not isinstance(ctx.provider, NativeProvider):
        raise ConfigError("the remedy starts servers with each arm's fixes, which only the kit's native launcher "
                          "sets", "run it with the embedded engine or --server-bin")
    say = lambda text: ctx.emit(Notice(text))  # noqa: E731
    providers = {arm.name: fix_registry.apply(ctx.provider, arm.applied(), say) for arm in protocol.arms}
    ctx.manifest.update(remedy={"arms": [{"name": arm.name, **arm.applied().to_json(),
                                          "reuse_off": arm.applied().reuse_off,
                                          "engine": providers[arm.name].describe()} for arm in protocol.arms]})
    if protocol.gsm8k is not None:
        _gsm8k(protocol, ctx, prepared.payload.gsm8k, providers)
    if protocol.bfcl is not None:
        _bfcl(protocol, prepared, ctx, providers)


def _gsm8k(protocol: RemedyProtocol, ctx: RunContext, items: list[Item], providers: dict[str, EngineProvider]) -> None:
    reset = reset_protocol(protocol)
    system_prompt = reset.workload.system_prompt or MATH_SYSTEM_PROMPT
    total = len(items) * len(protocol.arms)
    for index, item in enumerate(items):
        for position, arm in enumerate(in_turn(list(protocol.arms), index), start=1):
            pid = pass_id(arm.name, "gsm8k", item.id)
            if pid in ctx.done:
                continue
            ctx.manifest.set_pass(pid, remedy=RemedyEntry(arm=arm.name, workload="gsm8k", unit=item.id))
            check = _no_hit_check if arm.applied().reuse_off else check_gate
            serve_session(reset, ctx, providers[arm.name], pid, [item], system_prompt,
                          (index * len(protocol.arms) + position, total), check)


class RemedyEntry(TypedDict):
    """`passes.<id>.remedy`: the remedy arm (`arm`), workload, unit (item or episode) and, for BFCL, cache arm."""

    arm: str
    workload: Literal["gsm8k", "bfcl"]
    unit: str
    cache: NotRequired[str]


class RemedyFields(PassFields):
    """What a BFCL pass of the remedy adds to its manifest entry."""

    remedy: RemedyEntry


@dataclass(frozen=True)
class RemedyPass(PassPlan):
    """A BFCL pass of the remedy: its cache arm (`arm`) of one episode (`unit`) on one remedy arm (`fix`)."""

    fix: str = ""
    unit: str = ""

    @property
    def server(self) -> str:
        """The label of its server, which the episode's cache-on and cache-off passes of its arm share."""
        return pass_id(self.fix, "bfcl", self.unit)

    def manifest_fields(self) -> RemedyFields:
        return {"remedy": {"arm": self.fix, "workload": "bfcl", "unit": self.unit, "cache": self.arm}}


def bfcl_plan(protocol: RemedyProtocol, episodes: list[str]) -> list[RemedyPass]:
    """Every BFCL pass in run order: episode by episode, the arms in turn, each a cache-on then a cache-off pass."""
    return [RemedyPass(pass_id(arm.name, "bfcl", episode, cache), cache, 1, 0, fix=arm.name, unit=episode)
            for index, episode in enumerate(episodes) for arm in in_turn(list(protocol.arms), index)
            for cache in ("on", "off")]


def _bfcl(protocol: RemedyProtocol, prepared: Prepared, ctx: RunContext, providers: dict[str, EngineProvider]) -> None:
    grids = {arm.name: grid_protocol(protocol, hits=not arm.applied().reuse_off) for arm in protocol.arms}
    first = grids[protocol.arms[0].name]
    install = Prepared(plan={}, workload={}, payload=prepared.payload.bfcl)
    logs = RunPaths(ctx.run_dir).logs
    with bfcl_passes(first, install, ctx, [], fresh_server_per_pass=True) as (worker, canonical, render):
        episodes = {episode.id: episode for episode in canonical}
        plans = bfcl_plan(protocol, list(episodes))
        server = lambda plan: plan.server  # noqa: E731
        rerun_whole(plans, server, ctx, "server")  # an episode's two passes share one server
        todo = [plan for plan in plans if plan.pass_id not in ctx.done]
        sessions = served(todo, server, lambda plan, label: providers[plan.fix].session(label, logs), ctx)
        with closing(sessions):
            for plan, live in sessions:
                ctx.manifest.set_pass(plan.pass_id, **plan.manifest_fields())
                run_pass(grids[plan.fix], ctx, live, worker, [episodes[plan.unit]], render, plan, lambda *_: None)


def estimate_on_cpu(data: FileData) -> CpuEstimate:
    """The launcher's rough duration on the embedded CPU engine (135M model, two cores): a GSM8K request ~3 s;
    a BFCL request ~60 s, its ~7.9k-token prompt prefilled at ~130 tokens/s (20 tokens/s on a loaded machine),
    or ~4 s per function doc listed when `function_docs_max` trims the docs (~300 tokens each)."""
    arms = len(data.get("arms") or ()) or 2
    gsm8k, bfcl = data.get("gsm8k", {}), data.get("bfcl")
    items = ((gsm8k or {}).get("workload") or {}).get("items", 3) if gsm8k is not None else 0
    workload = (bfcl or {}).get("workload") or {}
    episodes = workload.get("episodes", 2) if bfcl else 0
    per_episode = 2 * (workload.get("max_requests_per_episode") or 6)  # a cache-on and a cache-off pass
    requests = arms * (items * 4 + episodes * per_episode)
    docs = workload.get("function_docs_max")
    per_request = 60 if not isinstance(docs, int) else min(60, 3 + 4 * docs)
    seconds = arms * ((items + episodes) * 5 + items * 4 * 3 + episodes * per_episode * per_request)
    return CpuEstimate(f"{requests} requests on {arms * (items + episodes)} servers", seconds)


LAUNCHER = Launcher(
    measures="the remedy: fixes held against the unfixed engine on GSM8K (Tables IV, VII) and BFCL (Table V), what "
             "each closes and what it costs per prompt length",
    needs="the kit's own llama-server (embedded or --server-bin; not --engine-url or docker); BFCL for bfcl",
    estimate=estimate_on_cpu, size=Number("Items", "gsm8k.workload.items", 3, high=1000), started_engine_only=True)
VIEW = "kit.protocols.remedy.view"

KIND = Kind(results_model=RemedyResults, name="remedy", model=RemedyProtocol, prepare=prepare, run=run, results=remedy_results.write, table="remedy",
            launcher=LAUNCHER, analysis=Analysis("remedy", table=Lazy("kit.protocols.remedy.results:remedy_table")),
            render=Lazy(f"{VIEW}:remedy_table"), note=Lazy(f"{VIEW}:remedy_note"), headline=Lazy(f"{VIEW}:headline"),
            plot_rows=Lazy(f"{VIEW}:plot_rows"), arm_fixes=lambda protocol: [a.applied() for a in protocol.arms],
            record=ResetRecord)  # and BfclRecord on its BFCL passes (the grid's records)
