"""What must be equal between two runs of the same plan, wherever their passes ran: every record but its
timing fields and run id, every pass's manifest entry but its times, launch, executor and its server's random id, the results."""

import json
from pathlib import Path
from typing import Any

from kit.record.files import read_records

TIMING = {"run_id", "started", "wall_seconds"}
COMPLETION_TIMING = {"prefill_ms", "decode_ms"}
PASS_VARIES = {"started", "ended", "launch", "executor"}


def _record(record: dict[str, Any]) -> dict[str, Any]:
    kept = {key: value for key, value in record.items() if key not in TIMING}
    if "completion" in record:  # a request record (an episode line has none)
        kept["completion"] = {key: value for key, value in record["completion"].items()
                              if key not in COMPLETION_TIMING}
        kept["raw"] = {key: value for key, value in (record.get("raw") or {}).items() if key != "timings"}
    return kept


def records(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each records file of the run (superseded ones aside), its records without timing fields."""
    return {path.name: [_record(r) for r in read_records(path)]
            for path in sorted((run_dir / "records").glob("*.jsonl"))}


def _server(session: str) -> str:
    """A pass's server session without the server's random id (`on1/1a2b3c4d` -> `on1`): which passes shared it."""
    return session.split("/", 1)[0]


def passes(run_dir: Path) -> dict[str, dict[str, Any]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {pass_id: {key: _server(value) if key == "server_session" else value for key, value in info.items()
                      if key not in PASS_VARIES}
            for pass_id, info in manifest["passes"].items()}


def _strings(value: Any) -> bool:
    """A list of server sessions (a grid's `sessions`), not a count of them (the reset table's `sessions`)."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _run_free(value: Any) -> Any:
    """A results value without what differs between any two runs: servers' pids and random session ids."""
    if isinstance(value, dict):
        return {key: [_server(s) for s in item] if key == "sessions" and _strings(item) else _run_free(item)
                for key, item in value.items() if key != "pids"}
    return [_run_free(item) for item in value] if isinstance(value, list) else value


def table(run_dir: Path, name: str) -> dict[str, Any]:
    """The results file `name` but its run's identity; its list of passes in pass order (a table lists them in the
    manifest's order, the order Ray's tasks happened to start them: docs/ray.md, "What differs")."""
    found = json.loads((run_dir / "results" / name).read_text())
    kept = {key: _run_free(value) for key, value in found.items() if key not in ("run_id", "run_dir", "files")}
    if isinstance(kept.get("passes"), list) and all(isinstance(p, dict) and "pass" in p for p in kept["passes"]):
        kept["passes"] = sorted(kept["passes"], key=lambda p: p["pass"])
    return kept


def assert_same(got: Path, expected: Path, results: str) -> None:
    assert records(got) == records(expected)
    assert passes(got) == passes(expected)
    assert table(got, results) == table(expected, results)
