"""One pass of the grid: every episode driven through the agent loop, each request recorded and
checked against the cache state its arm must show, each episode scored; the pass ends OK or VOID."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from kit.divergence import completion_emitted
from kit.engines.base import Completion, CompletionRequest, require
from kit.events import EpisodeDone, RequestDone, SessionEnded
from kit.manifest import now
from kit.protocols import bounds as b
from kit.protocols.procedure import RunContext
from kit.protocols.spec import Strict
from kit.record import BfclRecord, EpisodeSummary, Gate
from kit.records import RecordWriter
from kit.workloads.bfcl import run_episode, score_episode

SENTINEL_PROMPT = "Sentinel cache reset. " * 32


class GridGates(Strict):
    off_max_cached_tokens: b.Tokens = 0  # every cache-off request must reuse nothing
    # share of cache-on requests after an episode's first that must hit
    on_min_hit_share: float = Field(0.95, strict=True, ge=0, le=1)
    # every episode's first request must reuse nothing (sentinel isolation)
    episode_start_cold: bool = Field(False, strict=True)


def gate(arm: str, request_index: int, cached: int | None, gates: GridGates) -> tuple[bool, str | None]:
    """Does a request show the cache state its arm needs? Under sentinel isolation an episode's first
    request must reuse nothing either."""
    if cached is None:
        return False, "the engine did not report cached tokens"
    if arm == "off" and cached > gates.off_max_cached_tokens:
        return False, f"{cached} cached tokens on a cache-off request"
    if arm == "on" and request_index > 0 and cached == 0:
        return False, "no cache hit on a cache-on request after the episode's first"
    if gates.episode_start_cold and request_index == 0 and cached > 0:
        return False, f"{cached} cached tokens on an episode's first request (its cache state was not isolated)"
    return True, None


@dataclass
class PassTally:
    """Gate counts of one pass, and the verdict they give."""

    arm: str
    requests: int = 0
    violations: int = 0  # hard violations: any one voids the pass
    on_checked: int = 0
    on_hits: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, request_index: int, ok: bool, why: str | None, where: str) -> None:
        if self.arm == "on" and request_index > 0 and (ok or "no cache hit" in (why or "")):
            self.on_checked += 1
            self.on_hits += ok
        elif not ok:
            self.violations += 1
        if why and not self.first:
            self.first.append(f"{where}: {why}")

    def verdict(self, gates: GridGates) -> tuple[str, str | None]:
        if self.violations:
            return "VOID", f"{self.violations} requests violated the cache-state gate (first: {self.first[0]})"
        if self.on_checked and self.on_hits < gates.on_min_hit_share * self.on_checked:
            return "VOID", (f"only {self.on_hits} of {self.on_checked} cache-on requests after an episode's first "
                            f"hit the cache (needs {gates.on_min_hit_share:.0%})")
        return "OK", None


def run_pass(protocol, ctx: RunContext, live, worker, episodes, render, plan, on_episode) -> None:
    """Drive every episode of one pass (`plan`: pass_id, arm, repeat, order). `on_episode(pass_id,
    unit, [(prompt sha, tokens)])` gets each finished episode (for live comparisons)."""
    pass_id, arm = plan.pass_id, plan.arm
    file, episodes_file = f"records/{pass_id}.jsonl", f"records/{pass_id}.episodes.jsonl"
    ctx.manifest.set_pass(pass_id, arm=arm, repeat=plan.repeat, order_index=plan.order, file=file,
                          episodes_file=episodes_file, status="running", started=now(),
                          order=[e.id for e in episodes], launch=live.launch)
    tally = PassTally(arm)
    stamp = {"run_id": ctx.manifest.data["run_id"], "pass_id": pass_id, "protocol": "grid"}

    def record(writer: RecordWriter, unit: str, completion: Completion, request_index: int,
               action: str, **details: Any) -> tuple[str, bool]:
        ok, why = gate(arm, request_index, completion.cached_tokens, protocol.gates)
        if action != "sentinel":
            tally.add(request_index, ok, why, f"{unit} request {request_index}")
        written = writer.answered(BfclRecord, completion, unit=unit, step=request_index, gate=Gate(ok, why),
                                  arm=arm, action=action, **details)
        tally.requests += 1
        ctx.emit(RequestDone(pass_id, unit, arm, tally.requests, completion.cached_tokens, completion.prefill_ms, ok))
        return written.prompt_sha256, ok

    tokenizer = require(live.engine, "tokenization", "the BFCL workload (prompt tokens set each request's limit)")
    with RecordWriter(ctx.run_dir / file, **stamp) as writer, \
            RecordWriter(ctx.run_dir / episodes_file) as episode_writer:
        for done, episode in enumerate(episodes, start=1):
            ctx.checkpoint()
            if protocol.sentinel:
                sentinel = CompletionRequest(prompt=SENTINEL_PROMPT, max_tokens=1, cache_prompt=True,
                                             top_logprobs=protocol.top_logprobs, seed=protocol.seed)
                with live.engine_calls(f"pass {pass_id} (episode {episode.id}, sentinel)"):
                    answered = live.engine.complete(sentinel)
                record(writer, episode.id, answered, -1, "sentinel")
            walked: list = []

            def on_request(info, request: CompletionRequest, completion: Completion) -> None:
                sha, _ = record(writer, episode.id, completion, info.request_index, info.action,
                                turn=info.turn_index, turn_step=info.step_index, calls=info.calls,
                                decode_error=info.decode_error, tool_results=list(info.tool_results),
                                tool_refused=[r.as_json() for r in info.tool_refused],
                                prompt_tokens_counted=info.prompt_tokens)
                walked.append((sha, completion_emitted(completion)))
                ctx.checkpoint()  # the record is written; stop before the episode's next request

            clock = time.monotonic()
            with live.engine_calls(f"pass {pass_id} (episode {episode.id})"):
                result = run_episode(live.engine, worker, episode, render, protocol.engine.ctx_size, pass_id,
                                     count_tokens=lambda text: len(tokenizer.tokenize(text)),
                                     on_request=on_request, seed=protocol.seed, top_logprobs=protocol.top_logprobs,
                                     cache_prompt=arm == "on", max_tokens_cap=protocol.workload.max_tokens_cap,
                                     max_requests=protocol.workload.max_requests_per_episode)
            score = score_episode(worker, result)
            episode_writer.write(EpisodeSummary(**stamp, arm=arm, unit=episode.id, order_index=done - 1,
                                                requests=result.n_requests, sentinels=int(protocol.sentinel),
                                                outcome=result.outcome,
                                                wall_seconds=round(time.monotonic() - clock, 3), score=score.__dict__))
            ctx.emit(EpisodeDone(pass_id, episode.id, done, len(episodes), result.n_requests, result.outcome,
                                 score.valid))
            on_episode(pass_id, episode.id, walked)
    status, reason = tally.verdict(protocol.gates)
    ctx.manifest.set_pass(pass_id, status=status, reason=reason, records=tally.requests, ended=now())
    ctx.emit(SessionEnded(pass_id, status, reason))
