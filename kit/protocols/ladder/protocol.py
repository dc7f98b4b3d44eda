"""The determinism ladder (seed 001's hierarchy of invariants): how far up an engine stays invariant, and
what each fix of the cache-hit rung costs.

One request set (the kit's own arithmetic items, the engine's chat template), one model, greedy, one seed.
Every pass runs on a fresh server that changes one setting of the baseline's (kit.protocols.ladder.plan):
L0 the identical request repeated, L1 K slots with neighbours, L2 cache hit vs recompute (the hit proven by
the engine's cached-token count, else VOID), L3 the prefill chunk (--ubatch-size) on a miss and on hits
whose cached prefix does or does not end on a chunk boundary, L4 threads, L5 weight formats made here with
gguf, L6 the other CPU backend where it runs. What cannot run here is listed with the reason.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kit.core.errors import ConfigError
from kit.core.events import Notice, RequestDone, SessionEnded, SessionStarted
from kit.core.paths import RunPaths
from kit.engines.base import CompletionRequest, require
from kit.launch.cpu import cpu_backend
from kit.launch.llamacpp import fixes
from kit.launch.provider import EngineProvider, EngineSession, NativeProvider
from kit.protocols import bounds as b
from kit.protocols.kind import Analysis, CpuEstimate, Kind, Launcher, Lazy, Number
from kit.protocols.ladder import plan as ladder_plan
from kit.protocols.ladder import results as ladder_results
from kit.protocols.ladder.aligned import aligned_prefix
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import ProtocolBase, Strict
from kit.protocols.ladder.table import LadderResults
from kit.record.files import RecordWriter
from kit.record.manifest import now
from kit.record.model import Gate, LadderRecord
from kit.workloads.items import MATH_SYSTEM_PROMPT, Item, arithmetic_items

FORMATS = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16")


class LadderWorkload(Strict):
    items: int = b.count(2, 1000, 8)  # the kit's own generated arithmetic problems


class LadderProtocol(ProtocolBase):
    """The ladder: trials for L0, K slots for L1, the chunk for L3, threads for L4, formats for L5."""

    protocol: Literal["ladder"]
    workload: LadderWorkload = LadderWorkload()
    order_seed: b.Seed = 20261007
    max_tokens: b.MaxTokens = 48
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 1)
    trials: int = b.count(3, 100, 3)  # L0: the identical request N >= 3 times; L2: hits per prompt
    neighbours: int = b.count(2, 64, 4)  # L1: K, the slots of its server (each request beside K-1 others)
    chunk: int = b.count(1, b.CTX_MAX, 16)  # L3: --ubatch-size = --batch-size, and the aligned cache's boundary
    threads: int = b.count(1, 1024, 1)  # L4: the other thread count (the baseline's is the run's --threads)
    formats: tuple[Literal[FORMATS], ...] = Field(("F16", "Q8_0", "Q4_0"), max_length=len(FORMATS))  # type: ignore[valid-type]


def prepare(protocol: LadderProtocol, inputs: RunInputs) -> Prepared:
    items = arithmetic_items(protocol.workload.items, protocol.order_seed)
    if len(items) < protocol.neighbours:
        raise ConfigError(f"{len(items)} items cannot fill L1's groups of {protocol.neighbours} (neighbours)",
                          "give at least as many items as neighbours (--items)")
    plan = {"items": len(items), "trials": protocol.trials, "neighbours": protocol.neighbours,
            "chunk": protocol.chunk, "threads": protocol.threads, "formats": list(protocol.formats),
            "max_tokens": protocol.max_tokens, "server": "fresh server per pass"}
    return Prepared(plan=plan, workload={"source": "arithmetic", "seed": protocol.order_seed, "items": len(items)},
                    payload=items, seeds={"request_seed": protocol.seed, "order_seed": protocol.order_seed})


def results(run_dir: Path) -> LadderResults:
    return ladder_results.write(run_dir)


def design(protocol: LadderProtocol, provider: NativeProvider) -> ladder_plan.Design:
    """The design on this run's servers: its thread count and the CPU backends that run here."""
    threads = provider.spec.threads
    other_threads = protocol.threads if protocol.threads != threads else (2 if threads == 1 else 1)
    cpu = provider.cpu
    other, reason = None, None
    if cpu is None:
        reason = ("the run's server is one binary (--server-bin, or a llama.cpp build by --engine-build): the kit "
                  "knows one backend of it")
    else:
        other = "portable" if cpu.name == "wheel" else "wheel"
        lacking = cpu_backend.missing(other, cpu_backend.cpu_flags())
        if lacking:
            whose = "wheel's" if other == "wheel" else other
            reason = f"this CPU lacks {', '.join(lacking)}, which the {whose} CPU backend uses (kit.launch.cpu.cpu_backend)"
            other = None
    return ladder_plan.Design(protocol.trials, protocol.neighbours, protocol.chunk, tuple(protocol.formats), threads,
                              other_threads, cpu.name if cpu else None, other, reason)


def _providers(protocol: LadderProtocol, ctx: RunContext,
               plans: list[ladder_plan.LadderPass]) -> dict[str, NativeProvider]:
    base: NativeProvider = ctx.provider  # type: ignore[assignment]
    formats = {}
    if protocol.formats:
        from kit.protocols.sweep import formats as weight_formats  # noqa: PLC0415 - gguf only when formats are made

        sources = {label: weight_formats.FormatSource(derive=label, of="F16" if label != "F16" and "F16" in
                                                      protocol.formats and list(protocol.formats).index("F16") <
                                                      list(protocol.formats).index(label) else None)
                   for label in protocol.formats}
        files = weight_formats.resolve(sources, base, say=lambda text: ctx.emit(Notice(text)))
        ctx.manifest.update(formats={label: entry for label, (_, entry) in files.items()})
        formats = {label: base.variant(model=model.path, details=weight_formats.engine_details(label, model))
                   for label, (model, _) in files.items()}
    providers = {}
    for p in plans:
        provider = formats[p.format] if p.format else base
        if p.backend:
            from kit.launch.llamacpp import embedded  # noqa: PLC0415

            found = embedded.locate(p.backend, say=lambda text: ctx.emit(Notice(text)))
            provider = provider.with_cpu(found.binary, found.env, found.backend)
        chunk = fixes.chunk(p.chunk).server_args if p.chunk else ()
        providers[p.pass_id] = provider.tuned(threads=p.threads, parallel=p.parallel, extra_args=chunk)
    return providers


def url_design(protocol: LadderProtocol, ctx: RunContext) -> ladder_plan.Design:
    """The design on a llama-server reached by --engine-url: the rungs that need no server of their own, on its
    slots (read from its /props)."""
    with ctx.provider.session("design", RunPaths(ctx.run_dir).logs) as live:
        slots = live.launch.get("total_slots")
    if not isinstance(slots, int):
        raise ConfigError("the server at --engine-url did not say how many slots it has (/props total_slots)",
                          "give the URL of a llama-server")
    return ladder_plan.Design(protocol.trials, protocol.neighbours, protocol.chunk, tuple(protocol.formats), 0, 0,
                              url_slots=slots)


def run(protocol: LadderProtocol, prepared: Prepared, ctx: RunContext) -> None:
    native = isinstance(ctx.provider, NativeProvider)
    if not native and not getattr(ctx.provider, "by_url", False):
        raise ConfigError("the ladder starts llama-servers with their own -t, -np and --ubatch-size, which only the "
                          "kit's native launcher sets", "run it with the embedded engine or --server-bin")
    shape = design(protocol, ctx.provider) if native else url_design(protocol, ctx)  # type: ignore[arg-type]
    plans = ladder_plan.passes(shape)
    ctx.manifest.update(ladder={"design": shape.__dict__ | {"formats": list(shape.formats)},
                                "rungs": [c.to_json() for c in ladder_plan.rungs(shape)],
                                "fixes": [c.to_json() for c in ladder_plan.fixes(shape)]})
    todo = [p for p in plans if p.pass_id not in ctx.done]
    providers = _providers(protocol, ctx, todo) if native else {p.pass_id: ctx.provider for p in todo}
    for index, p in enumerate(todo, start=1):
        _pass(protocol, ctx, prepared.payload, p, providers[p.pass_id], index, len(todo))


def _request(protocol: LadderProtocol, prompt: str, step: str) -> CompletionRequest:
    return CompletionRequest(prompt=prompt, max_tokens=1 if step == "prime" else protocol.max_tokens,
                             cache_prompt=step in ("hit", "aligned"), top_logprobs=protocol.top_logprobs,
                             seed=protocol.seed)


def gate(step: str, cached: int | None, boundary: int | None = None) -> Gate:
    """Did the engine's cached-token count show the state the step was sent for? Unknown never passes."""
    if cached is None:
        return Gate(False, f"{step}: the engine did not report cached tokens")
    if step == "hit" and cached < 1:
        return Gate(False, "hit: 0 cached tokens, so it was a recompute, not a hit")
    if step == "aligned" and cached != boundary:
        return Gate(False, f"aligned: {cached} cached tokens, the chunk boundary is {boundary}")
    if step not in ("hit", "aligned") and cached != 0:
        return Gate(False, f"{step}: {cached} cached tokens, a recompute reuses none")
    return Gate(True, None)


def _pass(protocol: LadderProtocol, ctx: RunContext, items: list[Item], p: ladder_plan.LadderPass,
          provider: EngineProvider,
          index: int, total: int) -> None:
    file = RunPaths.records_name(p.pass_id)
    ctx.manifest.set_pass(p.pass_id, file=file, status="running", started=now(), fresh_server=provider.fresh_servers,
                          steps=list(p.labels()), settings=p.settings())
    labels = list(p.labels())
    with provider.session(p.pass_id, RunPaths(ctx.run_dir).logs) as live, \
            RecordWriter(ctx.run_dir / file, **ctx.stamp(p.pass_id, "ladder")) as writer:
        ctx.manifest.set_pass(p.pass_id, launch=live.launch)
        ctx.emit(SessionStarted(p.pass_id, index, total, live.launch))
        template = require(live.engine, "prompt_rendering", "the ladder")
        prompts = {}
        for item in items:
            with live.engine_calls(f"pass {p.pass_id} (item {item.id})"):
                prompt = prompts[item.id] = template.apply_template(
                    [{"role": "system", "content": MATH_SYSTEM_PROMPT}, {"role": "user", "content": item.question}])
            full = primed = None
            for step_index, step in enumerate(p.steps):
                ctx.checkpoint()
                text, boundary = prompt, None
                if step == "prime":
                    found = aligned_prefix(live.engine, prompt, full, p.chunk or protocol.chunk)
                    if found is None:
                        ctx.emit(Notice(f"{p.pass_id} {item.id}: no chunk boundary to prime; its aligned hit is not sent"))
                        break
                    text, boundary = found
                elif step == "aligned":
                    boundary = primed
                with live.engine_calls(f"pass {p.pass_id} (item {item.id}, {step})"):
                    completion = live.engine.complete(_request(protocol, text, step))
                if step == "miss" and full is None:
                    full = completion.prompt_tokens
                if step == "prime":
                    primed = boundary
                checked = gate(step, completion.cached_tokens, boundary)
                trial = p.steps[:step_index].count(step)
                writer.answered(LadderRecord, completion, unit=item.id, step=step_index, gate=checked, label=step,
                                trial=trial, boundary=boundary)
                ctx.emit(RequestDone(p.pass_id, item.id, step, writer.count, completion.cached_tokens,
                                     completion.prefill_ms, checked.ok))
        if p.batched:
            _batched(protocol, ctx, live, writer, items, prompts, labels, p)
    ctx.manifest.set_pass(p.pass_id, status="OK", records=writer.count, ended=now())
    ctx.emit(SessionEnded(p.pass_id, "OK", None))


def groups(units: list[str], size: int) -> list[list[tuple[str, bool]]]:
    """The units in groups of `size` sent at once: (unit, own) where `own` is False for a unit sent only to
    fill the last group (a neighbour, taken from the start)."""
    found = []
    for start in range(0, len(units), size):
        group = [(unit, True) for unit in units[start:start + size]]
        group += [(unit, False) for unit in units[:size - len(group)]]
        found.append(group)
    return found


def _batched(protocol: LadderProtocol, ctx: RunContext, live: EngineSession, writer: RecordWriter, items: list[Item],
             prompts: dict[str, str], labels: list[str], p: ladder_plan.LadderPass) -> None:
    """Each group of K prompts sent at once (K slots: continuous batching), reuse off."""
    with ThreadPoolExecutor(max_workers=protocol.neighbours) as pool:
        for number, group in enumerate(groups([item.id for item in items], protocol.neighbours)):
            ctx.checkpoint()
            with live.engine_calls(f"pass {p.pass_id} (batch of {', '.join(unit for unit, _ in group)})"):
                answers = list(pool.map(lambda unit: live.engine.complete(_request(protocol, prompts[unit], "miss")),
                                        [unit for unit, _ in group]))
            for (unit, own), completion in zip(group, answers):
                step = "batched" if own else "neighbour"
                checked = gate(step, completion.cached_tokens)
                writer.answered(LadderRecord, completion, unit=unit, step=labels.index(step), gate=checked, label=step,
                                trial=0 if own else number)
                ctx.emit(RequestDone(p.pass_id, unit, step, writer.count, completion.cached_tokens,
                                     completion.prefill_ms, checked.ok))


def estimate_on_cpu(data: dict[str, Any]) -> CpuEstimate:
    """The launcher's rough duration on the embedded CPU engine (135M model, two cores)."""
    items = (data.get("workload") or {}).get("items", 8)
    trials = data.get("trials", 3)
    formats = len(data.get("formats") or ("F16", "Q8_0", "Q4_0"))
    requests = items * (2 * trials + 1 + 3 + 4 + 2 + formats + 1)  # base, control, batch, chunk, threads, formats
    servers = 5 + formats
    seconds = servers * 6 + requests * (0.3 + data.get("max_tokens", 48) / 30)  # measured: ladder-cpu, 7.4 min
    return CpuEstimate(f"{requests} requests on {servers} servers", seconds)


KIND = Kind(
    results_model=LadderResults,
    name="ladder", model=LadderProtocol, prepare=prepare, run=run, results=results, table="ladder",
    render=Lazy("kit.protocols.ladder.view:ladder_table"),
    launcher=Launcher(
        measures="the determinism ladder: L0 repeat, L1 batching, L2 cache hit vs miss, L3 chunk, L4 threads, "
                 "L5 formats, L6 backend; and what closes L2 at what cost",
        needs="the kit's own llama-server (embedded or --server-bin); by --engine-url a llama-server runs the rungs "
              "that need no server of their own (L0, L2, L1 with enough slots)",
        estimate=estimate_on_cpu, size=Number("Items", "workload.items", 8, high=1000),
        repeats=Number("Trials", "trials", 3, high=100, placeholder="L0 repeats, L2 hits per prompt"),
        max_tokens=Number("Max tokens", "max_tokens", 48, high=4096, placeholder="per answer"),
        started_engine_only=False),
    analysis=Analysis("ladder", table=Lazy("kit.protocols.ladder.results:ladder_table")), record=LadderRecord,
    note=Lazy("kit.protocols.ladder.view:ladder_note"), headline=Lazy("kit.protocols.ladder.view:headline"),
    plot_rows=Lazy("kit.protocols.ladder.view:plot_rows"))
