"""Ollama as a fake engine, answering with its documented response shapes (tests/fixtures/ollama/README.md
says which values are the documentation's and which were constructed). Ollama cannot run on the test
machine; everything on the client side runs for real against this."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fake_engine.core import FakeEngine, recorded


class Ollama(FakeEngine):
    """Routes requests to recorded bodies: `/api/ps` answers from `ps_sequence`, one fixture per poll (the
    last one repeats); `/api/chat` with `chat` (the model "llama9" is not found); an unload
    (`/api/generate` with keep_alive 0 and no prompt) with the recorded unload answer. Subclasses that
    simulate an instance override `chat_answer`, `ps_answer` or `unload`."""

    def __init__(self, ps_sequence=("ps_empty.json",), chat: str = "chat_logprobs.json"):
        super().__init__()
        self.ps_sequence = list(ps_sequence)
        self.chat = chat

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        if path == "/api/ps":
            return httpx.Response(200, json=self.ps_answer())
        if path == "/api/generate":
            if body.get("keep_alive") == 0 and "prompt" not in body:
                self.unload()
                return httpx.Response(200, json=recorded("ollama", "generate_unload.json"))
            return httpx.Response(200, json=recorded("ollama", "generate.json"))
        if path == "/api/chat":
            if body["model"] == "llama9":
                return httpx.Response(404, json=recorded("ollama", "error_model_not_found.json"))
            return httpx.Response(200, json=self.chat_answer(body))
        if path == "/api/show":
            return httpx.Response(200, json=recorded("ollama", "show.json"))
        if path == "/api/version":
            return httpx.Response(200, json=recorded("ollama", "version.json"))
        return httpx.Response(404, json={"error": "not found"})

    def ps_answer(self) -> dict:
        name = self.ps_sequence.pop(0) if len(self.ps_sequence) > 1 else self.ps_sequence[0]
        return recorded("ollama", name)

    def chat_answer(self, body: dict) -> dict:
        return recorded("ollama", self.chat)

    def unload(self) -> None:
        pass
