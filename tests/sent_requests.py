"""What every request record of a real run must show about the request sent (used by each protocol kind's
run test): it fits its procedure's record model, its body carries the protocol's seed, its prompt hash is
that of the exact prompt bytes sent, and it says when it was sent and how long it took."""

from __future__ import annotations

import json
from pathlib import Path

from kit.core.digests import sha256_text
from kit.engines.base import prompt_text
from kit.protocols.kinds import validate_record
from kit.record.files import read_records


def check_sent(run_dir: Path, seed: int) -> int:
    """Check every request record of the run folder; returns how many there were."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    checked = 0
    for info in manifest["passes"].values():
        if not (run_dir / info["file"]).exists():
            continue
        for record in read_records(run_dir / info["file"]).records:
            validate_record(record)
            body = record["request"]["body"]
            assert (body["options"] if "options" in body else body)["seed"] == seed, (info["file"], record["seq"])
            assert record["prompt_sha256"] == sha256_text(prompt_text(body))
            assert record["started"].endswith("+00:00") and record["wall_seconds"] >= 0
            checked += 1
    return checked
