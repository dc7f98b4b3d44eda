"""The ladder's results, from the run folder only: every rung's contrasts and L2's fixes with their cost,
the headline, written to results/ladder.json and results/ladder.csv (one row per contrast)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.core.paths import RunPaths
from kit.protocols.ladder.contrasts import UNFIXED, Contrast, Groups, Out, against, closes, headline, measure
from kit.protocols.ladder.table import LadderResults
from kit.protocols.results_files import write_results
from kit.protocols.results_model import JsonObject
from kit.record.divergence import emitted
from kit.record.files import read_records
from kit.record.manifest import Manifest


def out(record: dict[str, Any]) -> Out:
    """A record as the ladder compares it."""
    completion = record["completion"]
    gate = record.get("gate") or {}
    tokens = tuple(emitted(record))
    return Out(tokens, tuple((entry["token"], entry["logprob"]) for entry in completion.get("logprobs") or ()),
               bool(gate.get("ok", True)), gate.get("reason"), completion.get("cached_tokens"),
               float(record.get("wall_seconds") or 0.0), completion.get("decode_tokens") or len(tokens))


def groups(run_dir: Path) -> Groups:
    """(pass, label) -> unit -> outputs in the order they were served (their trials), from every OK pass."""
    found: Groups = {}
    for pass_id, info in Manifest.load(run_dir).run.passes.items():
        file = run_dir / (info.file or "")
        if info.status != "OK" or not info.file or not file.is_file():
            continue
        for record in sorted(read_records(file).records, key=lambda r: r["seq"]):
            if (record["completion"] or {}).get("outcome") != "ok":
                continue
            found.setdefault((pass_id, record["label"]), {}).setdefault(record["unit"], []).append(out(record))
    return found


def ladder_results(run_dir: Path) -> LadderResults:
    manifest = Manifest.load(run_dir)
    design = manifest.run.to_json().get("ladder") or {}
    outputs = groups(run_dir)
    rungs = [measure(outputs, Contrast.from_json(c)) for c in design.get("rungs", [])]
    fixes = [measure(outputs, Contrast.from_json(c)) for c in design.get("fixes", [])]
    unfixed = next((row.cost for row in fixes if row.fix == UNFIXED), None)
    for row in fixes:
        against(row, unfixed)
    void = [pass_id for pass_id, info in manifest.run.passes.items() if info.status != "OK"]
    return LadderResults(table="ladder", run_id=manifest.run_id, files={"ladder": RunPaths.result_name("ladder")},
                         design=design.get("design", {}), headline=headline(rungs), rungs=rungs, fixes=fixes,
                         closes_L2=closes(fixes), void_passes=void)


def ladder_table(run_dir: Path) -> JsonObject:
    """The ladder table's JSON values (`kit analyze` keeps them in findings.json)."""
    return ladder_results(run_dir).to_json()


CSV_FIELDS = ("rung", "fix", "what", "status", "pairs", "identical", "identical_share", "unique_max",
              "logprobs_equal", "max_logprob_gap", "control", "latency_ratio", "throughput_change_pct", "reason")


def write(run_dir: Path) -> LadderResults:
    """Compute the table and write results/ladder.json and results/ladder.csv into the run folder."""
    table = ladder_results(run_dir)
    write_results(run_dir, table, "ladder", "ladder", CSV_FIELDS, [row.to_json() for row in [*table.rungs, *table.fixes]])
    return table
