"""Time `kit demo` end to end and the time to its first item verdict (model load included).

Usage: python bench/bench_demo.py [--runs N]. Prints one JSON line per run and a summary. The target
is a first verdict within 60 s of launch and the whole demo under 5 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run() -> dict:
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "demo", "--out", out], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"})
        first = None
        for line in proc.stdout:
            if first is None and "recompute " in line and ("reproduce" in line or "NOT" in line):
                first = time.monotonic() - started
        code = proc.wait()
        return {"exit": code, "first_verdict_s": round(first, 1) if first else None,
                "total_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    runs = [one_run() for _ in range(parser.parse_args().runs)]
    for run in runs:
        print(json.dumps(run))
    totals = [r["total_s"] for r in runs]
    firsts = [r["first_verdict_s"] for r in runs if r["first_verdict_s"] is not None]
    print(json.dumps({"runs": len(runs), "median_total_s": statistics.median(totals),
                      "median_first_verdict_s": statistics.median(firsts) if firsts else None}))


if __name__ == "__main__":
    main()
