"""The replicated sweep (seed 000 §III-E; Table VI): weight formats × episode histories, path divergence.

For every history k (0 = canonical ascending id, k ≥ 1 = random order k drawn with (order_seed, k);
the same orders for every format) the formats run in row k mod R of the protocol's Williams square.
Each (format, history) is one cache-on pass compared with that format's cache-off reference; the
reference itself runs under two orders (the check that it does not depend on history; a mismatch is
reported). Optionally a second process repeats every format's canonical cache-on pass. Every pass
gets a freshly started server serving its format's file, so no pass inherits another's cache.

The dequantized-weights control is the same procedure with a format derived from another
(protocols/dequant.yaml): the weights stay those of the quantized file, only the kernels change.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from kit.protocols.sweep import results as sweep_run
from kit.core.errors import ConfigError
from kit.core.events import Notice, SessionStarted
from kit.launch.provider import for_arm, per_arm_servers
from kit.core.paths import RunPaths
from kit.protocols import bounds as b
from kit.protocols.sweep import formats as weight_formats
from kit.protocols.bfcl_passes.drive import (BfclUnit, EpisodeFinished, LiveComparer, bfcl_passes, compared,
                                             prepare_bfcl)
from kit.protocols.bfcl_passes.model import (BFCL_EPISODES, BfclPassesProtocol, PassPlan, bfcl_episodes, bfcl_estimate,
                                             episode_order)
from kit.protocols.bfcl_passes.one_pass import run_pass
from kit.protocols.kind import Analysis, CpuEstimate, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs, Unit
from kit.protocols.sweep.results import SweepResults
from kit.record.model import BfclRecord
from kit.engines.registry import VLLM


@dataclass(frozen=True)
class SweepPass(PassPlan):
    format: str = ""
    history: int = 0
    role: Literal["cell", "reference", "replicate"] = "cell"


class SweepProtocol(BfclPassesProtocol):
    """Formats × histories; formats in Williams order per history; a fresh server per pass."""

    protocol: Literal["sweep"]
    formats: dict[str, weight_formats.FormatSource] = Field(min_length=1)
    format_rows: tuple[tuple[str, ...], ...] | None = None  # Williams square rows; history k uses row k mod R
    histories: int = b.count(1, b.HISTORIES_MAX, 11)  # history 0 (canonical) and random orders 1 .. histories-1
    reference_orders: Annotated[tuple[b.OrderIndex, ...], b.UNIQUE] = Field((0, 1), min_length=1, max_length=2)
    replicate: bool = Field(False, strict=True)  # a second process repeats every format's canonical cache-on pass
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 5)

    @field_validator("formats")
    @classmethod
    def _labels(cls, formats: dict[str, weight_formats.FormatSource]) -> dict[str, weight_formats.FormatSource]:
        weight_formats.check_labels(formats)
        return formats

    @field_validator("format_rows")
    @classmethod
    def _rows(cls, rows: tuple[tuple[str, ...], ...] | None, info: ValidationInfo) -> tuple | None:
        labels = list(info.data.get("formats") or {})
        for row in rows or ():
            if sorted(row) != sorted(labels):
                raise ValueError(f"format row {list(row)} must list every format once: {labels}")
        return rows

    def row(self, history: int) -> tuple[str, ...]:
        rows = self.format_rows or (tuple(self.formats),)
        return rows[history % len(rows)]


def pass_plan(protocol: SweepProtocol) -> list[SweepPass]:
    """Every pass in run order: history by history, formats in the history's row; a format's
    references run before its first cache-on pass; the replicates last."""
    plans: list[SweepPass] = []
    referenced: set[str] = set()
    for history in range(protocol.histories):
        for label in protocol.row(history):
            if label not in referenced:
                referenced.add(label)
                plans += [SweepPass(reference_id(label, order), "off", 1, order, label, order, "reference")
                          for order in protocol.reference_orders]
            plans.append(SweepPass(cell_id(label, history), "on", 1, history, label, history, "cell"))
    if protocol.replicate:
        plans += [SweepPass(f"{label}-h0-on-r2", "on", 2, 0, label, 0, "replicate") for label in protocol.row(0)]
    return plans


def cell_id(label: str, history: int) -> str:
    return f"{label}-h{history}-on"


def reference_id(label: str, order: int) -> str:
    return f"{label}-ref-o{order}"


def comparisons(protocol: SweepProtocol) -> dict[str, tuple[str, str]]:
    """Path divergence per cell; each format's reference across its two orders; the replicates."""
    plans = pass_plan(protocol)
    reference = {p.format: p.pass_id for p in plans if p.role == "reference" and p.order == protocol.reference_orders[0]}
    pairs = {f"path {p.format} h{p.history}": (p.pass_id, reference[p.format]) for p in plans if p.role == "cell"}
    if len(protocol.reference_orders) == 2:
        first, second = protocol.reference_orders
        pairs.update({f"reference {label} (order {first} vs {second})": (reference_id(label, first),
                                                                          reference_id(label, second))
                      for label in protocol.formats})
    pairs.update({f"replicate {p.format} h0": (cell_id(p.format, 0), p.pass_id)
                  for p in plans if p.role == "replicate"})
    return pairs


def prepare(protocol: SweepProtocol, inputs: RunInputs) -> Prepared:
    return prepare_bfcl(protocol, {
        "formats": list(protocol.formats), "histories": protocol.histories,
        "format_rows": [list(protocol.row(h)) for h in range(protocol.histories)],
        "reference_orders": list(protocol.reference_orders), "replicate": protocol.replicate,
        "server": "fresh server per pass", "passes": [p.pass_id for p in pass_plan(protocol)],
        "comparisons": list(comparisons(protocol))}, inputs)


def results(run_dir: Path) -> SweepResults:
    return sweep_run.write(run_dir)


def cells(protocol: SweepProtocol, files: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What `kit analyze` reads as separate sweep cells: each cache-on pass with its format's reference."""
    first = protocol.reference_orders[0]
    return {f"{p.format}/h{p.history}": {"passes": [p.pass_id, reference_id(p.format, first)],
                                         "sweep": {"format": p.format, "history": p.history},
                                         "engine": files[p.format]}
            for p in pass_plan(protocol) if p.role == "cell"}


@dataclass(kw_only=True)
class SweepUnit(BfclUnit):
    """One pass on its own fresh server (an executor's unit, kit.protocols.procedure.Unit)."""

    plan: SweepPass
    index: int
    total: int


def run_sweep_pass(ctx: RunContext, unit: Unit) -> None:
    """One pass: its format's fresh server (`ctx.provider`), its episodes in its history's order."""
    job: SweepUnit = unit.payload
    plan, logs = job.plan, RunPaths(ctx.run_dir).logs
    with ExitStack() as stack:
        worker = job.bfcl_worker(stack, ctx, plan.pass_id)
        live = stack.enter_context(ctx.provider.session(plan.pass_id, logs))
        ctx.manifest.set_pass(plan.pass_id, format=plan.format, history=plan.history, role=plan.role)
        ctx.emit(SessionStarted(plan.pass_id, job.index, job.total, live.launch))
        episodes = episode_order(job.canonical, plan.order, job.protocol.order_seed)
        run_pass(job.protocol, ctx, live, worker, episodes, job.render, plan,
                 lambda pass_id, episode, requests: ctx.emit(EpisodeFinished(pass_id, episode, requests)))


def run(protocol: SweepProtocol, prepared: Prepared, ctx: RunContext) -> None:
    if not ctx.provider.fresh_servers:
        raise ConfigError("the sweep starts a fresh server for every pass, but this engine was started elsewhere",
                          "drop --engine-url and let the kit start llama-server")
    if per_arm_servers(ctx.provider):  # vLLM: one checkpoint, served as it is (BF16 for the paper's)
        label = weight_formats.served_as_is(protocol.formats)
        details = {label: {**ctx.provider.describe(), "format": label}}
        providers = {label: ctx.provider}
    else:
        files = weight_formats.resolve(protocol.formats, ctx.provider,
                                       say=lambda text: ctx.emit(Notice(text)))
        ctx.manifest.update(formats={label: entry for label, (_, entry) in files.items()})
        details = {label: weight_formats.engine_details(label, model) for label, (model, _) in files.items()}
        providers = {label: ctx.provider.variant(model=model.path, details=details[label])
                     for label, (model, _) in files.items()}
    ctx.manifest.update(cells=cells(protocol, details))
    todo = [p for p in pass_plan(protocol) if p.pass_id not in ctx.done]
    comparer = LiveComparer(comparisons(protocol), ctx)
    with bfcl_passes(protocol, prepared, ctx, [p.arm for p in todo], True,
                     providers[todo[0].format] if todo else None) as (worker, canonical, render):
        units = [Unit(plan.pass_id, SweepUnit(protocol=protocol, plan=plan, index=index, total=len(todo),
                                              canonical=canonical, render=render, install=prepared.payload,
                                              worker=worker), provider=for_arm(providers[plan.format], plan.arm))
                 for index, plan in enumerate(todo, start=1)]
        ctx.executor.map(replace(ctx, emit=compared(comparer, ctx.emit)), run_sweep_pass, units)


def estimate_on_cpu(data: dict[str, Any]) -> CpuEstimate:
    """The launcher's rough duration of a sweep file on the embedded CPU engine: every pass on a fresh server."""
    formats = len(data.get("formats") or {}) or 1
    histories = data.get("histories", 11)
    references = len(data.get("reference_orders") or (0, 1))
    passes = formats * (histories + references) + (formats if data.get("replicate") else 0)
    return bfcl_estimate(bfcl_episodes(data), passes, passes, " (a fresh server each)")


def on_vllm(protocol: SweepProtocol, starts_servers: bool) -> None:
    """A vLLM sweep serves the checkpoint's own format only (kit.protocols.sweep.formats.served_as_is)."""
    weight_formats.served_as_is(protocol.formats)


KIND = Kind(
    results_model=SweepResults,
    name="sweep", model=SweepProtocol, prepare=prepare, run=run, results=results, table="sweep",
    render=Lazy("kit.protocols.sweep.view:sweep_table"),
    launcher=Launcher(
        measures="path divergence across weight formats x episode histories, a fresh server per pass",
        needs="any llama.cpp engine the kit starts (not --engine-url; vLLM: one format, the checkpoint) + BFCL; "
              "long prompts, slow on a CPU",
        estimate=estimate_on_cpu, size=BFCL_EPISODES, started_engine_only=True,
        repeats=Number("Histories", "histories", 11, high=100,
                       placeholder="canonical order + N-1 random orders, same for every format")),
    analysis=Analysis("sweep"), units=True, record=BfclRecord, engine_rules={VLLM.name: on_vllm},
    headline=Lazy("kit.protocols.sweep.view:headline"))
