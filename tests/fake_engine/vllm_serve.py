"""A fake vLLM 0.11.0 server process for tests (tests/fake_engine/vllm.py; its docstring describes
the fake model), and `serve()`, which runs one for the length of a `with` block:

    with serve(tmp_path, "--enable-prompt-tokens-details", "--no-enable-prefix-caching") as url:
        VllmEngine(url, prefix_caching=False)...

`command()` gives the argv that starts it, for code that launches servers itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "vllm.py"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
_STARTED = re.compile(r"Starting vLLM API server on (http://\S+)")


def command(*flags: str, model: str = MODEL) -> list[str]:
    """The argv of `vllm serve MODEL *flags`, played by the fake."""
    return [sys.executable, str(SERVER), model, *flags]


@contextlib.contextmanager
def serve(tmp_path: Path, *flags: str, env: Mapping[str, str] | None = None, model: str = MODEL,
          timeout_s: float = 10.0) -> Iterator[str]:
    """Run the fake server with `vllm serve` `flags` until the block ends; yields its base URL
    ("http://127.0.0.1:PORT"), once GET /health answers 200.

    It binds 127.0.0.1 on a free port unless `flags` name `--host` / `--port`. `env` is added to
    this process's environment (e.g. {"VLLM_SERVER_DEV_MODE": "1"}). Its stdout and stderr go to
    `tmp_path / "fake-vllm-N.log"` (the first free N). The process is always killed at the end;
    RuntimeError (with the log's tail) if it exits or does not answer within `timeout_s`.
    """
    extra = [*(() if "--host" in flags else ("--host", "127.0.0.1")), *(() if "--port" in flags else ("--port", "0"))]
    log_path = next(p for n in range(1000) if not (p := Path(tmp_path) / f"fake-vllm-{n}.log").exists())
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command(*flags, *extra, model=model), stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    try:
        yield _wait_ready(process, log_path, timeout_s)
    finally:
        process.kill()
        process.wait(timeout=10)


def _wait_ready(process: subprocess.Popen, log_path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        match = _STARTED.search(log_path.read_text(errors="replace"))
        if match:
            url = match.group(1).replace("://0.0.0.0:", "://127.0.0.1:")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.02)
    tail = log_path.read_text(errors="replace")[-2000:]
    state = f"exited with {process.returncode}" if process.poll() is not None else f"not ready in {timeout_s} s"
    raise RuntimeError(f"fake vLLM server {state}; log {log_path}:\n{tail}")
