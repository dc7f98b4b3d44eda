"""The restored-state control: each item served cold, warm, cold, warm in independent sessions."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.divergence import first_difference
from kit.engines.base import Completion, CompletionRequest
from kit.engines.llamacpp import request_body
from kit.errors import EngineError
from kit.events import Emit, ItemVerdict, RequestDone, SessionEnded, SessionStarted
from kit.launch.provider import EngineProvider
from kit.manifest import Manifest, now
from kit.protocols.spec import Gates, Phase, ResetProtocol
from kit.records import RecordWriter, prompt_sha256
from kit.workloads.items import Item


@dataclass
class RunContext:
    """What a procedure needs from the runner: where to write, which engine, what to serve."""

    run_dir: Path
    manifest: Manifest
    provider: EngineProvider
    items: list[Item]
    system_prompt: str
    emit: Emit


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


def completion_json(completion: Completion) -> dict[str, Any]:
    data = completion.to_json()
    data.pop("raw", None)
    return data


def _verdict(protocol: ResetProtocol, outputs: list[list[int]]) -> dict[str, Any]:
    cold = [o for o, p in zip(outputs, protocol.phases) if p.expect == "cold"]
    warm = [o for o, p in zip(outputs, protocol.phases) if p.expect == "warm"]
    return {"recompute_reproduces": cold[0] == cold[1], "hit_reproduces": warm[0] == warm[1],
            "paths_differ": cold[0] != warm[0], "first_difference": first_difference(cold[0], warm[0])}


def run(protocol: ResetProtocol, ctx: RunContext) -> None:
    """Run every session; each ends OK or VOID in the manifest. Raises EngineError if an engine dies."""
    for index in range(1, protocol.sessions + 1):
        _session(protocol, ctx, index)


def _session(protocol: ResetProtocol, ctx: RunContext, index: int) -> None:
    pass_id = f"s{index}"
    order = session_order(ctx.items, protocol.order_seed, index)
    file = f"records/{pass_id}.jsonl"
    ctx.manifest.set_pass(pass_id, session=index, file=file, status="running", started=now(),
                          order=[item.id for item in order], fresh_server=ctx.provider.fresh_servers)
    gates = protocol.gates
    requests = violations = 0
    first_violation: str | None = None
    status, reason = "OK", None
    with ctx.provider.session(pass_id, ctx.run_dir / "logs") as live, RecordWriter(ctx.run_dir / file) as writer:
        ctx.manifest.set_pass(pass_id, launch=live.launch)
        ctx.emit(SessionStarted(pass_id, index, protocol.sessions, live.launch))
        for done, item in enumerate(order, start=1):
            prompt = live.engine.apply_template([{"role": "system", "content": ctx.system_prompt},
                                                 {"role": "user", "content": item.question}])
            outputs = []
            for phase_index, phase in enumerate(protocol.phases):
                request = CompletionRequest(prompt=prompt, max_tokens=protocol.max_tokens,
                                            cache_prompt=phase.cache_prompt, top_logprobs=protocol.top_logprobs,
                                            seed=protocol.seed)
                started, clock = now(), time.monotonic()
                try:
                    completion = live.engine.complete(request)
                except EngineError as exc:
                    if not live.alive():
                        raise EngineError(f"the engine died during session {pass_id} (item {item.id}, {phase.name})",
                                          f"see {live.server.log_path}; records so far are kept") from exc
                    raise
                ok, why = check_gate(phase, completion.cached_tokens, gates)
                writer.write({
                    "run_id": ctx.manifest.data["run_id"], "pass_id": pass_id, "protocol": "reset",
                    "unit": item.id, "step": 0, "phase": phase.name, "phase_index": phase_index,
                    "expect": phase.expect, "seq": requests, "prompt_sha256": prompt_sha256(prompt),
                    "request": {"endpoint": "/completion", "body": request_body(request)},
                    "completion": completion_json(completion), "raw": completion.raw,
                    "started": started, "wall_seconds": round(time.monotonic() - clock, 4),
                    "gate": {"ok": ok, "reason": why}, "error": None,
                })
                requests += 1
                ctx.emit(RequestDone(pass_id, item.id, phase.name, requests, completion.cached_tokens,
                                     completion.prefill_ms, ok))
                if not ok:
                    violations += 1
                    first_violation = first_violation or f"item {item.id}, {why}"
                outputs.append(list(completion.token_ids or ()))
            ctx.emit(ItemVerdict(pass_id, item.id, done, len(order), **_verdict(protocol, outputs)))
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
