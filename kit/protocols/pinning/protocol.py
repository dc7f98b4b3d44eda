"""The cache-instance protocol (seed 002): how many prompt-cache states an engine has, whether each is
deterministic, and whether one different prompt flips an instance's bytes.

Passes, each on a freshly reloaded instance (a restarted server, or a confirmed Ollama unload):
- calibration rounds: {fresh call; repeated calls; one different prompt; the measured prompt again},
  short answers: the labelled calls the prefill-time classes are fitted on;
- C cycles: {burn-in call of the measured prompt (excluded); P same-prompt calls ("pure"); one
  different-prompt call (excluded); P same-prompt calls ("contaminated")};
- the two pinned regimes: always-fresh (one call per reloaded instance) and steady-state (one
  instance that only ever sees the measured prompt).
Every call is one record; results come from the records only (kit.protocols.pinning.results).

A call is one greedy chat turn. Where the engine renders prompts with the model's own template
(llama-server: `/apply-template`), the rendered prompt goes to its prompt endpoint, so its per-request
telemetry (cached tokens, prompt ms) comes with every answer; chat engines (Ollama, OpenAI-compatible)
take the messages and apply the template themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, cast

from pydantic import Field

from kit.protocols.pinning import results as pinning_results
from kit.record.cache_state import Calibration, StateLabel, classify, from_telemetry
from kit.engines.base import Completion, CompletionRequest, Engine, Message, PromptTools, require
from kit.core.events import PassSummary, PinningCall, SessionEnded, SessionStarted
from kit.record.manifest import now
from kit.core.paths import RunPaths
from kit.protocols import bounds as b
from kit.launch.provider import EngineSession
from kit.protocols.kind import Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import ProtocolBase, Strict
from kit.protocols.pinning.table import PinningResults
from kit.record.model import PinningRecord
from kit.record.files import RecordWriter, read_records

SYSTEM_PROMPT = (
    "You are a careful technical writer for an engineering team. You answer in plain prose, without "
    "lists, headings or code. You explain the mechanism first and the consequence second, you prefer "
    "short concrete sentences, and you never invent citations, numbers or product names. When a question "
    "has a subtle point, you name it explicitly before you explain it. Keep every answer self-contained "
    "so that a reader who sees only your answer understands it."
)
MEASURED_PROMPT = (
    "Explain why floating-point addition is not associative, and what that means for getting the same "
    "result twice when a sum is computed in parallel on different hardware."
)
OTHER_PROMPT = "Classify the sentiment of this review as positive, negative or neutral: 'The battery lasts all day.'"


class Prompts(Strict):
    system: str = SYSTEM_PROMPT
    measured: str = MEASURED_PROMPT
    other: str = OTHER_PROMPT


class Calibrate(Strict):
    rounds: int = b.count(1, b.ROUNDS_MAX, 3, description="fresh instances used for labelled calibration calls")
    repeats: int = b.count(1, b.ROUNDS_MAX, 2, description="repeated same-prompt calls per round")
    max_tokens: int = b.count(1, b.CTX_MAX, 1, description="answer length of calibration calls (only prefill matters)")


class Regimes(Strict):
    always_fresh: int = b.count(0, b.CALLS_MAX, 5, description="calls, each on a freshly reloaded instance")
    steady: int = b.count(0, b.CALLS_MAX, 10, description="calls on one instance that sees only the measured prompt")


class PinningProtocol(ProtocolBase):
    """The cache-instance protocol with its calibration and the two pinned regimes."""

    protocol: Literal["pinning"]
    prompts: Prompts = Prompts()
    cycles: int = b.count(1, b.CALLS_MAX, 5)
    per_arm: int = b.count(1, b.CALLS_MAX, 10, description="P: same-prompt calls in each arm of a cycle")
    max_tokens: b.MaxTokens = 256
    other_max_tokens: b.MaxTokens = 16
    top_logprobs: int = b.count(0, b.TOP_LOGPROBS_MAX, 1)
    reuse_tolerance: int = b.count(0, b.CTX_MAX, 8, description="prompt tokens a full-KV reuse may re-evaluate")
    gate_on: Literal["states", "prefill_times"] = Field(
        "states", description="arms must separate by cache state (with KV lineage), or by raw prefill time as in "
                              "seed 002 (stricter: fails where only the first call after the interloper is slow)")
    calibration: Calibrate = Calibrate()
    regimes: Regimes = Regimes()


@dataclass(frozen=True)
class Call:
    """One planned call: its role, whether it sends the measured prompt, and its index within its arm."""

    role: str
    measured: bool
    arm_index: int = 0


@dataclass(frozen=True)
class PassPlan:
    pass_id: str
    phase: str  # calibration, cycle, always_fresh, steady
    calls: tuple[Call, ...]


def schedule(protocol: PinningProtocol) -> list[PassPlan]:
    """Every pass of a run in order, each starting from a reloaded instance."""
    cal = protocol.calibration
    calibration_calls = (Call("cal_fresh", True), *(Call("cal_repeat", True, i) for i in range(1, cal.repeats + 1)),
                         Call("cal_other", False), Call("cal_after_other", True))
    passes = [PassPlan(f"cal{r}", "calibration", calibration_calls) for r in range(1, cal.rounds + 1)]
    P = protocol.per_arm
    cycle = (Call("burn_in", True), *(Call("pure", True, i) for i in range(1, P + 1)), Call("other", False),
             *(Call("contaminated", True, i) for i in range(1, P + 1)))
    passes += [PassPlan(f"c{c}", "cycle", cycle) for c in range(1, protocol.cycles + 1)]
    passes += [PassPlan(f"fresh{i}", "always_fresh", (Call("fresh", True, i),))
               for i in range(1, protocol.regimes.always_fresh + 1)]
    if protocol.regimes.steady:
        passes.append(PassPlan("steady", "steady", (Call("steady_burn_in", True),
                                                    *(Call("steady", True, i) for i in range(1, protocol.regimes.steady + 1)))))
    return passes


def prepare(protocol: PinningProtocol, inputs: RunInputs) -> Prepared:
    passes = schedule(protocol)
    plan = {"passes": len(passes), "cycles": protocol.cycles, "per_arm": protocol.per_arm,
            "calibration_rounds": protocol.calibration.rounds, "always_fresh": protocol.regimes.always_fresh,
            "steady": protocol.regimes.steady, "requests": sum(len(p.calls) for p in passes),
            "max_tokens": protocol.max_tokens}
    workload = {"source": "pinning prompts", "prompts": protocol.prompts.model_dump()}
    return Prepared(plan=plan, workload=workload, payload=passes, seeds={"request_seed": protocol.seed})


def results(run_dir: Path) -> PinningResults:
    return pinning_results.write(run_dir)


def _messages(protocol: PinningProtocol, measured: bool) -> list[Message]:
    user = protocol.prompts.measured if measured else protocol.prompts.other
    return [{"role": "system", "content": protocol.prompts.system}, {"role": "user", "content": user}]


def chat_request(engine: Engine, messages: list[Message], *, max_tokens: int, seed: int,
                 top_logprobs: int) -> CompletionRequest:
    """One greedy chat turn as the request `engine` takes: the prompt its own template renders where it
    declares `prompt_rendering`, else the messages themselves."""
    if engine.capabilities.prompt_rendering:
        prompt = cast(PromptTools, engine).apply_template(messages)  # declared: the engine has its prompt tools
        return CompletionRequest(prompt, max_tokens=max_tokens, seed=seed, top_logprobs=max(1, top_logprobs))
    require(engine, "chat_messages", "the cache-instance protocol")
    return CompletionRequest(messages=tuple(messages), max_tokens=max_tokens, seed=seed, top_logprobs=top_logprobs)


class Reload(TypedDict, total=False):
    """A pass's `reload` in the manifest: what the provider did before it and whether that is confirmed (a
    provider's own entry, `launch["reload"]`, is kept whole: kit.engines.cache_reset, kit.launch.instance)."""

    method: str
    confirmed: bool | None  # None: to be confirmed by the pass's first call (`confirm_by_telemetry`)
    confirm_by_telemetry: bool
    second_cache: str  # the cache a reset leaves in place, where one is known
    detail: str


def reload_status(ctx: RunContext, live: EngineSession) -> Reload:
    """What the provider did before this pass, and whether it is confirmed."""
    launch = live.launch
    if "reload" in launch:
        return cast(Reload, dict(launch["reload"]))
    if ctx.provider.fresh_servers:
        return {"method": "server restart", "confirmed": True,
                "detail": f"new server process {launch.get('pid')} started and answered /health"}
    return {"method": "none", "confirmed": False,
            "detail": "the kit did not start this engine and cannot reload it; the instance's history is unknown"}


def calibration_from_run(run_dir: Path, tolerance: int) -> Calibration | None:
    """Fit the timing classes on the calibration records written so far (None if none has a prefill time)."""
    _, passes, records = pinning_results.load(run_dir)
    return pinning_results.fit_calibration(passes, records, tolerance)


def run(protocol: PinningProtocol, prepared: Prepared, ctx: RunContext) -> None:
    """Run every pass in order; a pass whose reload is not confirmed is VOID (its records are kept)."""
    calibration: Calibration | None = None
    fitted = False
    for plan in prepared.payload:
        if plan.phase != "calibration" and not fitted:
            calibration = calibration_from_run(ctx.run_dir, protocol.reuse_tolerance)
            ctx.manifest.update(calibration=calibration.to_json() if calibration else None)
            fitted = True
        if plan.pass_id not in ctx.done:  # a resumed run keeps the passes it finished
            _pass(protocol, ctx, plan, calibration, len(prepared.payload))


class Label(TypedDict):
    """A state label as a record keeps it (kit.record.cache_state.StateLabel)."""

    state: str | None
    confidence: float | None
    source: str
    detail: str


class CallState(TypedDict):
    """A pinning record's `state`: the label chosen (telemetry's, else timing's) and both labels."""

    state: str | None
    confidence: float | None
    source: str
    telemetry: Label | None
    timing: Label | None


def _kept(label: StateLabel | None) -> Label | None:
    return None if label is None else {"state": label.state, "confidence": label.confidence, "source": label.source,
                                       "detail": label.detail}


def _label(protocol: PinningProtocol, completion: Completion, calibration: Calibration | None) -> CallState:
    telemetry = from_telemetry(completion.cached_tokens, completion.prompt_tokens, protocol.reuse_tolerance)
    timing = classify(calibration, completion.prefill_ms) if calibration else None
    chosen = telemetry or timing
    return {"state": chosen.state if chosen else None, "confidence": chosen.confidence if chosen else None,
            "source": chosen.source if chosen else "none", "telemetry": _kept(telemetry), "timing": _kept(timing)}


def _pass(protocol: PinningProtocol, ctx: RunContext, plan: PassPlan, calibration: Calibration | None,
          total: int) -> None:
    file = RunPaths.records_name(plan.pass_id)
    index = len(ctx.manifest.run.passes) + 1
    ctx.manifest.set_pass(plan.pass_id, phase=plan.phase, file=file, status="running", started=now(),
                          fresh_server=ctx.provider.fresh_servers)
    outputs: list[str] = []
    stamp = ctx.stamp(plan.pass_id, "pinning")
    with ctx.provider.session(plan.pass_id, RunPaths(ctx.run_dir).logs) as live, \
            RecordWriter(ctx.run_dir / file, **stamp) as writer:
        reload = reload_status(ctx, live)
        ctx.manifest.set_pass(plan.pass_id, launch=live.launch, reload=reload)
        ctx.emit(SessionStarted(plan.pass_id, index, total, live.launch))
        for call in plan.calls:
            short = plan.phase == "calibration"
            max_tokens = (protocol.calibration.max_tokens if short else
                          protocol.max_tokens if call.measured else protocol.other_max_tokens)
            ctx.checkpoint()
            with live.engine_calls(f"pass {plan.pass_id} ({call.role})"):
                request = chat_request(live.engine, _messages(protocol, call.measured), max_tokens=max_tokens,
                                       seed=protocol.seed, top_logprobs=protocol.top_logprobs)
                completion = live.engine.complete(request)
            state = _label(protocol, completion, calibration)
            record = writer.answered(PinningRecord, completion, unit="measured" if call.measured else "other",
                                     phase=plan.phase, role=call.role, arm_index=call.arm_index,
                                     measured=call.measured, state=state)
            digest = record.output_sha256
            if digest is None:  # answered() sets it from the completion's text, always
                raise ValueError(f"pass {plan.pass_id}: a pinning record without its output_sha256")
            if call.measured:
                outputs.append(digest)
            ctx.emit(PinningCall(plan.pass_id, plan.phase, call.role, call.arm_index, state["state"],
                                 state["confidence"], completion.prefill_ms, digest if call.measured else None))
        status, reason = _pass_status(reload, writer, ctx.run_dir / file)
    ctx.manifest.set_pass(plan.pass_id, status=status, reason=reason, reload=reload, records=writer.count,
                          ended=now())
    ctx.emit(PassSummary(plan.pass_id, plan.phase, status, bool(reload.get("confirmed")), tuple(outputs)))
    ctx.emit(SessionEnded(plan.pass_id, status, reason))


def _pass_status(reload: Reload, writer: RecordWriter, path: Path) -> tuple[str, str | None]:
    """OK when the reload before the pass is confirmed; a reset that only telemetry can confirm is confirmed
    when the pass's first request reused nothing. Cached tokens on that request despite an accepted reset mean
    a cache the reset does not reach served it: the reason names that cache (`second_cache`) where one is known."""
    if reload.get("confirm_by_telemetry"):
        first = read_records(path).records[0]["completion"] if writer.count else {}
        cached = first.get("cached_tokens")
        reload["confirmed"] = cached == 0
        if cached is None:
            return "VOID", ("the cache reset was not confirmed: the first request did not say how many prompt "
                            "tokens it reused")
        if not reload["confirmed"]:
            survivor = f"; a second cache survived the reset: {reload['second_cache']}" \
                if reload.get("second_cache") else ""
            return "VOID", f"the cache reset was not confirmed: the first request showed {cached!r} cached tokens, " \
                           f"not 0{survivor}"
        return "OK", None
    if not reload.get("confirmed"):
        return "VOID", f"reload not confirmed ({reload.get('method')}): {reload.get('detail')}"
    return "OK", None


KIND = Kind(
    results_model=PinningResults,
    name="pinning", model=PinningProtocol, prepare=prepare, run=run, results=results, table="pinning",
    render=Lazy("kit.protocols.pinning.view:pinning_verdict"),
    launcher=Launcher(
        measures="state pinning: the three-state check (cold / hit / checkpoint)",
        needs="an engine that reports cache state", estimate=None,
        size=Number("Items", None, 80)),  # shown by the setup form as before; pinning has no one size yet
    analysis=None, record=PinningRecord,
    headline=Lazy("kit.protocols.pinning.view:headline"))
