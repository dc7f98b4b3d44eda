"""vLLM 0.11.0, two ways: `VllmReplay` answers with the recorded responses of tests/fixtures/vllm/ in
the order a test scripts them; `VllmModel` is a deterministic model with vLLM's prefix cache, for runs
that need answers to depend on what was asked before (also run as a process: tests/fake_engine/vllm_serve.py).

The fake model (deterministic):
- Tokenizer: the regex `\\s+|\\w+|[^\\w\\s]` splits text into tokens (their concatenation is the
  text); a token's id is crc32(its UTF-8) mod 50000. No special tokens are ever added.
- Prefix cache, like vLLM's: blocks of 16 tokens; block i's key is sha256(key of block i-1, its
  ids); only full blocks are cached. A request's hit is its leading full blocks already cached,
  times 16, never the whole prompt (at most the full blocks within its first n-1 tokens, as vLLM
  always computes one token). Afterwards all its full prompt blocks are inserted (no eviction).
  With caching on, each request adds its prompt tokens to `vllm:prefix_cache_queries_total` and
  its hit to `vllm:prefix_cache_hits_total` before its response is sent; with caching off nothing
  is looked up or stored and the counters stay 0.
- Output: COLD_TEXT when the request hit nothing, WARM_TEXT when it hit (a cache hit changes the
  emitted tokens from the first one on: the path divergence tests count). Plain prose, no brackets, no numbers; nothing
  else (seed, temperature, time) changes it. Emitted tokens are split like the tokenizer, cut at
  `max_tokens` (finish_reason "length") or at the first `stop` string (text cut before it,
  stop_reason the string), else "stop". Logprob of token i: -0.01 * (1 + i % 7); `top_logprobs`
  maps hold max(k, 1) entries, the emitted token first and highest, then fillers 2.0 lower each.
- Endpoints, shaped like the recordings: GET /health, /version, /v1/models, /metrics; POST /tokenize,
  /v1/completions, and /reset_prefix_cache when `dev_mode` (vLLM's VLLM_SERVER_DEV_MODE=1).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
import uuid
import zlib
from typing import Any

import httpx

from tests.fake_engine.core import FakeEngine, recorded

MODEL = "Qwen/Qwen2.5-7B-Instruct"
BLOCK = 16
VOCAB = 50000
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
COLD_TEXT = "I cannot do that with the functions given."
WARM_TEXT = "Sorry, I cannot do that with the functions given."  # differs from the first token on
FILLERS = ["the", " a", ",", ".", " and", " to", " of", " is", " I", " it", " that", " in", " for",
           " you", " we", " be", " on", " with", " as", " this", " not"]
TOKEN = re.compile(r"\s+|\w+|[^\w\s]")
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class VllmReplay(FakeEngine):
    """Answers like a vLLM server from recorded fixtures: `completions` is the (status, body) of each
    POST /v1/completions in turn, `metrics` the fixture names (or texts) of each GET /metrics in turn (the
    last one repeats; none: 404), `chat` the body of every POST /v1/chat/completions."""

    def __init__(self, completions=(), metrics=(), *, reset_status: int = 404, chat: dict | None = None):
        super().__init__()
        self.completions = list(completions)
        self.metrics = list(metrics)
        self.reset_status, self.chat = reset_status, chat

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        post = request.method == "POST"
        if path == "/v1/models":
            return httpx.Response(200, json=recorded("vllm", "models.json"))
        if path == "/version":
            return httpx.Response(200, json=recorded("vllm", "version.json"))
        if path == "/metrics":
            if not self.metrics:
                return httpx.Response(404, text="Not Found")
            text = self.metrics.pop(0) if len(self.metrics) > 1 else self.metrics[0]
            text = recorded("vllm", text) if text.endswith(".txt") else text
            return httpx.Response(200, text=text, headers={"content-type": METRICS_TYPE})
        if path == "/v1/completions" and post:
            status, answer = self.completions.pop(0)
            return httpx.Response(status, json=answer)
        if path == "/v1/chat/completions" and post and self.chat is not None:
            return httpx.Response(200, json=self.chat)
        if path == "/reset_prefix_cache" and post:
            return httpx.Response(self.reset_status)
        return httpx.Response(404, json={"detail": "Not Found"})


def tokens_of(text: str) -> list[str]:
    return TOKEN.findall(text)


def token_id(token: str) -> int:
    return zlib.crc32(token.encode()) % VOCAB


def block_keys(ids: list[int]) -> list[bytes]:
    keys, previous = [], b""
    for start in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
        previous = hashlib.sha256(previous + json.dumps(ids[start:start + BLOCK]).encode()).digest()
        keys.append(previous)
    return keys


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.body = status, {"error": {"message": message, "type": kind, "param": None, "code": status}}


class VllmModel(FakeEngine):
    """The fake model's state: its config, prefix cache and metrics counters. `note` holds a short
    description of the last answer (prompt and cached tokens, or the error) for a server log."""

    def __init__(self, model: str = MODEL, *, max_model_len: int = 16384, prefix_caching: bool = True,
                 prompt_tokens_details: bool = False, gpu_memory_utilization: float = 0.9,
                 dev_mode: bool = False, token_ids: bool = True):
        super().__init__()
        self.model, self.max_model_len, self.prefix_caching = model, max_model_len, prefix_caching
        self.prompt_tokens_details, self.gpu_memory_utilization = prompt_tokens_details, gpu_memory_utilization
        self.dev_mode, self.token_ids = dev_mode, token_ids
        self.cache: set[bytes] = set()
        self.started = time.time()
        self.counts = {"queries": 0, "hits": 0, "prompt": 0, "generation": 0, "stop": 0, "length": 0}
        self.note = ""

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        self.note = ""
        if request.method == "GET":
            if path == "/health":
                return httpx.Response(200)
            if path == "/version":
                return httpx.Response(200, json={"version": "0.11.0"})
            if path == "/v1/models":
                return httpx.Response(200, json=self.models())
            if path == "/metrics":
                return httpx.Response(200, text=self.metrics(), headers={"content-type": METRICS_TYPE})
            if path in ("/tokenize", "/v1/completions", "/reset_prefix_cache"):
                return httpx.Response(405, json={"detail": "Method Not Allowed"})
            return httpx.Response(404, json={"detail": "Not Found"})
        if path == "/reset_prefix_cache" and self.dev_mode:
            self.cache.clear()
            return httpx.Response(200)
        if path not in ("/tokenize", "/v1/completions"):
            return httpx.Response(404, json={"detail": "Not Found"})
        try:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequestError", "the request body must be a JSON object")
            if path == "/tokenize":
                return httpx.Response(200, json=self.tokenize(body))
            answer, self.note = self.complete(body)
            return httpx.Response(200, json=answer)
        except ApiError as exc:
            self.note = exc.body["error"]["message"][:120]
            return httpx.Response(exc.status, json=exc.body)
        except (ValueError, TypeError) as exc:  # a field of the wrong type
            self.note = f"bad request: {exc}"[:120]
            return httpx.Response(400, json=ApiError(400, "BadRequestError", f"invalid request: {exc}").body)

    def check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.model:
            raise ApiError(404, "NotFoundError", f"The model `{name}` does not exist.")

    def lookup_and_insert(self, ids: list[int]) -> int:
        if not self.prefix_caching:
            return 0
        keys = block_keys(ids)
        hit = 0
        for key in keys[: max(len(ids) - 1, 0) // BLOCK]:
            if key not in self.cache:
                break
            hit += BLOCK
        self.cache.update(keys)
        self.counts["queries"] += len(ids)
        self.counts["hits"] += hit
        return hit

    def tokenize(self, body: dict) -> dict:
        self.check_model(body)
        if not isinstance(body.get("prompt"), str):
            raise ApiError(400, "BadRequestError", "'prompt' must be a string")
        pieces = tokens_of(body["prompt"])
        return {"count": len(pieces), "max_model_len": self.max_model_len,
                "tokens": [token_id(t) for t in pieces],
                "token_strs": pieces if body.get("return_token_strs") else None}

    def complete(self, body: dict) -> tuple[dict, str]:
        self.check_model(body)
        prompt, limit = body.get("prompt"), self.max_model_len
        if not isinstance(prompt, str):
            raise ApiError(400, "BadRequestError", "this fake takes 'prompt' as one string")
        ids = [token_id(t) for t in tokens_of(prompt)]
        n, max_tokens, k = len(ids), body.get("max_tokens"), body.get("logprobs")
        if n >= limit:
            raise ApiError(400, "BadRequestError", f"This model's maximum context length is {limit} tokens. "
                           f"However, your request has {n} input tokens. Please reduce the length of the input messages.")
        if max_tokens is not None and n + max_tokens > limit:
            raise ApiError(400, "BadRequestError", f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. "
                           f"This model's maximum context length is {limit} tokens and your request has {n} input "
                           f"tokens ({max_tokens} > {limit} - {n}).")
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise ApiError(400, "BadRequestError", f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}")
        hit = self.lookup_and_insert(ids)
        emitted = tokens_of(WARM_TEXT if hit else COLD_TEXT)
        finish, stop_reason = "stop", None
        if max_tokens is not None and len(emitted) > max_tokens:
            emitted, finish = emitted[:max_tokens], "length"
        text = "".join(emitted)
        stops = [body["stop"]] if isinstance(body.get("stop"), str) else list(body.get("stop") or ())
        found = [(text.find(s), s) for s in stops if s and s in text]
        if found:
            cut, stop_reason = min(found)
            text, finish = text[:cut], "stop"
            ends = itertools.accumulate(len(t) for t in emitted)  # keep the tokens up to the stop string's end
            emitted = [t for t, end in zip(emitted, ends) if end - len(t) < cut + len(stop_reason)]
        self.counts.update(prompt=self.counts["prompt"] + n, generation=self.counts["generation"] + len(emitted))
        self.counts[finish] += 1
        with_ids = bool(body.get("return_token_ids")) and self.token_ids
        cached = {"cached_tokens": hit} if self.prompt_tokens_details and hit > 0 else None
        choice = {"index": 0, "text": text, "logprobs": logprobs(emitted, k), "finish_reason": finish,
                  "stop_reason": stop_reason, "token_ids": [token_id(t) for t in emitted] if with_ids else None,
                  "prompt_logprobs": None, "prompt_token_ids": ids if with_ids else None}
        usage = {"prompt_tokens": n, "total_tokens": n + len(emitted), "completion_tokens": len(emitted),
                 "prompt_tokens_details": cached}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.model, "choices": [choice], "service_tier": None, "system_fingerprint": None,
                "usage": usage, "kv_transfer_params": None}, f"prompt_tokens={n} cached_tokens={hit}"

    def models(self) -> dict:
        created = int(self.started)
        permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": created,
                      "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                      "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                      "organization": "*", "group": None, "is_blocking": False}
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": created,
                                            "owned_by": "vllm", "root": self.model, "parent": None,
                                            "max_model_len": self.max_model_len, "permission": [permission]}]}

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        c = self.counts
        lines = ["# HELP python_gc_objects_collected_total Objects collected during gc",
                 "# TYPE python_gc_objects_collected_total counter",
                 *(f'python_gc_objects_collected_total{{generation="{g}"}} 0.0' for g in range(3))]

        def family(name: str, kind: str, text: str, value: float, extra: str = "") -> None:
            lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{labels}{extra}}} {float(value)!r}"])

        family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", 0)
        family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0)
        family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", 0)
        for key, name, what in (("queries", "queries", "queried"), ("hits", "hits", "cached")):
            text = f"Prefix cache {name}, in terms of number of {what} tokens."
            family(f"vllm:prefix_cache_{name}_total", "counter", text, c[key])
            family(f"vllm:prefix_cache_{name}_created", "gauge", text, self.started)
        family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", 0)
        family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", c["prompt"])
        family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", c["generation"])
        family("vllm:request_success_total", "counter", "Count of successfully processed requests.", c["stop"],
               ',finished_reason="stop"')
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(c["length"])!r}')
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="abort"}} 0.0')
        config = {"block_size": BLOCK, "cache_dtype": "auto", "calculate_kv_scales": "False", "cpu_offload_gb": 0,
                  "enable_prefix_caching": str(self.prefix_caching), "engine": "0",
                  "gpu_memory_utilization": self.gpu_memory_utilization, "num_gpu_blocks": 4096,
                  "prefix_caching_hash_algo": "sha256", "swap_space": 4}
        lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                  "# TYPE vllm:cache_config_info gauge",
                  "vllm:cache_config_info{" + ",".join(f'{k}="{v}"' for k, v in config.items()) + "} 1.0"]
        return "\n".join(lines) + "\n"


def logprobs(emitted: list[str], k: int | None) -> dict | None:
    if k is None:
        return None
    offsets, values, tops, at = [], [], [], 0
    for i, token in enumerate(emitted):
        value = round(-0.01 * (1 + i % 7), 6)
        top = {token: value}
        for filler in FILLERS:
            if len(top) >= max(k, 1):
                break
            top.setdefault(filler, round(value - 2.0 * len(top), 6))
        offsets.append(at)
        values.append(value)
        tops.append(top)
        at += len(token)
    return {"text_offset": offsets, "token_logprobs": values, "tokens": list(emitted), "top_logprobs": tops}
