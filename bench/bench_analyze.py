"""Time `kit analyze` end to end on paper-scale synthetic records, with the paper's replicate counts.

Generates the records first unless they exist (bench/synthetic_records.py: the full grid, an
11-history x 4-format sweep with top-5 log-probabilities, the reset control and the GSM8K bridge),
then runs `kit analyze` on all of them in a subprocess and prints the wall time, the size of the
records read, and the per-step times from findings.json (the slowest first).

    PYTHONPATH=. python bench/bench_analyze.py [--data /tmp/kit-bench-records] [--out DIR]

Target: under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.jsonl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/kit-bench-records"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if not (args.data / "sweep").is_dir():
        started = time.monotonic()
        subprocess.run([sys.executable, str(Path(__file__).with_name("synthetic_records.py")), str(args.data)],
                       check=True, env=env)
        print(f"generated records in {time.monotonic() - started:.0f} s")
    out = args.out or args.data / "analysis"
    parts = [str(args.data / p) for p in ("grid", "sweep", "reset", "bridge")]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "analyze", *parts, "--out", str(out)], env=env,
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
    findings = json.loads((out / "findings.json").read_text())
    steps = sorted(findings["timings_seconds"].items(), key=lambda kv: -kv[1])
    print(json.dumps({"exit": proc.returncode, "wall_seconds": round(wall, 1), "cpus": os.cpu_count(),
                      "records_gb": round(folder_bytes(args.data) / 1e9, 2), "runs": len(findings["runs"]),
                      "settings": findings["settings"], "slowest_step": steps[0][0] if steps else None,
                      "steps_seconds": dict(steps)}, indent=1))


if __name__ == "__main__":
    main()
