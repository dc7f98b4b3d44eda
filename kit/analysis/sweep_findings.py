"""Findings of the replicated sweep (Table VI, Fig. 2): path divergence per format over histories.

A sweep is a set of grid-like run folders, one per (format, history), each with one cache-on pass and
the format's cache-off reference (layout in docs/analysis.md). History 0 is the canonical episode
order and is reported descriptively; histories 1.. are the random orders that enter the two-way
bootstrap (episodes × histories), the history-averaged random-intercept slope (refitted in every
resampled history) and the exact permutation test with one shared format permutation per episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.analysis.collect import RunFolder, format_rank
from kit.analysis.findings_model import SweepCell, SweepFindings, Table
from kit.protocols.passes import PassData, divergence_indicators, load_pass

CANONICAL = 0
SEPARATED_B1 = 15.0  # |slope| beyond this (odds ratio > 3e6 per format step) means no finite estimate


def arm_passes(run: RunFolder) -> tuple[str | None, str | None]:
    """(cache-on pass id, cache-off pass id) among the run's OK passes, first of each arm."""
    on = next((p for p, i in run.ok_passes.items() if i.arm == "on"), None)
    off = next((p for p, i in run.ok_passes.items() if i.arm == "off"), None)
    return on, off


def cell_divergence(run: RunFolder, loaded: dict[str, PassData]) -> dict[str, Any]:
    """Path divergence of one sweep cell: cache-on pass against the cache-off reference, per episode."""
    on, off = arm_passes(run)
    if on is None or off is None:
        return {"skipped": "needs one OK cache-on pass and one OK cache-off reference pass"}
    units, indicators, verdicts = divergence_indicators(loaded[on], loaded[off])
    return {"passes": [on, off], "episodes": units, "indicators": indicators, "diverged": int(sum(indicators)),
            "n": len(units), "first_request_index": [v.request_index for v in verdicts if v.diverged]}


class _Cells:
    """The usable sweep cells keyed by (format, history), and the folders left out (with why)."""

    def __init__(self, cells: list[tuple[RunFolder, dict[str, Any]]]):
        self.skipped: list[dict[str, Any]] = [{"run": run.run_id, "reason": cell["skipped"]}
                                              for run, cell in cells if "skipped" in cell]
        self.by_cell: dict[tuple[str, int], dict[str, Any]] = {}
        for run, cell in cells:
            if "skipped" in cell:
                continue
            key = (str(run.sweep.get("format", run.format)), int(run.sweep.get("history", -1)))
            if key in self.by_cell:
                self.skipped.append({"run": run.run_id,
                                     "reason": f"a second folder for format {key[0]}, history {key[1]}"})
                continue
            self.by_cell[key] = {"run": run.run_id, **cell}
        self.formats = sorted({f for f, _ in self.by_cell}, key=format_rank)
        self.histories = sorted({h for _, h in self.by_cell})

    def random_histories(self) -> list[int]:
        """The random histories every format ran (those missing a format are listed as skipped)."""
        complete = [h for h in self.histories if h != CANONICAL and all((f, h) in self.by_cell for f in self.formats)]
        incomplete = [h for h in self.histories if h != CANONICAL and h not in complete]
        if incomplete:
            self.skipped.append({"histories": incomplete, "reason": "not every format ran these histories; left "
                                                                    "out of the cube"})
        return complete

    def cube(self, random: list[int]) -> tuple[list[str], np.ndarray]:
        """The episodes every cell shares, and the divergence indicators as histories × episodes × formats."""
        episodes = sorted(set.intersection(*(set(self.by_cell[(f, h)]["episodes"])
                                             for f in self.formats for h in random)))
        cube = np.zeros((len(random), len(episodes), len(self.formats)), dtype=int)
        for hi, h in enumerate(random):
            for fi, f in enumerate(self.formats):
                status = dict(zip(self.by_cell[(f, h)]["episodes"], self.by_cell[(f, h)]["indicators"]))
                cube[hi, :, fi] = [status[e] for e in episodes]
        return episodes, cube


def sweep_findings(cells: list[tuple[RunFolder, dict[str, Any]]], replicates: int, seed: int,
                   mapper=None) -> SweepFindings:
    """Table VI from the sweep cells' path divergence (``mapper``: see :func:`kit.stats.sweep_bootstrap`)."""
    found = _Cells(cells)
    formats, random = found.formats, found.random_histories()
    result = SweepFindings(
        formats=formats, histories=found.histories, skipped=found.skipped,
        cells={f"{f}/h{h}": SweepCell.model_validate({k: v for k, v in c.items() if k != "episodes"})
               for (f, h), c in found.by_cell.items()},
        canonical={f: _rate(found.by_cell[(f, CANONICAL)]) for f in formats if (f, CANONICAL) in found.by_cell})
    if not random or not formats:
        result.skipped_table = "no random history with every format: no two-way bootstrap"
        return result
    episodes, cube = found.cube(random)
    scores = np.arange(len(formats), dtype=float)
    result.random_histories, result.episodes, result.scores = random, len(episodes), scores.tolist()
    _describe_histories(result, cube)
    result.bootstrap = _bootstrap(cube, scores, formats, replicates, seed, mapper)
    result.permutation = _permutation(cube, len(formats))
    return result


def _describe_histories(result: SweepFindings, cube: np.ndarray) -> None:
    """Per format: the rate and count of diverged episodes in each random history, and the episodes whose
    status changes between histories."""
    histories = range(cube.shape[0])
    result.per_history_rates = {f: [float(cube[hi, :, fi].mean()) for hi in histories]
                                for fi, f in enumerate(result.formats)}
    result.per_history_counts = {f: [int(cube[hi, :, fi].sum()) for hi in histories]
                                 for fi, f in enumerate(result.formats)}
    result.episodes_changing_status = {f: int(((cube[:, :, fi].min(axis=0) == 0) & (cube[:, :, fi].max(axis=0) == 1)
                                               ).sum()) for fi, f in enumerate(result.formats)}


def _bootstrap(cube: np.ndarray, scores: np.ndarray, formats: list[str], replicates: int, seed: int,
               mapper) -> dict[str, Any]:
    """The two-way bootstrap with the random-intercept slope refitted per replicate; without the slope (and
    why) when the fit fails, and a note when the slope is where the optimiser stopped on separated data."""
    from kit.stats import StatsInputError, sweep_bootstrap  # noqa: PLC0415

    try:
        boot = sweep_bootstrap(cube, scores, formats, replicates=replicates, seed=seed,
                               glmm=len(formats) >= 2, mapper=mapper).to_json()
    except (StatsInputError, ValueError, np.linalg.LinAlgError) as exc:
        # rates and differences do not need the random-intercept model: keep them, say why the slope is missing
        boot = sweep_bootstrap(cube, scores, formats, replicates=replicates, seed=seed, glmm=False).to_json()
        boot["glmm_skipped"] = f"the random-intercept fit failed ({type(exc).__name__}: {exc})"
    b1 = boot.get("b1_mean")
    if b1 is not None and abs(b1) > SEPARATED_B1:
        boot["glmm_note"] = (
            f"slope {b1:.1f} on the logit scale: the outcomes are (quasi-)separated by format, so the maximum "
            "likelihood slope is infinite and this value is where the optimiser stopped; read the rates instead")
    return boot


def _permutation(cube: np.ndarray, n_formats: int) -> dict[str, Any]:
    """The exact permutation test with one shared format permutation per episode (two formats or more)."""
    from kit.stats import StatsInputError, sweep_permutation_test  # noqa: PLC0415

    if n_formats < 2:
        return {"skipped": "one format only"}
    try:
        return sweep_permutation_test(cube).to_json()
    except StatsInputError as exc:
        return {"skipped": exc.line()}


def _rate(cell: dict[str, Any]) -> dict[str, Any]:
    from kit.stats import rate_interval  # noqa: PLC0415

    return rate_interval(cell["diverged"], cell["n"]).to_json() if cell["n"] else {"k": 0, "n": 0}


def load_cell_passes(run: RunFolder, keep_logprobs: bool) -> dict[str, PassData]:
    on, off = arm_passes(run)
    return {p: load_pass(run.path, p, run.ok_passes[p], keep_logprobs, run.records) for p in (on, off) if p is not None}


def table_vi(result: SweepFindings) -> Table:
    """Rows of Table VI: canonical history, mean/SD/range/CI over random histories, difference from the
    reference format with its paired interval, and histories above the reference."""
    boot = result.bootstrap
    if "formats" not in boot:
        reason = boot.get("skipped") or result.skipped_table or "no two-way bootstrap"
        return Table(rows=[], skipped=[{"reason": reason}] + result.skipped)
    rows = []
    for fr in boot["formats"]:
        label = fr["label"]
        canonical = result.canonical.get(label) or {}
        rows.append({"format": label, "canonical_k": canonical.get("k"), "canonical_n": canonical.get("n"),
                     "canonical_rate": canonical.get("rate"), "mean": fr["rate"], "sd": fr["history_sd"],
                     "min": fr["history_min"], "max": fr["history_max"], "lo": fr["lo"], "hi": fr["hi"],
                     "is_reference": label == boot["reference"], "diff": fr["diff"], "diff_lo": fr["diff_lo"],
                     "diff_hi": fr["diff_hi"], "above_reference": fr["histories_above_reference"],
                     "histories": boot["n_histories"], "episodes": boot["n_episodes"],
                     "diverged_per_history": result.per_history_counts[label]})
    return Table(rows=rows, skipped=result.skipped)
