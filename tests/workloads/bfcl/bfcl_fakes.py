"""A scripted stand-in for an engine, for testing the agent loop without a model.

`ScriptedEngine` implements the kit's Engine contract and replays model texts given in advance
(one per request), recording every request it receives. It is not a mock of any server: it only
decides what the "model" says, so the loop, the BFCL decoder, the environments and the checker
all run for real. An entry of `CONTEXT_OVERFLOW` makes that request come back the way an engine
adapter reports a prompt refused as too long.
"""

from __future__ import annotations

from kit.engines.base import Capabilities, Completion, CompletionRequest

CONTEXT_OVERFLOW = object()


def completion_for(text: str, outcome: str = "ok") -> Completion:
    return Completion(
        text=text, token_ids=None, tokens=(), logprobs=(), finish_reason="stop",
        cached_tokens=None, prompt_tokens=None, prefill_tokens=None, prefill_ms=None,
        decode_tokens=None, decode_ms=None, outcome=outcome,
    )


class ScriptedEngine:
    """Replays `script` (texts, or CONTEXT_OVERFLOW) request by request."""

    name = "scripted"
    capabilities = Capabilities(per_request_cache_bypass=True, raw_prompts=True)

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if len(self.requests) > len(self.script):
            raise AssertionError(f"script exhausted at request {len(self.requests)}")
        item = self.script[len(self.requests) - 1]
        if item is CONTEXT_OVERFLOW:
            return completion_for("", outcome="context_overflow")
        return completion_for(item)

    def info(self) -> dict:
        return {"engine": "scripted"}

    def close(self) -> None:
        pass


def char_count_tokens(text: str) -> int:
    """A deterministic stand-in tokenizer: one token per four characters."""
    return len(text) // 4
