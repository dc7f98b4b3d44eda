"""Time `kit demo` end to end and to its first item verdict (model load included), per CPU backend.

Usage: python bench/bench_demo.py [--runs N] [--cpu-backend wheel|portable|auto|all]

`all` (the default) times the wheel's own CPU backend and the portable AVX2 build side by side on this
machine, runs interleaved (wheel, portable, wheel, ...) so both see the same load. A backend this CPU
cannot run is reported as such (with the extensions it lacks), never timed; the portable backend is
built first if it is not yet (the build is timed on its own line, not inside a demo). Prints one JSON
line per run and a summary table. Targets: first verdict within 60 s, the demo under 5 minutes on two cores.
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


def one_run(backend: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "demo", "--out", out, "--cpu-backend", backend],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "COLUMNS": "200"})
        first, ran = None, None
        for line in proc.stdout:
            if first is None and "recompute " in line and ("reproduce" in line or "NOT" in line):
                first = time.monotonic() - started
            if ran is None and line.startswith("CPU backend: "):
                ran = line.split(": ", 1)[1].split()[0]
        code = proc.wait()
        return {"cpu_backend": backend, "ran": ran, "exit": code,
                "first_verdict_s": round(first, 1) if first else None,
                "total_s": round(time.monotonic() - started, 1)}


def runnable(backend: str) -> str | None:
    """Why this CPU cannot run the backend, or None."""
    from kit.launch.cpu import cpu_backend  # noqa: PLC0415

    lacking = cpu_backend.missing(backend, cpu_backend.cpu_flags())
    return f"cannot run here: this CPU lacks {', '.join(lacking)}" if lacking else None


def ensure_portable() -> dict | None:
    from kit.launch.llamacpp import embedded  # noqa: PLC0415
    from kit.launch.cpu import portable_backend

    if portable_backend.built_library() is not None:
        return None
    started = time.monotonic()
    embedded.locate_portable("portable", "bench_demo.py", say=lambda line: print(line, file=sys.stderr))
    return {"built": "portable", "build_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="demo runs per backend")
    parser.add_argument("--cpu-backend", choices=["auto", "wheel", "portable", "all"], default="all")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    backends = ["wheel", "portable"] if args.cpu_backend == "all" else [args.cpu_backend]
    refused = {b: why for b in backends if b != "auto" and (why := runnable(b))}
    timed = [b for b in backends if b not in refused]
    if "portable" in timed and (built := ensure_portable()):
        print(json.dumps(built))
    runs = [one_run(backend) for _ in range(args.runs) for backend in timed]
    for run in runs:
        print(json.dumps(run))
    print(f"{'backend':<10} {'runs':>4} {'median first verdict s':>23} {'median total s':>15}  note")
    for backend in backends:
        if backend in refused:
            print(f"{backend:<10} {0:>4} {'-':>23} {'-':>15}  {refused[backend]}")
            continue
        mine = [r for r in runs if r["cpu_backend"] == backend and r["exit"] == 0]
        firsts = [r["first_verdict_s"] for r in mine if r["first_verdict_s"] is not None]
        failed = sum(1 for r in runs if r["cpu_backend"] == backend and r["exit"] != 0)
        print(f"{backend:<10} {len(mine):>4} {statistics.median(firsts) if firsts else '-':>23} "
              f"{statistics.median([r['total_s'] for r in mine]) if mine else '-':>15}  "
              f"{f'{failed} failed' if failed else ''}")


if __name__ == "__main__":
    main()
