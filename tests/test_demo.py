"""The README's first path: `kit demo` on the embedded engine, as a person runs it (from a folder of their
own, in an 80-column terminal)."""

import json
import os
import re
import subprocess
import sys

import pytest

from kit.workloads.answers import extract
from tests.console_text import printed

pytestmark = pytest.mark.engine


def test_kit_demo_prints_verdicts_and_the_table_of_its_records(tmp_path):
    env = {**os.environ, "COLUMNS": "120"}
    result = subprocess.run([sys.executable, "-m", "kit.cli", "demo", "--out", "runs"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert len(re.findall(r"^s[12] \d/6 arith-", out, re.M)) == 12  # one verdict line per item and session
    run_dir = next((tmp_path / "runs").glob("demo-*"))
    assert printed(f"run folder: runs/{run_dir.name}", out)  # as --out was given; Rich may fold it
    table = json.loads((run_dir / "results" / "reset_table.json").read_text())
    for row in table["sessions"]:
        assert row["status"] == "OK"
        cells = f"│ {row['session']} "
        line = next(line for line in out.splitlines() if line.startswith(cells))
        numbers = [int(n) for n in re.findall(r"\d+", line.split("OK", 1)[1])]
        assert numbers == [row["items"], row["recompute_reproduces"], row["hit_reproduces"], row["paths_differ"],
                           row["cache_caused"]]

    # the CPU backend in one short line (its library path and digest are in the manifest)
    backend = next(line for line in out.splitlines() if line.startswith("CPU backend: "))
    assert len(backend) <= 120 and "sha256" not in backend

    # the correct counts come with why they read as they do: answers cut at 64 tokens, counted from the records
    cut = {}
    for session in ("s1", "s2"):
        scored = {}
        for line in (run_dir / "records" / f"{session}.jsonl").read_text().splitlines():
            record = json.loads(line)
            scored.setdefault((record["unit"], record["expect"]), record["completion"])
        cut[session] = sum(c["finish_reason"] == "length" and extract(c["text"])[0] is None  # the scorer's rule
                           for c in scored.values())
    flat = " ".join(out.split())
    if any(cut.values()):
        assert "correctness: answers cut at 64 tokens before any final answer ('#### n') count as wrong: " in flat
        for session, count in cut.items():
            assert (f"{count} of 12 in {session}" in flat) is (count > 0)

    # the last lines: whether the paper's qualitative findings hold on this run (not comparable in numbers:
    # SmolLM2, not Qwen2.5-7B), each of Table IV's four claims and the summary, after the bundle's line
    closing = flat[flat.rindex("qualitative: "):]
    assert closing.startswith("qualitative: ") and "(4 claims measured: Table IV" in closing
    assert "bundle:" not in closing and "Table IV, each path reproduces itself: " in flat
    reproduced = all(r["recompute_reproduces"] == r["items"] and r["hit_reproduces"] == r["items"]
                     for r in table["sessions"])
    assert ("does not hold: IV/each-path-reproduces" in closing) is (not reproduced)

    # the hint names the bundle so that `kit verify` finds it from the folder the user ran the demo in
    hint = re.search(r"check it with `kit verify ([^`]+)`", flat)
    assert hint is not None and hint.group(1) == f"runs/bundles/{run_dir.name}.tar.gz"
    verified = subprocess.run([sys.executable, "-m", "kit.cli", "verify", hint.group(1)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
