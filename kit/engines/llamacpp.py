"""Client for llama.cpp's llama-server (native `/completion` endpoint), normalized to `Completion`."""

from __future__ import annotations

from typing import Any

import httpx

from kit.digests import sha256_text
from kit.engines.base import (
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    TokenLogprob,
    refuse_unsupported,
)
from kit.engines.http import client, json_or, post_timed, send
from kit.errors import EngineError
from kit.secret_urls import connection_parts

FINISH_REASONS = {"eos": "stop", "word": "stop", "limit": "length"}
STILL_RUNNING = "check that the engine is still running (see its log) and resume the run"


def request_body(request: CompletionRequest) -> dict[str, Any]:
    """The exact JSON body sent to `/completion` for a prompt request (recorded with each response)."""
    body: dict[str, Any] = {
        "prompt": request.prompt,
        "n_predict": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.seed,
        "n_probs": request.top_logprobs,
        "return_tokens": True,
    }
    if request.cache_prompt is not None:
        body["cache_prompt"] = request.cache_prompt
    if request.stop:
        body["stop"] = list(request.stop)
    return body


def _entry(item: dict[str, Any]) -> TokenLogprob:
    return {"token": item["token"], "logprob": item["logprob"], "id": item.get("id"),
            "top": [{"token": t["token"], "logprob": t["logprob"], "id": t.get("id")}
                    for t in item.get("top_logprobs", ())]}


def normalize(body: dict[str, Any], sent: Sent | None = None) -> Completion:
    """Turn a `/completion` response into a Completion.

    llama.cpp folds a token that ends inside a UTF-8 character into the next probability entry, so
    `logprobs` (and the `tokens` strings taken from it) can be shorter than `token_ids`.
    """
    timings = body.get("timings") or {}
    entries = tuple([_entry(item) for item in body.get("completion_probabilities") or ()])
    prompt_n, cache_n = timings.get("prompt_n"), timings.get("cache_n")
    return Completion(
        text=body.get("content", ""),
        token_ids=tuple(body["tokens"]) if body.get("tokens") is not None else None,
        tokens=tuple([e["token"] for e in entries]),
        logprobs=entries,
        finish_reason=FINISH_REASONS.get(body.get("stop_type", ""), body.get("stop_type")),
        cached_tokens=cache_n,
        prompt_tokens=(prompt_n + cache_n) if prompt_n is not None and cache_n is not None else None,
        prefill_tokens=prompt_n,
        prefill_ms=timings.get("prompt_ms"),
        decode_tokens=timings.get("predicted_n"),
        decode_ms=timings.get("predicted_ms"),
        raw=body,
        sent=sent,
    )


def overflow(body: dict[str, Any], sent: Sent | None = None) -> Completion:
    """The recorded outcome of a prompt the engine refused as longer than its context."""
    error = body.get("error", {})
    return Completion(text="", token_ids=(), tokens=(), logprobs=(), finish_reason=None, cached_tokens=None,
                      prompt_tokens=error.get("n_prompt_tokens"), prefill_tokens=None, prefill_ms=None,
                      decode_tokens=0, decode_ms=None, raw=body, outcome="context_overflow", sent=sent)


class LlamaCppEngine:
    """A llama-server at `base_url`, started by the kit or by someone else."""

    name = "llama.cpp"

    def __init__(self, base_url: str, timeout: float = 600.0, restartable: bool = False,
                 transport: httpx.BaseTransport | None = None):
        """`transport` replaces the network (tests of paths a real server cannot be made to take here)."""
        connect, params, self.base_url = connection_parts(base_url)  # base_url: as recorded, no credentials
        self._http = client(connect, timeout, transport, params)
        # no reset endpoint: /slots/0?action=erase answers 200 and keeps the cache; no chat messages either
        self.capabilities = Capabilities(per_request_cache_bypass=True, cached_token_telemetry=True, token_ids=True,
                                         restartable=restartable, raw_prompts=True, prompt_rendering=True,
                                         tokenization=True)
        self._who = f"llama-server at {self.base_url}"

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return send(self._http, "POST", path, body, who=self._who, fix=STILL_RUNNING)

    def _get(self, path: str) -> dict[str, Any]:
        response = send(self._http, "GET", path, who=self._who, fix="check the URL and that the server is running")
        if response.status_code != 200:
            raise EngineError(f"llama-server {path} answered HTTP {response.status_code}",
                              "is this a llama.cpp server? pass the right --engine-url")
        return response.json()

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_unsupported(self, request)
        response, sent = post_timed(self._http, "/completion", request_body(request), who=self._who, fix=STILL_RUNNING)
        body = json_or(response, {"error": {"message": response.text[:500]}})
        if response.status_code == 400 and body.get("error", {}).get("type") == "exceed_context_size_error":
            return overflow(body, sent)
        if response.status_code != 200:
            message = body.get("error", {}).get("message", response.text[:200])
            raise EngineError(f"llama-server answered HTTP {response.status_code}: {message}",
                              "check the request settings and the engine log")
        return normalize(body, sent)

    def tokenize(self, text: str) -> list[int]:
        response = self._post("/tokenize", {"content": text})
        return response.json()["tokens"]

    def apply_template(self, messages: list[dict[str, str]]) -> str:
        """The prompt text the model's own chat template makes of `messages` (with the assistant prefix)."""
        response = self._post("/apply-template", {"messages": messages})
        if response.status_code != 200:
            raise EngineError(f"llama-server could not apply its chat template (HTTP {response.status_code})",
                              "use a model whose GGUF carries a chat template")
        return response.json()["prompt"]

    def props(self) -> dict[str, Any]:
        return self._get("/props")

    def info(self) -> dict[str, Any]:
        props = self.props()
        return {
            "engine": self.name,
            "url": self.base_url,
            "build_info": props.get("build_info"),
            "model_path": props.get("model_path"),
            "total_slots": props.get("total_slots"),
            "n_ctx": (props.get("default_generation_settings") or {}).get("n_ctx"),
            "chat_template_sha256": sha256_text(props.get("chat_template", "")),
        }

    def close(self) -> None:
        self._http.close()
