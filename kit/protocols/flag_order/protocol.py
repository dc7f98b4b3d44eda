"""Flag × order (seed 000 §IV-C, Table III): the server-level prompt cache crossed with pass order.

Each arm is one cell: a `--cache-ram` setting (null = llama.cpp's default, 8192 MiB; 0 = disabled) and
a sequence of passes holding two cache-on passes, either adjacent (on, on) or with a cache-off pass in
between (on, off, on). Every arm gets a freshly started server and its passes share it, as in the
paper, so the second cache-on pass inherits whatever the earlier passes of its arm left in the
server's caches; an arm with `server: per_pass` gives every pass a fresh server instead. That server
lifetime is the lever on vLLM, which has no `--cache-ram` layer (protocols/flag-order-vllm.yaml: "a
fresh server for each cache-enabled pass" against "both passes from one process"); there an arm's
cache-off pass runs on a server of its own, since vLLM fixes prefix caching per process. Episodes run in the canonical order (ascending id). Per arm, the two cache-on passes
are compared (run-to-run divergence); an arm with a cache-off pass also gets the path comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from kit.protocols.flag_order import results as flag_order_run
from kit.protocols.bfcl_passes.setting import pass_order, prompt_cache_setting
from kit.core.errors import ConfigError
from kit.protocols import bounds as b
from kit.launch.provider import EngineProvider, for_arm, per_arm_servers
from kit.protocols.bfcl_passes.drive import drive, prepare_bfcl, rerun_whole
from kit.protocols.bfcl_passes.model import (BFCL_EPISODES, Arm, BfclPassesProtocol, PassFields, PassPlan, bfcl_episodes,
                                             bfcl_estimate)
from kit.protocols.kind import Analysis, CpuEstimate, FileData, Kind, Launcher, Lazy
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import Strict
from kit.protocols.flag_order.results import CellEngine, CellLabels, CellPasses, CellSpec, FlagOrderResults
from kit.record.model import BfclRecord
from kit.engines.registry import VLLM

CANONICAL = 0  # episode order: ascending id, the same in every pass


class FlagOrderArm(Strict):
    """One cell: its name (a prefix of its pass ids), the server's `--cache-ram` and its passes in order."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    cache_ram: b.CacheRam | None = None  # MiB; null keeps llama.cpp's default (8192), 0 disables
    passes: tuple[Arm, ...]
    # shared: the arm's passes share one server (a server per cache setting on vLLM); per_pass: a fresh one each
    server: Literal["shared", "per_pass"] = "shared"

    @field_validator("passes")
    @classmethod
    def _two_cache_on_passes(cls, passes: tuple[str, ...]) -> tuple[str, ...]:
        if passes.count("on") != 2 or passes.count("off") > 1:
            raise ValueError(f"an arm runs exactly two cache-on passes and at most one cache-off pass, got "
                             f"{list(passes)} (e.g. [on, on] or [on, off, on])")
        return passes


DEFAULT_ARMS = (
    FlagOrderArm(name="default-adjacent", cache_ram=None, passes=("on", "on")),
    FlagOrderArm(name="default-between", cache_ram=None, passes=("on", "off", "on")),
    FlagOrderArm(name="disabled-adjacent", cache_ram=0, passes=("on", "on")),
    FlagOrderArm(name="disabled-between", cache_ram=0, passes=("on", "off", "on")),
)


class FlagOrderFields(PassFields):
    """What a flag x order pass adds to its manifest entry: its arm's name (`cell`) and `--cache-ram`."""

    cell: str
    cache_ram: int | None


@dataclass(frozen=True)
class FlagOrderPass(PassPlan):
    cell: str = ""
    cache_ram: int | None = None
    server: str = "shared"

    def manifest_fields(self) -> FlagOrderFields:
        return {"cell": self.cell, "cache_ram": self.cache_ram}


class FlagOrderProtocol(BfclPassesProtocol):
    """The cells of Table III, one fresh server each, canonical episode order."""

    protocol: Literal["flag_order"]
    arms: tuple[FlagOrderArm, ...] = Field(DEFAULT_ARMS, min_length=1)

    @field_validator("arms")
    @classmethod
    def _unique_names(cls, arms: tuple[FlagOrderArm, ...]) -> tuple[FlagOrderArm, ...]:
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique: {names}")
        return arms


def pass_plan(protocol: FlagOrderProtocol) -> list[FlagOrderPass]:
    """Every pass in run order: arm by arm, each arm's passes in its order (`default-between-on1`,
    `default-between-off1`, `default-between-on2`, ...)."""
    plans = []
    for arm in protocol.arms:
        seen: dict[str, int] = {}
        for kind in arm.passes:
            seen[kind] = seen.get(kind, 0) + 1
            plans.append(FlagOrderPass(f"{arm.name}-{kind}{seen[kind]}", kind, seen[kind], CANONICAL, arm.name,
                                       arm.cache_ram, arm.server))
    return plans


def _arm_passes(protocol: FlagOrderProtocol) -> dict[str, dict[tuple[str, int], str]]:
    """Per arm: (kind, repeat) -> pass id."""
    found: dict[str, dict[tuple[str, int], str]] = {}
    for p in pass_plan(protocol):
        found.setdefault(p.cell, {})[(p.arm, p.repeat)] = p.pass_id
    return found


def comparisons(protocol: FlagOrderProtocol) -> dict[str, tuple[str, str]]:
    """Run-to-run cache-on per arm (on1 vs on2) and, where the arm has a cache-off pass, path (on1 vs off1)."""
    pairs = {}
    for name, ids in _arm_passes(protocol).items():
        pairs[f"run-to-run cache-on {name}"] = (ids[("on", 1)], ids[("on", 2)])
        if ("off", 1) in ids:
            pairs[f"path {name}"] = (ids[("on", 1)], ids[("off", 1)])
    return pairs


def cells(protocol: FlagOrderProtocol) -> dict[str, CellSpec]:
    """What `kit analyze` reads as one grid run per arm: its passes, its cache setting, its pass order."""
    ids = _arm_passes(protocol)
    return {arm.name: CellSpec(passes=[p.pass_id for p in pass_plan(protocol) if p.cell == arm.name],
                               engine=CellEngine(cache_ram=arm.cache_ram),
                               resolved=CellPasses(passes=list(arm.passes)),
                               flag_order=CellLabels(prompt_cache=prompt_cache_setting(arm.cache_ram),
                                                     order=pass_order(list(arm.passes)), server=arm.server,
                                                     run_to_run=[ids[arm.name][("on", 1)], ids[arm.name][("on", 2)]]))
            for arm in protocol.arms}


def prepare(protocol: FlagOrderProtocol, inputs: RunInputs) -> Prepared:
    return prepare_bfcl(protocol, {
        "arms": {a.name: {"cache_ram": a.cache_ram, "passes": list(a.passes), "server": a.server}
                 for a in protocol.arms},
        "server": "fresh server per arm (per pass where an arm says so)", "order": "canonical",
        "passes": [p.pass_id for p in pass_plan(protocol)], "comparisons": list(comparisons(protocol))}, inputs)


def _server_key(per_arm_servers: bool) -> Callable[[FlagOrderPass], str]:
    """Which passes share a server: an arm's (`server: shared`; on an engine whose cache arm is a server
    setting, an arm's passes of one cache setting), or none (`per_pass`)."""
    def key(plan: FlagOrderPass) -> str:
        if plan.server == "per_pass":
            return plan.pass_id
        return f"{plan.cell}-{plan.arm}" if per_arm_servers else plan.cell
    return key


def arm_server(protocol: FlagOrderProtocol, provider: EngineProvider, plan: FlagOrderPass) -> EngineProvider:
    """The provider of a pass's server: its arm's `--cache-ram`, its cache arm's server where that is a server's
    setting."""
    return for_arm(provider.variant(cache_ram=plan.cache_ram), plan.arm)


def run(protocol: FlagOrderProtocol, prepared: Prepared, ctx: RunContext) -> None:
    if not ctx.provider.fresh_servers:
        raise ConfigError("flag × order starts a fresh server per arm with its own --cache-ram, but this engine "
                          "was started elsewhere", "drop --engine-url and let the kit start llama-server")
    ctx.manifest.update(cells={name: cell.to_json() for name, cell in cells(protocol).items()})
    plans = pass_plan(protocol)
    # an arm cut short after some of its passes that share a server runs them again with the rest
    rerun_whole(plans, lambda p: p.cell if p.server == "shared" else p.pass_id, ctx, "arm")
    # every arm on fresh servers (a unit each, or each of its passes where `server: per_pass`); the speed probe
    # gets a server of its own (drive does that): every arm's server starts empty
    drive(protocol, prepared, ctx, [p for p in plans if p.pass_id not in ctx.done],
          _server_key(per_arm_servers(ctx.provider)), arm_server, comparisons(protocol), fresh_server_per_pass=False,
          estimate_provider=None if per_arm_servers(ctx.provider) else ctx.provider.variant(cache_ram=0))


def estimate_on_cpu(data: FileData) -> CpuEstimate:
    """The launcher's rough duration of a flag × order file on the embedded CPU engine: a fresh server per arm."""
    arms = data.get("arms") or [{"passes": p} for p in (("on", "on"), ("on", "off", "on")) * 2]
    passes = sum(len(arm.get("passes") or ()) for arm in arms)
    return bfcl_estimate(bfcl_episodes(data), passes, len(arms), f" in {len(arms)} arms (a fresh server each)")


def on_vllm(protocol: FlagOrderProtocol, starts_servers: bool) -> None:
    """vLLM has no server-level prompt cache (llama.cpp's `--cache-ram`): its lever is server lifetime, so an
    arm that sets `cache_ram` is refused."""
    cells = [arm.name for arm in protocol.arms if arm.cache_ram is not None]
    if cells:
        raise ConfigError(f"flag x order arm {cells[0]} sets cache_ram, llama.cpp's server-level prompt cache, "
                          "which vLLM does not have", "use flag-order-vllm (its arms vary server lifetime)")


KIND = Kind(
    results_model=FlagOrderResults,
    name="flag_order", model=FlagOrderProtocol, prepare=prepare, run=run, results=flag_order_run.write, table="flag_order",
    render=Lazy("kit.protocols.flag_order.view:flag_order_table"),
    launcher=Launcher(
        measures="Table III: run-to-run cache-on divergence, server-level prompt cache (default / off) x pass "
                 "order (adjacent / cache-off pass between), a fresh server per arm",
        needs="any llama.cpp engine the kit starts (not --engine-url; vLLM: arms without cache_ram) + BFCL; long "
              "prompts, slow on a CPU",
        estimate=estimate_on_cpu, size=BFCL_EPISODES, started_engine_only=True),
    analysis=Analysis(None),  # read only through the cells its manifest lists: one grid folder per arm
    units=True, record=BfclRecord, engine_rules={VLLM.name: on_vllm},
    headline=Lazy("kit.protocols.flag_order.view:headline"))
