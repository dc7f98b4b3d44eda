#!/usr/bin/env python3
"""A stand-in llama-server that dies by SIGILL, as the wheel's CPU backend does on a CPU lacking an
extension it uses. FAKE_SIGILL=start: at once, before /health answers; FAKE_SIGILL=request: after
/health and /props answer, on the first POST (the first request that would compute anything)."""

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def die() -> None:
    signal.signal(signal.SIGILL, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGILL)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": {"status": "ok"},
                "/props": {"build_info": "b1-7e4c0a9", "model_path": "fake.gguf", "total_slots": 1}}.get(self.path)
        data = json.dumps(body or {}).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        die()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if os.environ.get("FAKE_SIGILL") == "start":
        print("load_model: loading model", flush=True)
        die()
    port = int(sys.argv[sys.argv.index("--port") + 1])
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
