"""The grid: BFCL multi-turn episodes served with prefix caching on and off, each arm twice.

Passes run in the protocol's order (`server`): all on one server (`shared`, the paper's llama.cpp
grid: on, off, on, off), each arm's passes on a server of their own (`per_arm`: vLLM fixes prefix
caching per server process; the paper's vLLM grid ran on, on, off, off that way), or each pass on a
fresh server (`per_pass`). Every request becomes a record; every episode gets an episode record with
BFCL's verdict. As soon as an episode exists in both passes of a comparison, its verdict is emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from kit.core.errors import ConfigError
from kit.engines.registry import VLLM
from kit.protocols import bounds as b
from kit.protocols.bfcl_passes.drive import drive, prepare_bfcl, rerun_whole
from kit.protocols.bfcl_passes.model import (BFCL_EPISODES, Arm, BfclPassesProtocol, PassPlan, bfcl_episodes,
                                             bfcl_estimate)
from kit.protocols.grid import results as grid_results
from kit.protocols.grid.results import GridResults
from kit.protocols.kind import Analysis, CpuEstimate, FileData, Kind, Launcher, Lazy
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.record.model import BfclRecord

if TYPE_CHECKING:  # annotations only: reading a grid run's files (kit analyze, kit verify) loads no launch machinery
    from kit.launch.provider import EngineProvider


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


def prepare(protocol: GridProtocol, inputs: RunInputs) -> Prepared:
    passes = pass_plan(protocol)
    return prepare_bfcl(protocol, {"passes": [p.pass_id for p in passes], "orders": list(protocol.orders),
                                   "server": protocol.server,
                                   "comparisons": list(grid_results.comparisons(passes))},
                        inputs)


SERVER_KEY: dict[str, Callable[[PassPlan], str]] = {  # grid `server` setting -> which passes share a server
    "shared": lambda plan: "grid", "per_arm": lambda plan: f"arm-{plan.arm}", "per_pass": lambda plan: plan.pass_id}


def grid_server(protocol: GridProtocol, provider: EngineProvider, plan: PassPlan) -> EngineProvider:
    """The provider of a grid pass's server: the run's for one server of both arms (`shared`: refused where the
    arm is a server's setting), else its arm's."""
    from kit.launch.provider import for_arm  # noqa: PLC0415 - launch machinery loads when a run starts

    return provider if protocol.server == "shared" else for_arm(provider, plan.arm)


def run(protocol: GridProtocol, prepared: Prepared, ctx: RunContext) -> None:
    plans, key = pass_plan(protocol), SERVER_KEY[protocol.server]
    if protocol.server == "per_arm":
        rerun_whole(plans, key, ctx, "server")
    todo = [p for p in plans if p.pass_id not in ctx.done]
    drive(protocol, prepared, ctx, todo, key, grid_server, grid_results.comparisons(plans),
          protocol.server == "per_pass")


def estimate_on_cpu(data: FileData) -> CpuEstimate:
    """The launcher's rough duration of a grid file on the embedded CPU engine (one server)."""
    return bfcl_estimate(bfcl_episodes(data), len(data.get("passes") or ()) or 4)


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
    name="grid", model=GridProtocol, prepare=prepare, run=run, results=grid_results.write, table="grid",
    render=Lazy("kit.protocols.grid.view:grid_table"),
    launcher=Launcher(
        measures="BFCL agent episodes, cache on/off x repeats: run-to-run and path divergence",
        needs="any llama.cpp engine (vLLM: a server per cache arm, server: per_arm or per_pass) + BFCL (fetched once); "
              "long prompts, slow on a CPU", estimate=estimate_on_cpu,
        size=BFCL_EPISODES),
    analysis=Analysis("grid"), units=True, record=BfclRecord, engine_rules={VLLM.name: on_vllm}, plot_rows=Lazy("kit.protocols.grid.view:plot_rows"),
    headline=Lazy("kit.protocols.grid.view:headline"))
