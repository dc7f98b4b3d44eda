"""Re-measure the probe: run every bad protocol file and bad option line of the corpus through `kit` as a
subprocess, as a user would, and print how each category ended; then the adversarial corpus
(tests/adversarial: hostile bundles, run folders, protocol files, import files and engine answers), counted by
class and outcome.

    PYTHONPATH=. python bench/probe_bounds.py [--timeout SECONDS] [--only adversarial|options]

Columns: tried / clear error (non-zero exit, one line `kit: error: ...` naming the key or option) /
traceback / hang (ran past the timeout) / silently accepted (exit 0, or an unclear error) / data lost
(anything written under --out or the other scratch folders before the refusal).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.adversarial.corpus import OUTCOMES, all_cases, run_case
from tests.bounds.cli_probe import BAD_OPTIONS, BAD_PROTOCOLS, expected, fill, places, written

COLUMNS = ("tried", "clear error", "traceback", "hang", "silently accepted", "data lost")


def outcome(args: list[str], needle: str, timeout: float) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with places(root) as where:
            try:
                done = subprocess.run([sys.executable, "-m", "kit.cli", *fill(args, where)], capture_output=True,
                                      text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return "hang", ""
        text = done.stdout + done.stderr
        lines = [line for line in text.splitlines() if line.strip()]
        if "Traceback" in text:
            return "traceback", text[-300:]
        if written(root):
            return "data lost", lines[-1] if lines else ""
        if done.returncode != 0 and len(lines) == 1 and lines[0].startswith("kit: error: ") and needle in lines[0]:
            return "clear error", lines[0]
        return "silently accepted", " | ".join(lines)[-300:]


def options_table(timeout: float, verbose: bool) -> None:
    categories = {
        "protocol files": [(["run", str(p), "--out", "{out}"], expected(p)) for p in BAD_PROTOCOLS],
        "option values": [(case["args"], case["expect"]) for case in BAD_OPTIONS],
    }
    print("| category | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, cases in categories.items():
        counts = Counter()
        for args, needle in cases:
            kind, line = outcome(args, needle, timeout)
            counts[kind] += 1
            if verbose or kind != "clear error":
                print(f"  {kind}: {' '.join(args)} -> {line}", file=sys.stderr)
        print(f"| {name} | {len(cases)} | " + " | ".join(str(counts[c]) for c in COLUMNS[1:]) + " |")


def adversarial_table(verbose: bool) -> None:
    """The adversarial corpus by class: tried, then each outcome (touched counts a killed process too)."""
    by_class: dict[str, Counter] = {}
    for case in all_cases():
        with tempfile.TemporaryDirectory() as scratch:
            kind, detail = run_case(case, Path(scratch))
        by_class.setdefault(case.cls, Counter())[kind] += 1
        if verbose or kind != "clear":
            print(f"  {kind}: {case.id} -> {detail}", file=sys.stderr)
    print("| class | tried | " + " | ".join(OUTCOMES) + " |")
    print("|---" * (len(OUTCOMES) + 2) + "|")
    total = Counter()
    for name, counts in sorted(by_class.items()):
        total += counts
        print(f"| {name} | {sum(counts.values())} | " + " | ".join(str(counts[c]) for c in OUTCOMES) + " |")
    print(f"| all | {sum(total.values())} | " + " | ".join(str(total[c]) for c in OUTCOMES) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--only", choices=("adversarial", "options"))
    args = parser.parse_args()
    if args.only != "adversarial":
        options_table(args.timeout, args.verbose)
        print()
    if args.only != "options":
        adversarial_table(args.verbose)


if __name__ == "__main__":
    main()
