"""The restored-state control: each item served cold, warm, cold, warm in independent sessions."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict

from pydantic import Field, model_validator

from kit.protocols.reset import results as reset_table
from kit.record.divergence import first_difference
from kit.engines.base import CompletionRequest, require
from kit.core.errors import ConfigError
from kit.core.digests import sha256_json
from kit.core.events import ItemVerdict, Notice, PlanEstimate, RequestDone, SessionEnded, SessionStarted
from kit.record.manifest import now
from kit.models.hashing import sha256_file
from kit.core.paths import RunPaths
from kit.protocols.estimate import Speed, probe
from kit.protocols.kind import Analysis, CpuEstimate, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs, Unit
from kit.protocols import bounds as b
from kit.protocols.spec import ProtocolBase, Strict, Workload
from kit.protocols.reset.results import ResetResults
from kit.record.model import Gate, ResetRecord
from kit.workloads.items import MATH_SYSTEM_PROMPT, Item, arithmetic_items, load_gsm8k

if TYPE_CHECKING:  # an annotation only: `kit verify` and `kit analyze` of a reset run load no engine machinery
    from kit.launch.provider import EngineProvider


class Phase(Strict):
    name: str
    cache_prompt: bool
    expect: Literal["cold", "warm"]


class Gates(Strict):
    cold_max_cached_tokens: int = b.count(0, b.CTX_MAX, 0)
    warm_min_cached_tokens: int = b.count(1, b.CTX_MAX, 1)
    abort_violation_share: float = Field(0.10, strict=True, ge=0, le=1)
    abort_after_items: int = b.count(1, b.ITEMS_MAX, 3)


class ResetProtocol(ProtocolBase):
    """The restored-state control: each item served in phases (cold, warm, cold, warm) per session."""

    protocol: Literal["reset"]
    workload: Workload = Workload()
    sessions: int = b.count(1, b.SESSIONS_MAX, 3)
    order_seed: b.Seed = 20261007
    max_tokens: b.MaxTokens = 1024
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 5)
    phases: tuple[Phase, ...]
    gates: Gates = Gates()

    @model_validator(mode="after")
    def _two_of_each(self) -> "ResetProtocol":
        kinds = [p.expect for p in self.phases]
        if kinds.count("cold") != 2 or kinds.count("warm") != 2:
            raise ValueError("phases must hold two cold and two warm phases (e.g. cold, warm, cold, warm)")
        return self


class ItemsServed(TypedDict, total=False):
    """The manifest's `workload` of a run that serves GSM8K or arithmetic items (kit.record.manifest.WorkloadInfo)."""

    source: Literal["gsm8k", "arithmetic"]
    file: str
    sha256: str
    first_item: int
    items: int
    seed: int


def items_for(protocol: ResetProtocol, gsm8k: Path | None) -> tuple[list[Item], ItemsServed]:
    """The items to serve and their description for the manifest (GSM8K file, or generated problems)."""
    workload = protocol.workload
    source = workload.source if workload.source != "auto" else ("gsm8k" if gsm8k else "arithmetic")
    if source == "gsm8k":
        if gsm8k is None:
            raise ConfigError("this protocol serves GSM8K items but no file was given",
                              "pass --gsm8k PATH to GSM8K's test.jsonl")
        items = load_gsm8k(gsm8k, workload.items, workload.first_item)
        return items, {"source": "gsm8k", "file": str(gsm8k), "sha256": sha256_file(gsm8k),
                       "first_item": workload.first_item, "items": len(items)}
    return arithmetic_items(workload.items, protocol.order_seed), {
        "source": "arithmetic", "seed": protocol.order_seed, "items": workload.items}


def prepare(protocol: ResetProtocol, inputs: RunInputs) -> Prepared:
    items, workload = items_for(protocol, inputs.gsm8k)
    plan = {"sessions": protocol.sessions, "items": len(items), "phases": [p.name for p in protocol.phases],
            "requests": protocol.sessions * len(items) * len(protocol.phases), "max_tokens": protocol.max_tokens}
    return Prepared(plan=plan, workload=dict(workload), payload=items,
                    seeds={"request_seed": protocol.seed, "order_seed": protocol.order_seed})


def results(run_dir: Path) -> ResetResults:
    return reset_table.write(run_dir)


def session_order(items: list[Item], order_seed: int, session: int) -> list[Item]:
    """The order session `session` (1-based) serves the items in: a shuffle seeded by (order_seed, session)."""
    order = list(items)
    random.Random(order_seed * 1000 + session).shuffle(order)
    return order


def check_gate(phase: Phase, cached: int | None, gates: Gates) -> tuple[bool, str | None]:
    """Does the telemetry show the cache state the phase expects? Unknown telemetry never passes."""
    if cached is None:
        return False, f"{phase.name}: the engine did not report cached tokens, so the {phase.expect} state is unverified"
    if phase.expect == "cold" and cached > gates.cold_max_cached_tokens:
        return False, f"{phase.name}: {cached} cached tokens, a cold request allows at most {gates.cold_max_cached_tokens}"
    if phase.expect == "warm" and cached < gates.warm_min_cached_tokens:
        return False, f"{phase.name}: {cached} cached tokens, a warm request needs at least {gates.warm_min_cached_tokens}"
    return True, None


class Verdict(NamedTuple):
    """One item's four phases compared (the fields of its ItemVerdict event, in their order)."""

    recompute_reproduces: bool
    hit_reproduces: bool
    paths_differ: bool
    first_difference: int | None


def _verdict(protocol: ResetProtocol, outputs: list[list[int]]) -> Verdict:
    cold = [o for o, p in zip(outputs, protocol.phases) if p.expect == "cold"]
    warm = [o for o, p in zip(outputs, protocol.phases) if p.expect == "warm"]
    return Verdict(cold[0] == cold[1], warm[0] == warm[1], cold[0] != warm[0], first_difference(cold[0], warm[0]))


ESTIMATE_FROM_REQUESTS = 100  # smaller runs (the demo) start at once; a stated duration would only delay them


def messages(system_prompt: str, item: Item) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": item.question}]


def estimate(protocol: ResetProtocol, speed: Speed, items: int, sessions: int) -> PlanEstimate:
    """Sessions x items x phases at the measured speed: cold phases recompute the prompt, warm ones
    reuse it; answers assumed ~256 tokens or the cap; a server start per session."""
    out = min(protocol.max_tokens, 256)
    per_item = sum(speed.request_seconds(speed.prompt_tokens if p.expect == "cold" else 8, out)
                   for p in protocol.phases)
    seconds = sessions * (speed.startup_seconds + items * per_item)
    return PlanEstimate(round(seconds, 1), round(speed.prefill_tokens_per_s, 1), round(speed.decode_tokens_per_s, 1),
                        f"{sessions} sessions x {items} items x {len(protocol.phases)} phases; prompts of "
                        f"~{speed.prompt_tokens} tokens, ~{out} new tokens per answer", speed.source)


def renderer(engine):
    """The engine's own chat template (cold and warm phases send the same rendered prompt)."""
    return require(engine, "prompt_rendering", "the restored-state control")


def run(protocol: ResetProtocol, prepared: Prepared, ctx: RunContext) -> None:
    """Run every session; each ends OK or VOID in the manifest. Raises EngineError if an engine fails."""
    system_prompt = protocol.workload.system_prompt or MATH_SYSTEM_PROMPT
    todo = [index for index in range(1, protocol.sessions + 1) if f"s{index}" not in ctx.done]
    items = prepared.payload
    if todo and items and ctx.manifest.run.estimate is None \
            and len(todo) * len(items) * len(protocol.phases) >= ESTIMATE_FROM_REQUESTS:
        opening = messages(system_prompt, items[0])
        speed = probe(ctx.provider, RunPaths(ctx.run_dir).logs, protocol.seed,
                      lambda engine: renderer(engine).apply_template(opening),
                      prompt_id=sha256_json(opening), notice=lambda text: ctx.emit(Notice(text)))
        guess = estimate(protocol, speed, len(items), len(todo))
        ctx.manifest.update(estimate=asdict(guess))
        ctx.emit(guess)
    ctx.executor.map(ctx, run_session, [Unit(f"s{index}", SessionUnit(protocol, items, system_prompt, index))
                                        for index in todo])


@dataclass(frozen=True)
class SessionUnit:
    """One session: its own fresh server (an executor's unit, kit.protocols.procedure.Unit)."""

    protocol: ResetProtocol
    items: list[Item]
    system_prompt: str
    index: int


def run_session(ctx: RunContext, unit: Unit) -> None:
    session: SessionUnit = unit.payload
    _session(session.protocol, ctx, session.items, session.system_prompt, session.index)


def _session(protocol: ResetProtocol, ctx: RunContext, items: list[Item], system_prompt: str, index: int) -> None:
    pass_id = f"s{index}"
    ctx.manifest.set_pass(pass_id, session=index)
    serve_session(protocol, ctx, ctx.provider, pass_id, session_order(items, protocol.order_seed, index),
                  system_prompt, (index, protocol.sessions))


Check = Callable[[Phase, "int | None", Gates], "tuple[bool, str | None]"]


def serve_session(protocol: ResetProtocol, ctx: RunContext, provider: EngineProvider, pass_id: str, order: list[Item],
                  system_prompt: str, numbered: tuple[int, int], check: Check = check_gate) -> None:
    """One session on a fresh server of `provider`: each item of `order` through the protocol's phases, one
    record per request (pass `pass_id`), gated by `check`; the pass ends OK or VOID. `numbered`: (this
    session's number, the sessions in all) as the console shows it. The remedy kind serves its arms' items
    through it too (kit.protocols.remedy)."""
    file = RunPaths.records_name(pass_id)
    ctx.manifest.set_pass(pass_id, file=file, status="running", started=now(),
                          order=[item.id for item in order], fresh_server=provider.fresh_servers)
    gates = protocol.gates
    requests = violations = 0
    first_violation: str | None = None
    status, reason = "OK", None
    stamp = ctx.stamp(pass_id, "reset")
    with provider.session(pass_id, RunPaths(ctx.run_dir).logs) as live, \
            ctx.records(file, **stamp) as writer:
        ctx.manifest.set_pass(pass_id, launch=live.launch)
        ctx.emit(SessionStarted(pass_id, numbered[0], numbered[1], live.launch))
        template = renderer(live.engine)
        for done, item in enumerate(order, start=1):
            with live.engine_calls(f"session {pass_id} (item {item.id})"):
                prompt = template.apply_template(messages(system_prompt, item))
            outputs = []
            for phase_index, phase in enumerate(protocol.phases):
                ctx.checkpoint()
                request = CompletionRequest(prompt=prompt, max_tokens=protocol.max_tokens,
                                            cache_prompt=phase.cache_prompt, top_logprobs=protocol.top_logprobs,
                                            seed=protocol.seed)
                with live.engine_calls(f"session {pass_id} (item {item.id}, {phase.name})"):
                    completion = live.engine.complete(request)
                ok, why = check(phase, completion.cached_tokens, gates)
                writer.answered(ResetRecord, completion, unit=item.id, step=0, gate=Gate(ok, why),
                                reference=item.answer, phase=phase.name, phase_index=phase_index, expect=phase.expect)
                requests += 1
                ctx.emit(RequestDone(pass_id, item.id, phase.name, requests, completion.cached_tokens,
                                     completion.prefill_ms, ok))
                if not ok:
                    violations += 1
                    first_violation = first_violation or f"item {item.id}, {why}"
                outputs.append(list(completion.token_ids or ()))
            ctx.emit(ItemVerdict(pass_id, item.id, done, len(order), *_verdict(protocol, outputs)))
            if done >= gates.abort_after_items and violations > gates.abort_violation_share * requests:
                status = "VOID"
                reason = (f"aborted after {done} items: {violations} of {requests} requests violated the "
                          f"cache-state gate (first: {first_violation})")
                break
        if status == "OK" and violations:
            status = "VOID"
            reason = f"{violations} of {requests} requests violated the cache-state gate (first: {first_violation})"
    ctx.manifest.set_pass(pass_id, status=status, reason=reason, records=writer.count, violations=violations,
                          ended=now())
    ctx.emit(SessionEnded(pass_id, status, reason))


def estimate_on_cpu(data: dict[str, Any]) -> CpuEstimate:
    """The launcher's rough duration of a reset file on the embedded CPU engine (two cores)."""
    items = (data.get("workload") or {}).get("items", 100)
    sessions = data.get("sessions", 3)
    phases = len(data.get("phases") or ()) or 4
    tokens = data.get("max_tokens", 1024)
    seconds = sessions * (5 + items * phases * (0.3 + tokens / 60))
    return CpuEstimate(f"{sessions * items * phases} requests", seconds)


KIND = Kind(
    results_model=ResetResults,
    name="reset", model=ResetProtocol, prepare=prepare, run=run, results=results,
    table="restored-state control", render=Lazy("kit.protocols.reset.view:reset_table"),
    launcher=Launcher(
        measures="restored-state control: does recompute / cache hit reproduce, do the paths differ",
        needs="any llama.cpp engine; the embedded CPU engine works", estimate=estimate_on_cpu,
        size=Number("Items", "workload.items", 100),
        repeats=Number("Sessions", "sessions", 3, high=100,
                       placeholder="each on a fresh server, in its own seeded order"),
        max_tokens=Number("Max tokens", "max_tokens", 1024, high=32768,
                          placeholder="per answer")),
    analysis=Analysis("reset"), units=True, record=ResetRecord, note=Lazy("kit.protocols.reset.view:cut_answers_note"),
    plot_rows=Lazy("kit.protocols.reset.view:plot_rows"),
    headline=Lazy("kit.protocols.reset.view:headline"))
