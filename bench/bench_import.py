"""Time what a run pays to import the kit: `import kit.run.runner` and `import kit.protocols.kinds` (and what
kit analyze and kit verify import to read), each in a fresh interpreter, against `python -c pass` (the interpreter's own start-up) side by side.

Not a test: prints the median wall seconds of several subprocess runs, and what each import adds.

    PYTHONPATH=. python bench/bench_import.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATEMENTS = ("pass", "import kit.protocols.kinds", "import kit.run.runner",
              # what kit analyze and kit verify import to read run folders and bundles (no engine client)
              "import kit.analysis.findings", "import kit.bundle.verify", "import kit.protocols.harness.calls")


def wall_seconds(statement: str, runs: int) -> list[float]:
    """Wall seconds of `python -c statement`, once per run, each in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], env=env, check=True)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh interpreters per statement (default 9)")
    args = parser.parse_args()
    wall_seconds("import kit.run.runner", 1)  # warm the file cache and __pycache__ first
    medians = {statement: statistics.median(wall_seconds(statement, args.runs)) for statement in STATEMENTS}
    baseline = medians["pass"]
    print(f"median wall seconds of {args.runs} fresh interpreters ({sys.executable})")
    for statement, seconds in medians.items():
        added = "baseline" if statement == "pass" else f"+{seconds - baseline:.3f} s over the baseline"
        print(f"  python -c {statement!r:<40} {seconds:.3f} s   {added}")


if __name__ == "__main__":
    main()
