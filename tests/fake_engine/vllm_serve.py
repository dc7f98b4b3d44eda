"""The fake vLLM model (tests/fake_engine/vllm.py) as a `vllm serve` process, for code that launches
servers itself (the kit's vLLM launchers, fake containers):

    python tests/fake_engine/vllm_serve.py MODEL [--host H] [--port P] [--max-num-seqs N] [--seed S]
        [--max-model-len N] [--enable-prompt-tokens-details] [--[no-]enable-prefix-caching]
        [--served-model-name X] [--gpu-memory-utilization F]

`--port 0` binds a free port; the start-up line ("Starting vLLM API server on http://HOST:PORT") names
the one bound. Unknown flags exit 2 with one line. `--served-model-name`, `--gpu-memory-utilization`
(except as a metrics label), `--seed` and `--max-num-seqs` are accepted and ignored: requests are always
served one at a time. Environment: `VLLM_SERVER_DEV_MODE=1` enables `POST /reset_prefix_cache`;
`FAKE_VLLM_NO_TOKEN_IDS=1` (fake-only) makes it ignore `return_token_ids`, like an endpoint that gives
token strings only. Each request is logged to stderr in uvicorn's style.

In a test, `serve(tmp_path, *flags)` runs one for the length of a `with` block and yields its URL;
`command(*flags)` gives the argv that starts it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

if __name__ == "__main__":  # run as a script: make the repository's `tests` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fake_engine.core import loopback_server  # noqa: E402
from tests.fake_engine.vllm import MODEL, VllmModel  # noqa: E402

SERVER = Path(__file__).resolve()
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
    fake = VllmModel(args.model, max_model_len=args.max_model_len, prefix_caching=args.enable_prefix_caching,
                     prompt_tokens_details=args.enable_prompt_tokens_details,
                     gpu_memory_utilization=args.gpu_memory_utilization,
                     dev_mode=os.environ.get("VLLM_SERVER_DEV_MODE") == "1",
                     token_ids=os.environ.get("FAKE_VLLM_NO_TOKEN_IDS") != "1")

    def log(line: str, response: object) -> None:
        note = f" ({fake.note})" if fake.note else ""
        sys.stderr.write(f"INFO:     {line}{note}\n")
        sys.stderr.flush()

    server = loopback_server(fake, args.host, args.port, log)
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
