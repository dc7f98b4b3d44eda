"""A sweep run's own results, computed from its records: path divergence per (format, history), per
format its mean, SD and range over histories and the episodes whose status varies, the check that each
format's cache-off reference does not depend on history, and the second-process replicates.

The paper's inferential statistics (two-way bootstrap, slope, permutation test) come from
`kit analyze`, which reads the same run as one sweep cell per (format, history).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from kit.protocols.passes import OkPasses
from kit.protocols.results_files import write_results
from kit.record.manifest import Manifest
from kit.core.paths import RunPaths


def _spread(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, SD, range of the rates over histories, and episodes diverged in some histories, not all."""
    rates = [c["rate"] for c in cells]
    shared = set.intersection(*(set(c["status"]) for c in cells))
    varies = sorted(u for u in shared if len({c["status"][u] for c in cells}) > 1)
    return {"histories": len(cells), "mean": statistics.fmean(rates),
            "sd": statistics.stdev(rates) if len(rates) > 1 else 0.0, "min": min(rates), "max": max(rates),
            "episodes": len(shared), "episodes_status_varies": len(varies), "varying_episodes": varies}


def sweep_table(run_dir: Path) -> dict[str, Any]:
    loaded = Manifest.load(run_dir)
    manifest = loaded.run
    infos = manifest.passes
    passes = OkPasses(run_dir, infos)
    table: dict[str, Any] = {"table": "sweep", "run_id": loaded.run_id,
                             "files": {"sweep": RunPaths.result_name("sweep"),
                                       "sweep_csv": RunPaths.result_name("sweep", ".csv")},
                             "formats": {}, "cells": {}, "reference_check": {}, "replicates": {},
                             "void_passes": [{"pass": p, "status": i.status, "reason": i.reason}
                                             for p, i in infos.items() if p not in passes.ok]}
    by_format: dict[str, list[dict[str, Any]]] = {}
    for name, cell in manifest.cells.items():
        on, reference = cell["passes"]
        result = {"format": cell["sweep"]["format"], "history": cell["sweep"]["history"],
                  **passes.compare(on, reference)}
        table["cells"][name] = result
        if "skipped" not in result and result["episodes"]:
            by_format.setdefault(result["format"], []).append(result)
    for label in (manifest.formats or by_format):
        done = sorted(by_format.get(label, []), key=lambda c: c["history"])
        table["formats"][label] = ({"per_history": {c["history"]: c["diverged"] for c in done}, **_spread(done)}
                                   if done else {"skipped": "no OK cell of this format"})
    references: dict[str, list[str]] = {}
    for pass_id, info in infos.items():
        if info.role == "reference":
            references.setdefault(str(info.format), []).append(pass_id)
    for label, ids in references.items():
        if len(ids) == 2:
            check = passes.compare(*sorted(ids, key=lambda p: infos[p].history or 0))
            check["identical"] = check.get("diverged") == 0 if "skipped" not in check else None
            table["reference_check"][label] = check
    for pass_id, info in infos.items():
        if info.role == "replicate":
            canonical = (table["cells"].get(f"{info.format}/h0") or {}).get("passes", [None])[0]
            table["replicates"][str(info.format)] = passes.compare(canonical, pass_id) if canonical else {
                "skipped": "no canonical cell"}
    return table


CSV_FIELDS = ("cell", "format", "history", "pass_on", "pass_reference", "episodes", "diverged", "rate", "lo", "hi")


def write(run_dir: Path) -> dict[str, Any]:
    """Compute the sweep's results and write results/sweep.json and results/sweep.csv."""
    table = sweep_table(run_dir)
    rows = [{"cell": name, "format": c["format"], "history": c["history"], "pass_on": c["passes"][0],
             "pass_reference": c["passes"][1], "episodes": c.get("episodes"), "diverged": c.get("diverged"),
             "rate": c.get("rate"), **{k: (c.get("interval") or {}).get(k) for k in ("lo", "hi")}}
            for name, c in table["cells"].items()]
    return write_results(run_dir, table, "sweep", "sweep", CSV_FIELDS, rows)
