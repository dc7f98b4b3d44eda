"""A sweep run's own results, computed from its records: path divergence per (format, history), per
format its mean, SD and range over histories and the episodes whose status varies, the check that each
format's cache-off reference does not depend on history, and the second-process replicates.

The paper's inferential statistics (two-way bootstrap, slope, permutation test) come from
`kit analyze`, which reads the same run as one sweep cell per (format, history).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from kit.protocols.passes import OkPasses
from kit.protocols.results_files import write_results
from kit.protocols.results_model import Comparison, Count, Number, Part, Results, VoidPass
from kit.record.manifest import Manifest
from kit.core.paths import RunPaths


class _CellHead(Part):
    format: str
    history: Count


class SweepCell(Comparison, _CellHead):
    """One (format, history) cell: its cache-on pass against the format's cache-off reference."""


class ReferenceCheck(Comparison):
    """A format's cache-off reference under two histories (orders): identical where it did not diverge."""

    identical: bool | None = None


class FormatRow(Part):
    """One weight format over its histories: diverged episodes per history, the rates' mean, SD and range, and the
    episodes whose status varies with history; `skipped` where no cell of it is OK."""

    per_history: dict[str, Count] = {}
    skipped: str | None = None
    histories: Count = 0
    mean: Number = 0.0
    sd: Number = 0.0
    min: Number = 0.0
    max: Number = 0.0
    episodes: Count = 0
    episodes_status_varies: Count = 0
    varying_episodes: list[str] = []


class SweepResults(Results):
    """results/sweep.json."""

    formats: dict[str, FormatRow]
    cells: dict[str, SweepCell]
    reference_check: dict[str, ReferenceCheck]
    replicates: dict[str, Comparison]
    void_passes: list[VoidPass]


def _spread(cells: list[SweepCell]) -> FormatRow:
    """Diverged per history, then mean, SD, range of the rates over histories, and episodes diverged in some
    histories, not all."""
    rates = [c.rate or 0.0 for c in cells]
    shared = set.intersection(*(set(c.status) for c in cells))
    varies = sorted(u for u in shared if len({c.status[u] for c in cells}) > 1)
    return FormatRow(per_history={str(c.history): c.diverged for c in cells}, histories=len(cells),
                     mean=statistics.fmean(rates), sd=statistics.stdev(rates) if len(rates) > 1 else 0.0,
                     min=min(rates), max=max(rates), episodes=len(shared), episodes_status_varies=len(varies),
                     varying_episodes=varies)


def sweep_table(run_dir: Path) -> SweepResults:
    loaded = Manifest.load(run_dir)
    manifest = loaded.run
    infos = manifest.passes
    passes = OkPasses(run_dir, infos)
    cells: dict[str, SweepCell] = {}
    by_format: dict[str, list[SweepCell]] = {}
    for name, cell in manifest.cells.items():
        on, reference = cell["passes"]
        result = SweepCell(format=cell["sweep"]["format"], history=cell["sweep"]["history"],
                           **passes.compare(on, reference).to_json())
        cells[name] = result
        if result.compared and result.episodes:
            by_format.setdefault(result.format, []).append(result)
    formats = {}
    for label in (manifest.formats or by_format):
        done = sorted(by_format.get(label, []), key=lambda c: c.history)
        formats[label] = _spread(done) if done else FormatRow(skipped="no OK cell of this format")
    references: dict[str, list[str]] = {}
    for pass_id, info in infos.items():
        if info.role == "reference":
            references.setdefault(str(info.format), []).append(pass_id)
    checks = {}
    for label, ids in references.items():
        if len(ids) == 2:
            check = ReferenceCheck(**passes.compare(*sorted(ids, key=lambda p: infos[p].history or 0)).to_json())
            check.identical = check.diverged == 0 if check.compared else None
            checks[label] = check
    replicates = {}
    for pass_id, info in infos.items():
        if info.role == "replicate":
            canonical = cells.get(f"{info.format}/h0")
            replicates[str(info.format)] = passes.compare(canonical.passes[0], pass_id) if canonical and \
                canonical.passes else Comparison(skipped="no canonical cell")
    return SweepResults(table="sweep", run_id=loaded.run_id,
                        files={"sweep": RunPaths.result_name("sweep"), "sweep_csv": RunPaths.result_name("sweep", ".csv")},
                        formats=formats, cells=cells, reference_check=checks, replicates=replicates,
                        void_passes=[VoidPass(pass_=p, status=i.status, reason=i.reason)
                                     for p, i in infos.items() if p not in passes.ok])


CSV_FIELDS = ("cell", "format", "history", "pass_on", "pass_reference", "episodes", "diverged", "rate", "lo", "hi")


def write(run_dir: Path) -> SweepResults:
    """Compute the sweep's results and write results/sweep.json and results/sweep.csv."""
    table = sweep_table(run_dir)
    rows = [{"cell": name, "format": c.format, "history": c.history, "pass_on": c.passes[0],
             "pass_reference": c.passes[1], **{k: c.to_json().get(k) for k in ("episodes", "diverged", "rate")},
             **{k: getattr(c.interval, k, None) for k in ("lo", "hi")}}
            for name, c in table.cells.items()]
    write_results(run_dir, table, "sweep", "sweep", CSV_FIELDS, rows)
    return table
