"""Findings of single-turn runs (the reset protocol's four phases per item): Table IV, the
restored-state control per session, and Table VII, the GSM8K bridge with correctness flips.

Table IV counts as :mod:`kit.protocols.reset.results` does (and reuses its across-session count), from
each session read once. Table VII counts an item's path divergence as
cache-caused only when each path agreed with itself (cold == cold2, warm == warm2) and the paths
differ; correctness comes from the stored response text, compared numerically with the item's
reference answer (re-derived from the workload the manifest names), when an answer extractor is
available (``kit.workloads.answers``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kit.protocols.reset import results as reset_table
from kit.analysis.collect import RunFolder
from kit.protocols.passes import PassData


def item_paths(session: PassData) -> dict[str, reset_table.ItemPaths]:
    """unit -> its outputs per path in phase order, for items whose four phases all succeeded
    (the shape :func:`kit.protocols.reset.results.across_sessions` takes)."""
    paths = {}
    for unit in session.order:
        requests = session.units[unit]
        if any(r.outcome not in (None, "ok") for r in requests):
            continue
        cold = [r.tokens for r in requests if r.expect == "cold"]
        warm = [r.tokens for r in requests if r.expect == "warm"]
        if len(cold) == 2 and len(warm) == 2:
            paths[unit] = reset_table.ItemPaths(cold=cold, warm=warm)
    return paths


def table_iv_row(run: RunFolder, sessions: dict[str, PassData]) -> dict[str, Any]:
    """One reset run (one weight format): per-session counts and items identical across OK sessions."""
    paths = {pid: item_paths(session) for pid, session in sessions.items()}
    ok = [{"session": pid, **reset_table.counts(units)} for pid, units in paths.items()]
    return {"run": run.run_id, "model": run.model, "format": run.format, "sessions": [c["session"] for c in ok],
            **{key: [c[key] for c in ok] for key in reset_table.COUNT_KEYS},
            "across_sessions": reset_table.across_sessions(paths).to_json()}


def reference_answers(run: RunFolder) -> tuple[dict[str, str] | None, str | None]:
    """Item id -> reference answer, re-derived from the workload in the manifest, or (None, why not)."""
    from kit.models.hashing import sha256_file  # noqa: PLC0415
    from kit.workloads.items import arithmetic_items, load_gsm8k  # noqa: PLC0415

    workload = run.manifest.workload
    if workload.source == "gsm8k":
        path = Path(workload.file or "")
        if not path.is_file():
            return None, f"the GSM8K file {path} named in the manifest is not on this machine"
        if workload.sha256 and sha256_file(path) != workload.sha256:
            return None, f"{path} does not match the sha256 in the manifest"
        items = load_gsm8k(path, workload.items or 0, workload.first_item or 0)
    elif workload.source == "arithmetic":
        items = arithmetic_items(workload.items or 0, 20261007 if workload.seed is None else workload.seed)
    else:
        return None, f"unknown item source {workload.source!r}"
    return {item.id: item.answer for item in items}, None


def answer_checker():
    """kit.workloads.answers.is_correct if this kit has it, else None."""
    try:
        return importlib.import_module("kit.workloads.answers").is_correct
    except ImportError:
        return None


def table_vii_row(run: RunFolder, session: PassData) -> dict[str, Any]:
    """The bridge's numbers for one session (four phases per item)."""
    from kit.stats import paired_mcnemar, rate_interval  # noqa: PLC0415

    items = {}
    for unit in session.order:
        requests = session.units[unit]
        cold = [r for r in requests if r.expect == "cold"]
        warm = [r for r in requests if r.expect == "warm"]
        if len(cold) == 2 and len(warm) == 2 and all(r.outcome in (None, "ok") for r in requests):
            items[unit] = (cold, warm)
    n = len(items)
    recompute_det = [u for u, (c, w) in items.items() if c[0].tokens == c[1].tokens]
    hit_det = [u for u, (c, w) in items.items() if w[0].tokens == w[1].tokens]
    both = [u for u in items if u in set(recompute_det) and u in set(hit_det)]
    differ = [u for u in both if items[u][0][0].tokens != items[u][1][0].tokens]
    row: dict[str, Any] = {"run": run.run_id, "session": session.pass_id, "model": run.model, "format": run.format,
                           "source": run.manifest.workload.source, "n": n,
                           "recompute_reproduces": len(recompute_det), "hit_reproduces": len(hit_det),
                           "attributable_items": len(both), "paths_differ": len(differ)}
    if both:
        row["path_divergence"] = rate_interval(len(differ), len(both)).to_json()
    answers, why = reference_answers(run)
    check = answer_checker()
    if check is None:
        why = "no answer extractor in this kit (kit.workloads.answers)"
    if answers is None or check is None:
        row["correctness_skipped"] = why
        return row
    correct_cold = [int(check(items[u][0][0].text, answers.get(u, ""))) for u in both]
    correct_warm = [int(check(items[u][1][0].text, answers.get(u, ""))) for u in both]
    row.update(correct_recompute=int(sum(correct_cold)), correct_hit=int(sum(correct_warm)),
               flips=int(sum(a != b for a, b in zip(correct_cold, correct_warm))))
    if both:
        row["mcnemar"] = paired_mcnemar(correct_cold, correct_warm).to_json()
    return row
