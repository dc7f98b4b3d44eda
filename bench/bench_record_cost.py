"""The kit's own cost per request: from the request built to its record durable, engine time excluded.

A fake llama-server (a child process on loopback, HTTP/1.1 keep-alive) answers every `/completion`
instantly with one canned body of N tokens with top-K log-probabilities (the shape llama-server 7e4c0a9
answers, echoes of the prompt, ids and log-probabilities included). Side by side on that fake:

- bare httpx: `client.post(json=body)` and `response.json()`, nothing kept;
- the kit: `CompletionRequest` -> `LlamaCppEngine.complete()` -> `RecordWriter.answered()` (record built,
  echoes replaced by digests, written, flushed and synced before the loop moves on), records on this
  machine's disk (`--dir`, default a temporary folder in the system's temp dir), with the garbage
  collector paced as during a run (kit.run.gc_pacing).

Own cost = the kit's time per request minus its HTTP exchange (`Completion.sent.wall_seconds`: the fake
engine's and the transport's time). The parts of it are timed again on the canned body alone. On a
shared machine wall times include waiting for a core, so each loop's CPU time per request (this process
only; the fake engine runs in its own) is reported too.

    PYTHONPATH=. python bench/bench_record_cost.py [--requests 1000] [--tokens 256] [--top 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
          + "Explain prefix caching in one paragraph. " * 40 + "<|im_end|>\n<|im_start|>assistant\n")


def canned_body(tokens: int, top: int, prompt: str = PROMPT) -> bytes:
    """A llama-server `/completion` answer of `tokens` tokens with `top` alternatives each."""
    rng = random.Random(20261007)
    entries = []
    for _ in range(tokens):
        alternatives = sorted(({"id": rng.randrange(49152), "token": f" tok{rng.randrange(10**6)}",
                                "bytes": [32, 116, 111, 107], "logprob": -rng.random() * 8} for _ in range(top)),
                              key=lambda t: -t["logprob"])
        first = alternatives[0]
        entries.append({"id": first["id"], "token": first["token"], "bytes": first["bytes"],
                        "logprob": first["logprob"], "top_logprobs": alternatives})
    body = {"index": 0, "content": "".join(e["token"] for e in entries), "tokens": [e["id"] for e in entries],
            "id_slot": 0, "stop": True, "model": "fake.gguf", "tokens_predicted": tokens, "tokens_evaluated": 420,
            "generation_settings": {"n_predict": tokens, "seed": 42, "temperature": 0.0, "n_probs": top},
            "prompt": prompt, "has_new_line": False, "truncated": False, "stop_type": "limit", "stopping_word": "",
            "tokens_cached": 420 + tokens,
            "timings": {"cache_n": 0, "prompt_n": 420, "prompt_ms": 1.0, "predicted_n": tokens, "predicted_ms": 1.0},
            "completion_probabilities": entries}
    return json.dumps(body).encode()


def serve(tokens: int, top: int) -> None:
    """The fake engine: print the port, then answer every POST with the canned body."""
    answer = canned_body(tokens, top)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"mean_ms": round(statistics.fmean(ms), 3), "median_ms": round(statistics.median(ms), 3),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3)}


def cpu_per_request_ms(started_cpu: float, requests: int) -> float:
    return round((time.process_time() - started_cpu) / requests * 1000, 3)


def bare_loop(url: str, requests: int, tokens: int, top: int) -> tuple[list[float], float]:
    import httpx  # noqa: PLC0415

    body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 0.0, "seed": 42, "n_probs": top,
            "return_tokens": True, "cache_prompt": True}
    times = []
    with httpx.Client(base_url=url) as client:
        cpu = time.process_time()
        for _ in range(requests):
            started = time.perf_counter()
            client.post("/completion", json=body).json()
            times.append(time.perf_counter() - started)
        return times, cpu_per_request_ms(cpu, requests)


def kit_loop(url: str, requests: int, tokens: int, top: int, folder: Path) -> tuple[list[float], list[float], float]:
    """(seconds per request, of which the HTTP exchange, CPU ms per request) for the kit's path."""
    from kit.engines.base import CompletionRequest  # noqa: PLC0415
    from kit.engines.llamacpp import LlamaCppEngine  # noqa: PLC0415
    from kit.run.gc_pacing import fewer_collections  # noqa: PLC0415
    from kit.record.model import Gate, ResetRecord  # noqa: PLC0415
    from kit.record.files import RecordWriter  # noqa: PLC0415

    engine = LlamaCppEngine(url)
    totals, exchanges = [], []
    with RecordWriter(folder / "s1.jsonl", run_id="bench", pass_id="s1", protocol="reset") as writer, \
            fewer_collections():
        cpu = time.process_time()
        for index in range(requests):
            started = time.perf_counter()
            request = CompletionRequest(PROMPT, max_tokens=tokens, seed=42, cache_prompt=True, top_logprobs=top)
            completion = engine.complete(request)
            writer.answered(ResetRecord, completion, unit=f"item-{index}", step=0, gate=Gate(True),
                            phase="warm", phase_index=1, expect="warm")
            totals.append(time.perf_counter() - started)
            exchanges.append(completion.sent.wall_seconds)
        cpu_ms = cpu_per_request_ms(cpu, requests)
    engine.close()
    return totals, exchanges, cpu_ms


def parts(tokens: int, top: int, folder: Path, repeats: int = 300) -> dict[str, float]:
    """The kit's own steps on the canned body alone (ms per request: the mean of the best of five rounds;
    the sync's median too, as a shared disk's sync time varies most)."""
    import orjson  # noqa: PLC0415

    from kit.engines import llamacpp  # noqa: PLC0415
    from kit.engines.base import CompletionRequest, Sent  # noqa: PLC0415
    from kit.record.model import Gate, ResetRecord, answered  # noqa: PLC0415

    raw = canned_body(tokens, top)
    body = llamacpp.request_body(CompletionRequest(PROMPT, max_tokens=tokens, seed=42, top_logprobs=top))
    sent = Sent("/completion", body, "2026-01-01T00:00:00.000+00:00", 0.0)
    completion = llamacpp.normalize(orjson.loads(raw), sent)
    record = answered(ResetRecord, completion, run_id="b", pass_id="s1", protocol="reset", seq=0, unit="i",
                      step=0, gate=Gate(True), phase="warm", phase_index=1, expect="warm")
    line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    out = (folder / "parts.jsonl").open("ab")

    def durable() -> None:
        out.write(line)
        out.flush()
        os.fdatasync(out.fileno())

    steps = {"parse the answer (orjson)": lambda: orjson.loads(raw),
             "normalize it": lambda: llamacpp.normalize(orjson.loads(raw), sent),
             "build the record (echo checks, digests)": lambda: answered(
                 ResetRecord, completion, run_id="b", pass_id="s1", protocol="reset", seq=0, unit="i", step=0,
                 gate=Gate(True), phase="warm", phase_index=1, expect="warm"),
             "serialize it (orjson)": lambda: orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE),
             "write, flush, fdatasync": durable}
    result = {}
    for name, step in steps.items():
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(repeats):
                step()
            best = min(best, (time.perf_counter() - started) / repeats)
        result[name] = round(best * 1000, 3)
    syncs = []
    for _ in range(repeats):
        started = time.perf_counter()
        durable()
        syncs.append(time.perf_counter() - started)
    result["write, flush, fdatasync (median)"] = summary(syncs)["median_ms"]
    out.close()
    result["normalize it"] = round(result["normalize it"] - result["parse the answer (orjson)"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the records go (default: a temp folder)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.tokens, args.top)
        return
    fake = subprocess.Popen([sys.executable, __file__, "--serve", "--tokens", str(args.tokens), "--top", str(args.top)],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{fake.stdout.readline().strip()}"
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="kit-bench-records-") as tmp:
            folder = Path(tmp)
            bare_loop(url, 50, args.tokens, args.top)  # warm-up (imports, connection)
            kit_loop(url, 50, args.tokens, args.top, folder / "warm")
            bare, bare_cpu = bare_loop(url, args.requests, args.tokens, args.top)
            totals, exchanges, kit_cpu = kit_loop(url, args.requests, args.tokens, args.top, folder)
            own = [t - e for t, e in zip(totals, exchanges)]
            report = {"requests": args.requests, "tokens": args.tokens, "top_logprobs": args.top,
                      "answer_bytes": len(canned_body(args.tokens, args.top)), "records_dir": str(folder),
                      "record_bytes": (folder / "s1.jsonl").stat().st_size // args.requests,
                      "bare_httpx_per_request": summary(bare), "kit_per_request": summary(totals),
                      "kit_http_exchange": summary(exchanges), "kit_own_cost": summary(own),
                      "kit_minus_bare_mean_ms": round((statistics.fmean(totals) - statistics.fmean(bare)) * 1000, 3),
                      "cpu_ms_per_request": {"bare_httpx": bare_cpu, "kit": kit_cpu},
                      "own_cost_parts_ms": parts(args.tokens, args.top, folder),
                      "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    finally:
        fake.kill()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
