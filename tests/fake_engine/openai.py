"""An OpenAI-compatible chat server (`/v1/models`, `/v1/chat/completions`) as a fake engine, answering in
the OpenAI chat shape as vLLM 0.11.0 gives it (usage without `prompt_tokens_details` unless
--enable-prompt-tokens-details) and, with `timings`, as llama-server's OpenAI endpoint adds them."""

from __future__ import annotations

import copy
from typing import Any

import httpx

from tests.fake_engine.core import FakeEngine

MODEL = "Qwen/Qwen2.5-7B-Instruct"
CHAT = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1760031310, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Floating-point"}, "logprobs": None,
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": 64, "total_tokens": 66, "completion_tokens": 2, "prompt_tokens_details": None}}


class OpenAIChat(FakeEngine):
    """Lists one model and answers every chat request with `CHAT` (plus llama-server's `timings` if given)."""

    def __init__(self, model: str = MODEL, timings: dict | None = None):
        super().__init__()
        self.model, self.timings = model, timings

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        if path == "/v1/models" and request.method == "GET":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 1760031300, "owned_by": "vllm"}]})
        if path == "/v1/chat/completions" and request.method == "POST":
            return httpx.Response(200, json=self.chat_answer(body))
        return httpx.Response(404, json={"detail": "Not Found"})

    def chat_answer(self, body: dict) -> dict:
        answer = copy.deepcopy(CHAT)
        answer["model"] = self.model
        if self.timings is not None:
            answer["timings"] = dict(self.timings)
        return answer
