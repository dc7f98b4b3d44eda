"""The grid: BFCL multi-turn episodes served with prefix caching on and off, each arm twice.

Passes run in the protocol's order on one server (the paper's llama.cpp grid: on, off, on, off) or
on a fresh server each. Every request becomes a record; every episode gets an episode record with
BFCL's verdict. As soon as an episode exists in both passes of a comparison, its verdict is emitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from kit.analysis import grid as grid_results
from kit.divergence import completion_emitted, episode_divergence
from kit.engines.base import Completion, CompletionRequest
from kit.engines.llamacpp import request_body
from kit.errors import ConfigError, EngineError
from kit.events import (
    EpisodeDone,
    EpisodeVerdict,
    PlanEstimate,
    RequestDone,
    SessionEnded,
    SessionStarted,
)
from kit.manifest import now
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.reset import completion_json
from kit.protocols.spec import ProtocolBase, Strict
from kit.records import RecordWriter, prompt_sha256
from kit.workloads.bfcl import (
    RENDERERS,
    BfclWorker,
    ensure_bfcl,
    run_episode,
    score_episode,
)
from kit.workloads.bfcl.agent import opening_messages

FAMILY_RENDERERS = {"chatml": "chatml", "qwen": "qwen25", "llama3": "llama31"}


def _arm(value: Any) -> Any:
    """YAML 1.1 reads a bare `on`/`off` as true/false: take those as the arm names they were meant as."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


Arm = Annotated[Literal["on", "off"], BeforeValidator(_arm)]


class BfclWorkload(Strict):
    episodes: int = Field(80, ge=1, le=200)
    ids: tuple[str, ...] | None = None  # explicit episode ids instead of the first N in ascending order
    prompt_format: Literal["auto", "chatml", "qwen25", "llama31"] = "auto"
    max_tokens_cap: int = Field(4096, ge=1)
    max_requests_per_episode: int | None = Field(None, ge=1)  # a smoke-test cap; the paper has none


class GridGates(Strict):
    off_max_cached_tokens: int = Field(0, ge=0)
    on_min_hit_share: float = Field(0.95, ge=0, le=1)


class GridProtocol(ProtocolBase):
    """Cache on/off × repeated passes over the BFCL multi-turn base episodes."""

    protocol: Literal["grid"]
    workload: BfclWorkload = BfclWorkload()
    passes: tuple[Arm, ...] = ("on", "off", "on", "off")
    server: Literal["shared", "per_pass"] = "shared"
    top_logprobs: int = Field(1, ge=1, le=20)
    gates: GridGates = GridGates()


MODEL = GridProtocol


def pass_ids(protocol: GridProtocol) -> list[tuple[str, str]]:
    """(pass id, arm) in run order: on1, off1, on2, off2 for the paper's order."""
    seen: dict[str, int] = {}
    ids = []
    for arm in protocol.passes:
        seen[arm] = seen.get(arm, 0) + 1
        ids.append((f"{arm}{seen[arm]}", arm))
    return ids


def comparisons(protocol: GridProtocol) -> dict[str, tuple[str, str]]:
    """The comparisons the passes allow: run-to-run within each arm, and the path comparison."""
    ids = {pid for pid, _ in pass_ids(protocol)}
    return {name: pair for name, pair in grid_results.COMPARISONS.items() if set(pair) <= ids}


def prepare(protocol: GridProtocol, inputs: RunInputs) -> Prepared:
    install = ensure_bfcl()
    workload = protocol.workload
    count = len(workload.ids) if workload.ids else workload.episodes
    plan = {"passes": [pid for pid, _ in pass_ids(protocol)], "episodes": count, "server": protocol.server,
            "comparisons": list(comparisons(protocol)), "top_logprobs": protocol.top_logprobs,
            "max_tokens_cap": workload.max_tokens_cap, "max_requests_per_episode": workload.max_requests_per_episode}
    description = {"source": "bfcl multi_turn_base", "episodes": count, "ids": list(workload.ids or ()),
                   **install.to_manifest()}
    return Prepared(plan=plan, workload=description, payload=install, seeds={"request_seed": protocol.seed})


def results(run_dir: Path) -> dict[str, Any]:
    return grid_results.write(run_dir)


def renderer_for(protocol: GridProtocol, engine_details: dict[str, Any]):
    name = protocol.workload.prompt_format
    if name == "auto":
        family = engine_details.get("model_family")
        if family not in FAMILY_RENDERERS:
            raise ConfigError("cannot tell which prompt format this model uses",
                              "set workload.prompt_format to chatml, qwen25 or llama31 in the protocol")
        name = FAMILY_RENDERERS[family]
    return name, RENDERERS[name]


class LiveComparer:
    """Keeps each finished episode's (prompt hash, tokens) per pass and emits a verdict per comparison."""

    def __init__(self, protocol: GridProtocol, ctx: RunContext):
        self.pairs = comparisons(protocol)
        self.ctx = ctx
        self.done: dict[str, dict[str, list]] = {}

    def episode_finished(self, pass_id: str, unit: str, requests: list) -> None:
        self.done.setdefault(pass_id, {})[unit] = requests
        for name, (a, b) in self.pairs.items():
            if pass_id in (a, b) and unit in self.done.get(a, {}) and unit in self.done.get(b, {}):
                verdict = episode_divergence(self.done[a][unit], self.done[b][unit])
                self.ctx.emit(EpisodeVerdict(name, (a, b), unit, verdict.diverged, verdict.kind,
                                             verdict.request_index, verdict.token_index))


def estimate(protocol: GridProtocol, engine, prompt: str, episodes: int) -> PlanEstimate:
    """Measure prefill and decode speed with one uncached request, then a rough duration: per episode
    ~2 requests per turn of ~3 turns, full prompts recomputed on the cache-off arm."""
    probe = engine.complete(CompletionRequest(prompt=prompt, max_tokens=16, cache_prompt=False))
    prefill = (probe.prefill_tokens or 1) / max(probe.prefill_ms or 1.0, 1.0) * 1000
    decode = (probe.decode_tokens or 1) / max(probe.decode_ms or 1.0, 1.0) * 1000
    tokens = probe.prompt_tokens or 0
    out = min(protocol.workload.max_tokens_cap, 128)
    per_request = {"off": tokens / prefill + out / decode, "on": 200 / prefill + out / decode}
    requests = min(6, protocol.workload.max_requests_per_episode or 6)
    seconds = sum(per_request[arm] * requests * episodes for arm in protocol.passes)
    return PlanEstimate(round(seconds, 1), round(prefill, 1), round(decode, 1),
                        f"{requests} requests per episode of ~{tokens} prompt tokens, ~{out} new tokens each")


def _sessions(protocol: GridProtocol, ctx: RunContext) -> Iterator[tuple[str, str, Any]]:
    """(pass id, arm, live engine session) in run order: one server for all passes, or one per pass."""
    logs = ctx.run_dir / "logs"
    if protocol.server == "shared":
        with ctx.provider.session("grid", logs) as live:
            ctx.emit(SessionStarted("grid", 1, 1, live.launch))
            for pass_id, arm in pass_ids(protocol):
                yield pass_id, arm, live
        return
    for index, (pass_id, arm) in enumerate(pass_ids(protocol), start=1):
        with ctx.provider.session(pass_id, logs) as live:
            ctx.emit(SessionStarted(pass_id, index, len(protocol.passes), live.launch))
            yield pass_id, arm, live


def run(protocol: GridProtocol, prepared: Prepared, ctx: RunContext) -> None:
    format_name, render = renderer_for(protocol, ctx.provider.describe())
    ctx.manifest.update(prompt_format=format_name)
    comparer = LiveComparer(protocol, ctx)
    workload = protocol.workload
    with BfclWorker(prepared.payload, log_path=ctx.run_dir / "logs" / "bfcl-worker.log") as worker, \
            closing(_sessions(protocol, ctx)) as sessions:
        episodes = (worker.load_episodes(ids=list(workload.ids)) if workload.ids
                    else worker.load_episodes(count=workload.episodes))
        for index, (pass_id, arm, live) in enumerate(sessions):
            if index == 0:
                first = render(opening_messages(worker.system_prompt(episodes[0].id), episodes[0].turns[0]))
                guess = estimate(protocol, live.engine, first, len(episodes))
                ctx.manifest.update(estimate=asdict(guess))
                ctx.emit(guess)
            _pass(protocol, ctx, live, worker, episodes, render, pass_id, arm, comparer)


def _pass(protocol, ctx, live, worker, episodes, render, pass_id: str, arm: str, comparer: LiveComparer) -> None:
    file = f"records/{pass_id}.jsonl"
    episodes_file = f"records/{pass_id}.episodes.jsonl"
    ctx.manifest.set_pass(pass_id, arm=arm, file=file, episodes_file=episodes_file, status="running",
                          started=now(), order=[e.id for e in episodes], launch=live.launch)
    gates = protocol.gates
    counts = {"requests": 0, "off_violations": 0, "on_checked": 0, "on_hits": 0}
    first_violation: list[str] = []
    with RecordWriter(ctx.run_dir / file) as writer, RecordWriter(ctx.run_dir / episodes_file) as episode_writer:
        for done, episode in enumerate(episodes, start=1):
            ctx.checkpoint()
            requests: list = []

            def on_request(info, request: CompletionRequest, completion: Completion) -> None:
                ok, why = _gate(arm, info.request_index, completion.cached_tokens, gates)
                if arm == "off" and not ok:
                    counts["off_violations"] += 1
                if arm == "on" and info.request_index > 0:
                    counts["on_checked"] += 1
                    counts["on_hits"] += ok
                if why and not first_violation:
                    first_violation.append(f"{episode.id} request {info.request_index}: {why}")
                sha = prompt_sha256(request.prompt)
                writer.write({
                    "run_id": ctx.manifest.data["run_id"], "pass_id": pass_id, "protocol": "grid", "arm": arm,
                    "unit": episode.id, "step": info.request_index, "turn": info.turn_index,
                    "turn_step": info.step_index, "action": info.action, "calls": info.calls,
                    "decode_error": info.decode_error, "tool_results": list(info.tool_results),
                    "seq": counts["requests"], "prompt_sha256": sha, "prompt_tokens_counted": info.prompt_tokens,
                    "request": {"endpoint": "/completion", "body": request_body(request)},
                    "completion": completion_json(completion), "raw": completion.raw, "started": now(),
                    "gate": {"ok": ok, "reason": why}, "error": None,
                })
                counts["requests"] += 1
                requests.append((sha, completion_emitted(completion)))
                ctx.emit(RequestDone(pass_id, episode.id, arm, counts["requests"], completion.cached_tokens,
                                     completion.prefill_ms, ok))
                ctx.checkpoint()  # the record is written; stop before the episode's next request

            clock = time.monotonic()
            try:
                result = run_episode(live.engine, worker, episode, render, protocol.engine.ctx_size, pass_id,
                                     count_tokens=lambda text: len(live.engine.tokenize(text)),
                                     on_request=on_request, top_logprobs=protocol.top_logprobs,
                                     cache_prompt=arm == "on", max_tokens_cap=protocol.workload.max_tokens_cap,
                                     max_requests=protocol.workload.max_requests_per_episode, stop=())
            except EngineError as exc:
                if not live.alive():
                    raise EngineError(f"the engine died during pass {pass_id} (episode {episode.id})",
                                      "see the server log in the run folder; records so far are kept") from exc
                raise
            score = score_episode(worker, result)
            episode_writer.write({"run_id": ctx.manifest.data["run_id"], "pass_id": pass_id, "arm": arm,
                                  "unit": episode.id, "order_index": done - 1, "requests": result.n_requests,
                                  "outcome": result.outcome, "wall_seconds": round(time.monotonic() - clock, 3),
                                  "score": score.__dict__})
            ctx.emit(EpisodeDone(pass_id, episode.id, done, len(episodes), result.n_requests, result.outcome,
                                 score.valid))
            comparer.episode_finished(pass_id, episode.id, requests)
    status, reason = "OK", None
    if counts["off_violations"]:
        status, reason = "VOID", (f"{counts['off_violations']} cache-off requests reused cached tokens "
                                  f"(first: {first_violation[0]})")
    elif arm == "on" and counts["on_checked"] and counts["on_hits"] < gates.on_min_hit_share * counts["on_checked"]:
        status, reason = "VOID", (f"only {counts['on_hits']} of {counts['on_checked']} cache-on requests after an "
                                  f"episode's first hit the cache (needs {gates.on_min_hit_share:.0%})")
    ctx.manifest.set_pass(pass_id, status=status, reason=reason, records=counts["requests"], ended=now())
    ctx.emit(SessionEnded(pass_id, status, reason))


def _gate(arm: str, request_index: int, cached: int | None, gates: GridGates) -> tuple[bool, str | None]:
    if cached is None:
        return False, "the engine did not report cached tokens"
    if arm == "off" and cached > gates.off_max_cached_tokens:
        return False, f"{cached} cached tokens on a cache-off request"
    if arm == "on" and request_index > 0 and cached == 0:
        return False, "no cache hit on a cache-on request after the episode's first"
    return True, None
