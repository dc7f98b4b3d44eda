"""The ladder's results, from the run folder only: every rung's contrasts and L2's fixes with their cost,
the headline, written to results/ladder.json and results/ladder.csv (one row per contrast)."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Iterator

from kit.core.paths import RunPaths
from kit.protocols.ladder.contrasts import UNFIXED, Contrast, Groups, Out, against, closes, headline, measure
from kit.protocols.ladder.table import LadderResults
from kit.protocols.results_files import write_results
from kit.protocols.results_model import JsonObject
from kit.record.divergence import emitted
from kit.record.files import RecordFile, read_records
from kit.record.manifest import Manifest


def outs(file: RecordFile) -> Iterator[tuple[str, str, Out]]:
    """(label, unit, the answer as the ladder compares it) of each answered record of a file, in seq order."""
    for record in sorted(file.records, key=lambda r: r["seq"]):
        completion = record["completion"]
        if (completion or {}).get("outcome") != "ok":
            continue
        gate = record.get("gate") or {}
        tokens = tuple(emitted(record))
        yield record["label"], record["unit"], Out(
            tokens, tuple((entry["token"], entry["logprob"]) for entry in completion.get("logprobs") or ()),
            bool(gate.get("ok", True)), gate.get("reason"), completion.get("cached_tokens"),
            float(record.get("wall_seconds") or 0.0), completion.get("decode_tokens") or len(tokens))


def groups(run_dir: Path) -> Groups:
    """(pass, label) -> unit -> outputs in the order they were served (their trials), from every OK pass."""
    found: Groups = {}
    for pass_id, info in Manifest.load(run_dir).run.passes.items():
        file = run_dir / (info.file or "")
        if info.status != "OK" or not info.file or not file.is_file():
            continue
        for label, unit, answer in outs(read_records(file)):
            found.setdefault((pass_id, label), {}).setdefault(unit, []).append(answer)
    return found


def ladder_results(run_dir: Path) -> LadderResults:
    manifest = Manifest.load(run_dir)
    design = manifest.run.to_json().get("ladder") or {}
    outputs = groups(run_dir)
    source = f"{RunPaths(run_dir).manifest}: ladder"
    rungs = [measure(outputs, Contrast.from_json(c, f"{source}.rungs")) for c in design.get("rungs", [])]
    fixes = [measure(outputs, Contrast.from_json(c, f"{source}.fixes")) for c in design.get("fixes", [])]
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
