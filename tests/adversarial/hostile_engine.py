"""A hostile or broken llama-server on loopback, for the adversarial corpus (standard library only).

It speaks llama.cpp's shapes (REFERENCE.md §1: `/health`, `/props`, `/apply-template`, `/tokenize`,
`/completion`) and answers them well, except where its scenario says otherwise:

- `huge`: `/completion` streams an endless body (gigabytes if read).
- `drip`: `/completion` sends its headers, then one byte of its body every `DRIP_S` seconds, forever.
- `drip-headers`: `/completion` sends its status line and headers one byte every `DRIP_S` seconds.
- `no-content`: HTTP 200 with `timings` but no `content` or `tokens`.
- `truncated`: the JSON body cut in the middle.
- `nan`: a body whose `timings.prompt_ms` is NaN.
- `array`: the body is `[]`.
- `wrong-types`: `content` a number, `tokens` a string, `timings.cache_n` a string.
- `no-logprob`: a probability entry without `logprob`.
- `markup-build`: `/props` `build_info` carries Rich markup and terminal escape sequences; all else is good.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCENARIOS = ("huge", "drip", "drip-headers", "no-content", "truncated", "nan", "array", "wrong-types", "no-logprob",
             "markup-build")
DRIP_S = 2.0
HOSTILE_BUILD = "b1-fake[/] [bold red]owned[/]\x1b]0;owned title\x07\x1b[2J\x1b[31mred"
PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def _good_completion(body: dict) -> dict:
    """A well-formed `/completion` answer of `n_predict` tokens, in the shape llama-server 7e4c0a9 gives."""
    n = max(1, min(int(body.get("n_predict") or 1), 8))
    warm = body.get("cache_prompt") is not False
    entries = [{"id": 100 + i, "token": f"t{i}", "bytes": [116], "logprob": -0.5,
                "top_logprobs": [{"id": 100 + i, "token": f"t{i}", "bytes": [116], "logprob": -0.5}]}
               for i in range(n)]
    good = {"index": 0, "content": "".join(e["token"] for e in entries), "tokens": [e["id"] for e in entries],
            "id_slot": 0, "stop": True, "stop_type": "limit", "tokens_cached": 20 + n,
            "timings": {"cache_n": 19 if warm else 0, "prompt_n": 1 if warm else 20, "prompt_ms": 2.0 if warm else 40.0,
                        "predicted_n": n, "predicted_ms": 10.0 * n}}
    if body.get("n_probs"):  # as llama-server: the entries only when asked for
        good["completion_probabilities"] = entries
    return good


def _broken(scenario: str, good: dict) -> bytes:
    if scenario == "no-content":
        return json.dumps({"timings": good["timings"], "stop_type": "limit", "tokens_cached": 21}).encode()
    if scenario == "truncated":
        return json.dumps(good).encode()[:60]
    if scenario == "nan":
        return json.dumps(good).replace('"prompt_ms": 2.0', '"prompt_ms": NaN').replace(
            '"prompt_ms": 40.0', '"prompt_ms": NaN').encode()
    if scenario == "array":
        return b"[]"
    if scenario == "wrong-types":
        return json.dumps({**good, "content": 5, "tokens": "abc",
                           "timings": {**good["timings"], "cache_n": "19"}}).encode()
    if scenario == "no-logprob":
        entries = [{k: v for k, v in entry.items() if k != "logprob"} for entry in good.get("completion_probabilities", [])]
        return json.dumps({**good, "completion_probabilities": entries}).encode()
    return json.dumps(good).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    scenario = "markup-build"
    drip_s = DRIP_S

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, payload: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._send(b'{"status": "ok"}')
        elif self.path.startswith("/props"):
            build = HOSTILE_BUILD if self.scenario == "markup-build" else "b1-7e4c0a9"
            self._send(json.dumps({"build_info": build, "model_path": "/models/m.gguf", "total_slots": 1,
                                   "chat_template": "{{ messages }}",
                                   "default_generation_settings": {"n_ctx": 4096}}).encode())
        else:
            self._send(b'{"error": {"message": "not found"}}', 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/apply-template":
            self._send(json.dumps({"prompt": PROMPT}).encode())
        elif self.path == "/tokenize":
            self._send(json.dumps({"tokens": list(range(20))}).encode())
        elif self.path == "/completion":
            self._completion(body)
        else:
            self._send(b'{"error": {"message": "not found"}}', 404)

    def _completion(self, body: dict) -> None:
        try:
            if self.scenario == "huge":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
                self.wfile.write(b'{"content": "')
                chunk = b"A" * (1 << 20)
                for _ in range(4096):  # 4 GiB if anyone read it all
                    self.wfile.write(chunk)
            elif self.scenario == "drip":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
                self._drip(b'{"content": "' + b"a" * 10_000)
            elif self.scenario == "drip-headers":
                self._drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 10_000)
            else:
                self._send(_broken(self.scenario, _good_completion(body)))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _drip(self, data: bytes) -> None:
        for byte in data:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(self.drip_s)


class HostileEngine:
    """A hostile llama-server for one scenario, serving on 127.0.0.1 in a thread until `stop()`."""

    def __init__(self, scenario: str, drip_s: float = DRIP_S):
        """`drip_s`: the seconds between two bytes of a drip (the corpus's cases assume DRIP_S)."""
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}")
        handler = type("Handler", (_Handler,), {"scenario": scenario, "drip_s": drip_s})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
