"""The calls -> records rule of a harness import (kit.protocols.harness.calls): the import parses each call
twice (its scan checks and orders them; its record is made from the checked copy in the order the scan found),
and kit verify's remaking (the order found again) writes the same bytes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kit.importers import determinism_harness as importer
from kit.importers.determinism_harness import HarnessFiles, import_run
from kit.protocols.harness import calls
from kit.record.files import RecordWriter
from kit.record.manifest import Manifest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harness"


def test_an_import_parses_each_call_twice_and_verifys_remaking_writes_the_same_records(tmp_path, monkeypatch):
    parsed: list[str] = []
    real = calls.check_call

    def counted(line, where, run_name):
        parsed.append(where)
        return real(line, where, run_name)

    monkeypatch.setattr(calls, "check_call", counted)
    monkeypatch.setattr(importer, "check_call", counted)
    source = FIXTURES / "fixture-churn-ab.jsonl"
    run_dir = import_run(HarnessFiles.beside(source), tmp_path / "runs")
    n = sum(1 for line in source.read_text().splitlines() if line.strip())
    times = Counter(int(where.rsplit(":", 1)[1]) for where in parsed)
    # each call by the scan and for its record; the scan reads the first call in execution order again for its mode
    assert n == 8 and sorted(times) == list(range(1, n + 1)) and sorted(times.values()) == [2] * (n - 1) + [3]

    run = Manifest.load(run_dir).run
    (side,) = run.imported.runs
    kept = run_dir / "records" / "imported"
    study = [(side["calls"], side["run_name"], json.loads((kept / source.name.replace(".jsonl", ".manifest.json"))
                                                           .read_text()))]
    remade = tmp_path / "remade.jsonl"
    with RecordWriter(remade, sync_each=False) as writer:
        for record in calls.derive(kept, study, run.run_id):  # as kit verify does
            writer.write(record)
    assert remade.read_bytes() == (run_dir / "records" / "calls.jsonl").read_bytes()

