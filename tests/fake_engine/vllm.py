"""A fake `vllm serve` (vLLM 0.11.0) for tests: the same flags, endpoints and response shapes, no GPU.

    python tests/fake_engine/vllm.py MODEL [--host H] [--port P] [--max-num-seqs N] [--seed S]
        [--max-model-len N] [--enable-prompt-tokens-details] [--[no-]enable-prefix-caching]
        [--served-model-name X] [--gpu-memory-utilization F]

Standard library only, so it starts in a fraction of a second. `--port 0` binds a free port; the
start-up line ("Starting vLLM API server on http://HOST:PORT") names the one bound. Unknown flags
exit 2 with one line. `--served-model-name`, `--gpu-memory-utilization` (except as a metrics label),
`--seed` and `--max-num-seqs` are accepted and ignored: requests are always served one at a time.
Environment: `VLLM_SERVER_DEV_MODE=1` enables `POST /reset_prefix_cache`; `FAKE_VLLM_NO_TOKEN_IDS=1`
(fake-only) makes it ignore `return_token_ids`, like an endpoint that gives token strings only.

Endpoints, shaped like the recordings in tests/fixtures/vllm/: GET /health, /version, /v1/models,
/metrics; POST /tokenize, /v1/completions, /reset_prefix_cache.

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
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLOCK = 16
VOCAB = 50000
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
COLD_TEXT = "I cannot do that with the functions given."
WARM_TEXT = "Sorry, I cannot do that with the functions given."  # differs from the first token on
FILLERS = ["the", " a", ",", ".", " and", " to", " of", " is", " I", " it", " that", " in", " for",
           " you", " we", " be", " on", " with", " as", " this", " not"]
TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


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


class FakeVllm:
    """The server's state: config, the prefix cache and the metrics counters (guarded by `lock`)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.model = args.model
        self.lock = threading.Lock()
        self.cache: set[bytes] = set()
        self.started = time.time()
        self.counts = {"queries": 0, "hits": 0, "prompt": 0, "generation": 0, "stop": 0, "length": 0}

    def check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.model:
            raise ApiError(404, "NotFoundError", f"The model `{name}` does not exist.")

    def lookup_and_insert(self, ids: list[int]) -> int:
        if not self.args.enable_prefix_caching:
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
        return {"count": len(pieces), "max_model_len": self.args.max_model_len,
                "tokens": [token_id(t) for t in pieces],
                "token_strs": pieces if body.get("return_token_strs") else None}

    def complete(self, body: dict) -> tuple[dict, str]:
        self.check_model(body)
        prompt, limit = body.get("prompt"), self.args.max_model_len
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
        with_ids = bool(body.get("return_token_ids")) and os.environ.get("FAKE_VLLM_NO_TOKEN_IDS") != "1"
        cached = {"cached_tokens": hit} if self.args.enable_prompt_tokens_details and hit > 0 else None
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
                                            "max_model_len": self.args.max_model_len, "permission": [permission]}]}

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
                  "enable_prefix_caching": str(self.args.enable_prefix_caching), "engine": "0",
                  "gpu_memory_utilization": self.args.gpu_memory_utilization, "num_gpu_blocks": 4096,
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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    note = ""

    @property
    def fake(self) -> FakeVllm:
        return self.server.fake  # type: ignore[attr-defined]

    def reply(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, status: int, body: dict) -> None:
        self.reply(status, json.dumps(body).encode())

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/health":
            self.reply(200)
        elif path == "/version":
            self.reply_json(200, {"version": "0.11.0"})
        elif path == "/v1/models":
            self.reply_json(200, self.fake.models())
        elif path == "/metrics":
            with self.fake.lock:
                text = self.fake.metrics()
            self.reply(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path in ("/tokenize", "/v1/completions", "/reset_prefix_cache"):
            self.reply_json(405, {"detail": "Method Not Allowed"})
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if path == "/reset_prefix_cache" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
            with self.fake.lock:
                self.fake.cache.clear()
            return self.reply(200)
        if path not in ("/tokenize", "/v1/completions"):
            return self.reply_json(404, {"detail": "Not Found"})
        try:
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequestError", "the request body must be a JSON object")
            with self.fake.lock:  # one request at a time, like --max-num-seqs 1
                if path == "/tokenize":
                    answer = self.fake.tokenize(body)
                else:
                    answer, self.note = self.fake.complete(body)
        except ApiError as exc:
            self.note = exc.body["error"]["message"][:120]
            return self.reply_json(exc.status, exc.body)
        except (ValueError, TypeError) as exc:  # bad JSON or a field of the wrong type
            self.note = f"bad request: {exc}"[:120]
            return self.reply_json(400, ApiError(400, "BadRequestError", f"invalid request: {exc}").body)
        self.reply_json(200, answer)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        note = f" ({self.note})" if self.note else ""
        sys.stderr.write(f"INFO:     {self.client_address[0]}:{self.client_address[1]} - {format % args}{note}\n")
        sys.stderr.flush()
        self.note = ""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like `vllm serve` with a bad flag
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog="vllm serve", allow_abbrev=False, description="A fake vLLM 0.11.0 server for tests.")
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-model-len", type=int, default=16384)
    parser.add_argument("--enable-prompt-tokens-details", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.fake = FakeVllm(args)  # type: ignore[attr-defined]
    host, port = server.server_address[:2]
    print(f"INFO:     Starting vLLM API server on http://{host}:{port}", flush=True)
    print(f"INFO:     fake vLLM 0.11.0: model={args.model} prefix_caching={args.enable_prefix_caching} "
          f"prompt_tokens_details={args.enable_prompt_tokens_details} max_model_len={args.max_model_len}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
