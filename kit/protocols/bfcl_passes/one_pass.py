"""One BFCL pass (the grid's, run by every kind of BFCL passes): every episode driven through the agent loop,
each request recorded and checked against the cache state its arm must show, each episode scored; the pass
ends OK or VOID.

Where the engine fixes prefix caching per server process (vLLM, `arm_per_server`), the arm is also
proven around the pass (`ServerArm`): the server was launched with the arm's setting, the server's own
word does not contradict it, and a cache-off pass leaves the server's hit counters where they were,
since such a server reports nothing per request (a null `cached_tokens` there is expected, not a
violation)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from kit.record.divergence import completion_emitted
from kit.engines.base import Completion, CompletionRequest, ServerCacheArm, require
from kit.core.errors import ConfigError
from kit.core.events import EpisodeDone, RequestDone, SessionEnded
from kit.record.manifest import now
from kit.core.paths import RunPaths
from kit.protocols.procedure import RunContext
from kit.protocols.bfcl_passes.model import BfclPassesProtocol, GridGates, PassPlan
from kit.record.model import BfclRecord, EpisodeSummary, Gate
from kit.record.files import RecordWriter
from kit.workloads.bfcl import BfclWorker, run_episode, score_episode
from kit.workloads.bfcl.client import Episode

if TYPE_CHECKING:  # annotations only: reading a grid run's files (kit analyze, kit verify) loads no launch machinery
    from kit.launch.provider import EngineSession
from kit.workloads.bfcl.render import Renderer

SENTINEL_PROMPT = "Sentinel cache reset. " * 32


def gate(arm: str, request_index: int, cached: int | None, gates: GridGates,
         arm_per_server: bool = False) -> tuple[bool, str | None]:
    """Does a request show the cache state its arm needs? Under sentinel isolation an episode's first
    request must reuse nothing either. On a server whose launch setting is the arm (`arm_per_server`) a
    cache-off request that reports nothing is fine: its pass is proven by the server's counters."""
    if cached is None:
        if arm == "off" and arm_per_server:
            return True, None
        return False, "the engine did not report cached tokens"
    if arm == "off" and cached > gates.off_max_cached_tokens:
        return False, f"{cached} cached tokens on a cache-off request"
    if arm == "on" and request_index > 0 and cached == 0:
        return False, "no cache hit on a cache-on request after the episode's first"
    if gates.episode_start_cold and request_index == 0 and cached > 0:
        return False, f"{cached} cached tokens on an episode's first request (its cache state was not isolated)"
    return True, None


class ServerArmJson(TypedDict):
    """`passes.<id>.server_arm` in the manifest: how the server was launched, what it said, and its prefix-cache
    counters' movement over the pass (None where they were not read at both ends)."""

    launched_with_prefix_caching: bool
    server_says: bool | None
    hits_over_pass: float | None
    queries_over_pass: float | None


class ServerArmFields(TypedDict, total=False):
    server_arm: ServerArmJson  # a pass on a server whose cache arm is its launch setting (ServerArm)


# (pass id, episode id, each request's (prompt sha256, emitted tokens)): an episode a pass finished
OnEpisode = Callable[[str, str, list[tuple[str, Sequence[int | str]]]], None]


class ServerArm:
    """The cache arm of a server whose prefix caching is its launch setting, checked when the pass starts
    (launch flag and the server's own word) and proven when it ends (a cache-off pass: zero hit tokens on
    the server's counters over the pass)."""

    def __init__(self, engine: ServerCacheArm, arm: str, pass_id: str):
        expected = arm == "on"
        launched = engine.prefix_caching
        fix = ("give each arm its own server: --enable-prefix-caching for the cache-on arm, "
               "--no-enable-prefix-caching for the cache-off arm")
        if launched is None:
            raise ConfigError(f"pass {pass_id}: how the server for the cache-{arm} arm was launched is unknown", fix)
        if launched != expected:
            raise ConfigError(f"pass {pass_id} is a cache-{arm} pass but its server runs with prefix caching "
                              f"{'on' if launched else 'off'}", fix)
        self.said = engine.server_prefix_caching()
        if self.said is not None and self.said != expected:
            raise ConfigError(f"pass {pass_id} is a cache-{arm} pass but its server says enable_prefix_caching="
                              f"{self.said} (vllm:cache_config_info)", fix)
        self.engine, self.arm, self.launched = engine, arm, launched
        self.start = engine.cache_counters()
        self.end: Any = None

    def failure(self) -> str | None:
        """Why the pass's arm is not proven, or None."""
        self.end = self.engine.cache_counters()
        if self.arm != "off":
            return None
        if self.start is None or self.end is None:
            return "the cache-off arm is unproven: its server exports no prefix-cache counters on /metrics"
        hits = self.end.hits - self.start.hits
        return f"{hits:g} prefix-cache hit tokens on the cache-off server over the pass" if hits else None

    def to_json(self) -> ServerArmJson:
        moved = (self.start is not None and self.end is not None)
        return {"launched_with_prefix_caching": self.launched, "server_says": self.said,
                "hits_over_pass": self.end.hits - self.start.hits if moved else None,
                "queries_over_pass": self.end.queries - self.start.queries if moved else None}


@dataclass
class PassTally:
    """Gate counts of one pass, and the verdict they give."""

    arm: str
    requests: int = 0
    violations: int = 0  # hard violations: any one voids the pass
    on_checked: int = 0
    on_hits: int = 0
    first: list[str] = field(default_factory=list)
    arm_unproven: str | None = None  # a server-level arm that its counters did not prove (ServerArm)
    emitted_as: dict[str, int] = field(default_factory=lambda: {"token_ids": 0, "token_strings": 0})
    disagreements: list[str] = field(default_factory=list)  # requests whose two cache measures differ

    def measured(self, completion: Completion, where: str) -> None:
        """Note how a completion's tokens can be compared, and whether its cache measures disagree."""
        self.emitted_as["token_ids" if completion.token_ids is not None else "token_strings"] += 1
        measures = completion.cache_measures
        if measures and measures["disagree"]:
            self.disagreements.append(f"{where}: usage says {measures['usage']}, /metrics {measures['metrics_hits']:g}")

    def add(self, request_index: int, ok: bool, why: str | None, where: str) -> None:
        if self.arm == "on" and request_index > 0 and (ok or "no cache hit" in (why or "")):
            self.on_checked += 1
            self.on_hits += ok
        elif not ok:
            self.violations += 1
        if why and not self.first:
            self.first.append(f"{where}: {why}")

    def verdict(self, gates: GridGates) -> tuple[str, str | None]:
        if self.arm_unproven:
            return "VOID", self.arm_unproven
        if self.violations:
            return "VOID", f"{self.violations} requests violated the cache-state gate (first: {self.first[0]})"
        if self.on_checked and self.on_hits < gates.on_min_hit_share * self.on_checked:
            return "VOID", (f"only {self.on_hits} of {self.on_checked} cache-on requests after an episode's first "
                            f"hit the cache (needs {gates.on_min_hit_share:.0%})")
        return "OK", None


def run_pass(protocol: BfclPassesProtocol, ctx: RunContext, live: EngineSession, worker: BfclWorker,
             episodes: list[Episode], render: Renderer, plan: PassPlan, on_episode: OnEpisode) -> None:
    """Drive every episode of one pass (`plan`: pass_id, arm, repeat, order). `on_episode(pass_id,
    unit, [(prompt sha, tokens)])` gets each finished episode (for live comparisons)."""
    pass_id, arm = plan.pass_id, plan.arm
    file, episodes_file = RunPaths.records_name(pass_id), RunPaths.episodes_name(pass_id)
    ctx.manifest.set_pass(pass_id, arm=arm, repeat=plan.repeat, order_index=plan.order, file=file,
                          episodes_file=episodes_file, status="running", started=now(),
                          order=[e.id for e in episodes], launch=live.launch)
    tally = PassTally(arm)
    stamp = ctx.stamp(pass_id, "grid")

    arm_per_server = live.engine.capabilities.arm_per_server
    server_arm = None
    if arm_per_server:
        with live.engine_calls(f"pass {pass_id} (checking its server's cache setting)"):
            server_arm = ServerArm(require(live.engine, "arm_per_server", "a cache arm that is a server's setting"),
                                   arm, pass_id)

    def record(writer: RecordWriter, unit: str, completion: Completion, request_index: int,
               action: str, **details: Any) -> tuple[str, bool]:
        ok, why = gate(arm, request_index, completion.cached_tokens, protocol.gates, arm_per_server)
        if action != "sentinel":
            tally.add(request_index, ok, why, f"{unit} request {request_index}")
            tally.measured(completion, f"{unit} request {request_index}")
        written = writer.answered(BfclRecord, completion, unit=unit, step=request_index, gate=Gate(ok, why),
                                  arm=arm, action=action, **details)
        tally.requests += 1
        ctx.emit(RequestDone(pass_id, unit, arm, tally.requests, completion.cached_tokens, completion.prefill_ms, ok))
        return written.prompt_sha256, ok

    tokenizer = require(live.engine, "tokenization", "the BFCL workload (prompt tokens set each request's limit)")
    with ctx.records(file, **stamp) as writer, ctx.records(episodes_file) as episode_writer:
        for done, episode in enumerate(episodes, start=1):
            ctx.checkpoint()
            if protocol.sentinel:
                # a server whose launch setting is the arm takes only that arm's cache switch
                sentinel = CompletionRequest(prompt=SENTINEL_PROMPT, max_tokens=1,
                                             cache_prompt=arm == "on" if arm_per_server else True,
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
                                     max_requests=protocol.workload.max_requests_per_episode,
                                     system_prompt=protocol.workload.system_prompt(worker, episode.id))
            score = score_episode(worker, result)
            episode_writer.write(EpisodeSummary(**stamp, arm=arm, unit=episode.id, order_index=done - 1,
                                                requests=result.n_requests, sentinels=int(protocol.sentinel),
                                                outcome=result.outcome,
                                                wall_seconds=round(time.monotonic() - clock, 3), score=score.__dict__))
            ctx.emit(EpisodeDone(pass_id, episode.id, done, len(episodes), result.n_requests, result.outcome,
                                 score.valid))
            on_episode(pass_id, episode.id, walked)
    extra: ServerArmFields = {}
    if server_arm is not None:
        with live.engine_calls(f"pass {pass_id} (reading the server's prefix-cache counters)"):
            tally.arm_unproven = server_arm.failure()
        extra["server_arm"] = server_arm.to_json()
    status, reason = tally.verdict(protocol.gates)
    ctx.manifest.set_pass(pass_id, status=status, reason=reason, records=tally.requests, ended=now(),
                          emitted_as=tally.emitted_as, cache_measure_disagreements=len(tally.disagreements),
                          first_disagreement=tally.disagreements[0] if tally.disagreements else None, **extra)
    ctx.emit(SessionEnded(pass_id, status, reason))
