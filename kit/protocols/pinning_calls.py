"""One chat call to any engine the pinning protocol supports, with the exact request it sent.

Chat engines (Ollama, OpenAI-compatible) take the messages and apply the model's template themselves;
llama-server's own template renders the prompt (`/apply-template`) and `/completion` serves it, so
its per-request telemetry (cached tokens, prompt ms) comes with every answer.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kit.engines.base import Completion, CompletionRequest
from kit.records import prompt_sha256


def output_sha256(text: str) -> str:
    """The identity of an output: sha256 of its exact UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ask(engine: Any, messages: list[dict[str, str]], *, max_tokens: int, seed: int,
        top_logprobs: int) -> tuple[Completion, dict[str, Any]]:
    """Send one greedy chat turn; returns the completion and {endpoint, body, prompt_sha256}."""
    if hasattr(engine, "chat"):
        body = engine.chat_body(messages, max_tokens=max_tokens, seed=seed, top_logprobs=top_logprobs)
        completion = engine.chat(messages, max_tokens=max_tokens, seed=seed, top_logprobs=top_logprobs)
        endpoint = "/api/chat" if engine.name == "ollama" else "/v1/chat/completions"
        canonical = repr([(m["role"], m["content"]) for m in messages])
        return completion, {"endpoint": endpoint, "body": body, "prompt_sha256": prompt_sha256(canonical)}
    from kit.engines.llamacpp import request_body  # noqa: PLC0415 - the only prompt-based engine here

    prompt = engine.apply_template(messages)
    request = CompletionRequest(prompt=prompt, max_tokens=max_tokens, top_logprobs=max(1, top_logprobs),
                                seed=seed)
    completion = engine.complete(request)
    return completion, {"endpoint": "/completion", "body": request_body(request), "prompt_sha256": prompt_sha256(prompt)}
