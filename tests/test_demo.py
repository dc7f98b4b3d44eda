"""The README's first path: `kit demo` on the embedded engine, as a person runs it."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.console_text import printed

pytestmark = pytest.mark.engine


def test_kit_demo_prints_verdicts_and_the_table_of_its_records(tmp_path):
    result = subprocess.run([sys.executable, "-m", "kit.cli", "demo", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert len(re.findall(r"^s[12] \d/6 arith-", out, re.M)) == 12  # one verdict line per item and session
    run_dir = next(tmp_path.glob("demo-*"))
    assert printed(f"run folder: {run_dir}", out)  # Rich folds a path longer than the line
    table = json.loads((run_dir / "results" / "reset_table.json").read_text())
    for row in table["sessions"]:
        assert row["status"] == "OK"
        cells = f"│ {row['session']} "
        line = next(line for line in out.splitlines() if line.startswith(cells))
        numbers = [int(n) for n in re.findall(r"\d+", line.split("OK", 1)[1])]
        assert numbers == [row["items"], row["recompute_reproduces"], row["hit_reproduces"], row["paths_differ"],
                           row["cache_caused"]]
