"""An SGLang server as a fake engine: the OpenAI-compatible chat of tests.fake_engine.openai plus SGLang's own
`GET /get_server_info` and `POST /flush_cache`, in the shapes of tests/fixtures/sglang (see its README)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fake_engine.core import recorded
from tests.fake_engine.openai import OpenAIChat


class Sglang(OpenAIChat):
    """`busy`: requests are in flight, so `/flush_cache` answers 400. `flushes` counts the accepted flushes."""

    def __init__(self, busy: bool = False):
        super().__init__()
        self.busy, self.flushes = busy, 0

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        if path == "/get_server_info" and request.method == "GET":
            return httpx.Response(200, json=recorded("sglang", "get_server_info.json"))
        if path == "/flush_cache":
            if self.busy:
                return httpx.Response(400, text=recorded("sglang", "flush_cache_busy.txt"))
            self.flushes += 1
            return httpx.Response(200, text=recorded("sglang", "flush_cache_ok.txt"))
        return super().answer(request, path, body)
