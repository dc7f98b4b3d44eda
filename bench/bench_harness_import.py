"""Time and peak memory of `kit import determinism-harness` on a generated calls file of N lines (one
harness call each, made from tests/fixtures/harness's first call with its schedule_index, text and
text_sha256 varied), in a fresh process, with the manifest and done marker beside it.

Not a test: prints per size the file's bytes, the wall seconds of the import (which also computes the
run's results) and the peak resident memory of the `kit` process (ru_maxrss of the child).

    PYTHONPATH=. python bench/bench_harness_import.py [--lines 100000 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "harness" / "fixture-churn-ab"


def write_calls(folder: Path, lines: int) -> Path:
    """A calls file of `lines` calls with its manifest and done marker; its path."""
    template = json.loads(Path(f"{FIXTURE}.jsonl").read_text().splitlines()[0])
    calls = folder / "bench.jsonl"
    with calls.open("w") as out:
        for index in range(lines):
            text = f"answer {index % 7}"
            out.write(json.dumps({**template, "run_name": "bench", "schedule_index": index, "text": text,
                                  "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                                  "cell": template["cell"].replace("blocked", ("blocked", "churn")[index % 2])}) + "\n")
    manifest = json.loads(Path(f"{FIXTURE}.manifest.json").read_text())
    (folder / "bench.manifest.json").write_text(json.dumps({**manifest, "run_name": "bench"}))
    (folder / "bench.done.json").write_text(json.dumps({"run_name": "bench", "complete": True, "done": lines,
                                                        "expected": lines, "failures": 0}))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000], help="calls per file (default 100000)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for lines in args.lines:
        folder = Path(tempfile.mkdtemp(prefix="kit-bench-import-"))
        try:
            calls = write_calls(folder, lines)
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "kit.cli", "import", "determinism-harness", str(calls),
                                   "--out", str(folder / "out")], env=env, capture_output=True, text=True,
                                  check=False)
            wall = time.perf_counter() - started
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            ended = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
            print(f"{lines:>9} calls  {calls.stat().st_size / 2**20:8.1f} MiB  {wall:7.1f} s  "
                  f"peak RSS {peak:7.0f} MiB (largest child so far)  {ended}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
