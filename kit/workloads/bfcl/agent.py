"""The BFCL agent loop in prompting mode: one episode, request by request.

For each user turn the loop appends the user message and then takes steps. A step sends the
whole growing transcript, rendered to text, to the engine; the model's text is decoded by BFCL's
prompting decoder in the worker. A step that fails to decode or decodes to an empty list ends the
turn; otherwise the calls run in the episode's BFCL environment and their results are appended as
tool messages. More than `MAXIMUM_STEP_LIMIT` calling steps in one turn force-quit the episode
(BFCL's rule), and a prompt the engine refuses as too long ends it with outcome
"context_overflow". Each request is reported through `on_request`; the caller writes records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kit.engines.base import Completion, CompletionRequest, Engine
from kit.workloads.bfcl.call_policy import Refusal
from kit.workloads.bfcl.client import Decoded, Episode, Execution
from kit.workloads.bfcl.render import Renderer

MAXIMUM_STEP_LIMIT = 20  # BFCL: bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT
MAX_NEW_TOKENS = 4096  # BFCL's cap on max_tokens for local models
OVERSIZE_PROMPT_MAX_TOKENS = 1000  # what BFCL requests when the prompt alone fills the context

OUTCOMES = ("completed", "force_quit", "context_overflow", "request_cap")


class EpisodeWorker(Protocol):
    """The part of `BfclWorker` the loop uses (tests may pass a stand-in)."""

    def system_prompt(self, episode_id: str) -> str: ...
    def decode(self, text: str) -> Decoded: ...
    def execute(self, pass_id: str, episode_id: str, calls: list[str]) -> Execution: ...
    def release(self, pass_id: str, episode_id: str) -> int: ...


@dataclass(frozen=True)
class StepInfo:
    """Where one request sits in the episode and what the loop did with its answer.

    `action` is "execute" (calls ran, the turn goes on), "end_turn" (the text did not decode or
    decoded to no call), "force_quit" (calls ran and the turn exceeded the step limit) or
    "context_overflow" (the engine refused the prompt; no text). `tool_refused` are the calls the
    call policy kept from BFCL (their tool result is BFCL's error text for a failed call).
    """

    pass_id: str
    episode_id: str
    turn_index: int
    step_index: int  # step within the turn, from 0
    request_index: int  # request within the episode, from 0
    prompt_tokens: int  # counted by the injected tokenizer before sending
    max_tokens: int
    action: str
    calls: tuple[str, ...] | None = None
    decode_error: str | None = None
    tool_results: tuple[str, ...] = ()
    tool_refused: tuple[Refusal, ...] = ()


@dataclass
class TurnResult:
    """The model's raw text of every step of one turn, and what each decoded to."""

    step_texts: list[str] = field(default_factory=list)
    decoded: list[tuple[str, ...] | None] = field(default_factory=list)


@dataclass
class EpisodeResult:
    """What one episode produced: per-turn step texts (what BFCL scores), request count, outcome."""

    episode_id: str
    pass_id: str
    turns: list[TurnResult]
    n_requests: int
    outcome: str  # one of OUTCOMES
    messages: list[dict]  # the final transcript, system prompt included

    def turn_texts(self) -> list[list[str]]:
        """Per turn, the step texts: the model result BFCL's evaluator reads."""
        return [list(t.step_texts) for t in self.turns]


OnRequest = Callable[[StepInfo, CompletionRequest, Completion], None]


def opening_messages(system_prompt: str, first_turn: tuple[dict, ...]) -> list[dict]:
    """The first turn's messages with BFCL's system prompt in front (merged into an existing one)."""
    msgs = [dict(m) for m in first_turn]
    if msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = system_prompt + "\n\n" + msgs[0]["content"]
    else:
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def max_new_tokens(prompt_tokens: int, ctx_size: int, cap: int = MAX_NEW_TOKENS) -> int:
    """min(cap, ctx - prompt - 2), or BFCL's 1000 when the prompt alone leaves no room."""
    if ctx_size < prompt_tokens + 2:
        return OVERSIZE_PROMPT_MAX_TOKENS
    return min(cap, ctx_size - prompt_tokens - 2)


def run_episode(
    engine: Engine,
    worker: EpisodeWorker,
    episode: Episode,
    render: Renderer,
    ctx_size: int,
    pass_id: str,
    *,
    count_tokens: Callable[[str], int],
    seed: int,
    on_request: OnRequest | None = None,
    top_logprobs: int = 1,
    cache_prompt: bool | None = None,
    max_tokens_cap: int = MAX_NEW_TOKENS,
    max_requests: int | None = None,
    stop: tuple[str, ...] = (),
    system_prompt: str | None = None,
) -> EpisodeResult:
    """Run one BFCL episode against `engine` and return what BFCL needs to score it. Every request
    carries `seed` (the protocol's).

    `max_requests` stops the episode early with outcome "request_cap" (for smoke tests; the
    paper's protocol has no such cap). `system_prompt`: the one the workload sends (default: the worker's, with
    every function doc). The episode's environment instances are released at the
    end, so a later pass with the same `pass_id` starts from the initial state again.
    """
    messages: list[dict] = []
    turns: list[TurnResult] = []
    n_requests = 0
    outcome = "completed"

    def report(info: StepInfo, request: CompletionRequest, completion: Completion) -> None:
        if on_request is not None:
            on_request(info, request, completion)

    try:
        if system_prompt is None:
            system_prompt = worker.system_prompt(episode.id)
        for turn_index, turn_messages in enumerate(episode.turns):
            if turn_index == 0:
                messages.extend(opening_messages(system_prompt, turn_messages))
            else:
                messages.extend(dict(m) for m in turn_messages)
            turn = TurnResult()
            turns.append(turn)
            step = 0
            while True:
                if max_requests is not None and n_requests >= max_requests:
                    outcome = "request_cap"
                    break
                prompt = render(messages)
                prompt_tokens = count_tokens(prompt)
                request = CompletionRequest(
                    prompt=prompt,
                    max_tokens=max_new_tokens(prompt_tokens, ctx_size, max_tokens_cap),
                    seed=seed,
                    cache_prompt=cache_prompt,
                    top_logprobs=top_logprobs,
                    stop=stop,
                )
                completion = engine.complete(request)
                n_requests += 1
                step_info = functools.partial(StepInfo, pass_id=pass_id, episode_id=episode.id,
                                              turn_index=turn_index, step_index=step,
                                              request_index=n_requests - 1, prompt_tokens=prompt_tokens,
                                              max_tokens=request.max_tokens)
                if completion.outcome == "context_overflow":
                    report(step_info(action="context_overflow"), request, completion)
                    outcome = "context_overflow"
                    break
                text = completion.text
                turn.step_texts.append(text)
                messages.append({"role": "assistant", "content": text})
                decoded = worker.decode(text)
                if decoded.ends_turn:
                    turn.decoded.append(decoded.calls)
                    report(step_info(action="end_turn", calls=decoded.calls,
                                     decode_error=decoded.error), request, completion)
                    break
                calls = decoded.calls or ()
                turn.decoded.append(calls)
                execution = worker.execute(pass_id, episode.id, list(calls))
                results = execution.results
                for call, result in zip(calls, results, strict=True):
                    messages.append({"role": "tool", "name": call, "content": result})
                step += 1
                action = "force_quit" if step > MAXIMUM_STEP_LIMIT else "execute"
                report(step_info(action=action, calls=calls, tool_results=tuple(results),
                                 tool_refused=execution.refused), request, completion)
                if action == "force_quit":
                    outcome = "force_quit"
                    break
            if outcome != "completed":
                break
    finally:
        worker.release(pass_id, episode.id)
    return EpisodeResult(episode_id=episode.id, pass_id=pass_id, turns=turns,
                         n_requests=n_requests, outcome=outcome, messages=messages)
