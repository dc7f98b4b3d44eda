"""The determinism harness's own report beside the kit's numbers for the same run, value by value.

Each value the report holds is looked up in the kit's harness table (kit.protocols.harness.results) under the
same name; a row says the report's value, the kit's, and whether they agree (numbers within 1e-9
relative, everything else equal), or that the kit does not compute that value (`agree` null: the
harness's history matching, its edit distances between outputs and whether one was capped, and its
per-arm negative-control flag, whose definitions its records do not carry).
"""

from __future__ import annotations

import math
from typing import Any

# report path (under boxes.<box>) -> kit table path; "*" is each arm
ARM_KEYS = {
    "n_raw": "n_raw", "excluded.error": "excluded.error",
    "excluded.truncated_or_other_stop": "excluded.truncated_or_other_stop",
    "metrics.n": "n", "metrics.modal_count": "modal_count", "metrics.modal_share": "modal_share",
    "metrics.modal_sha256": "modal_sha256", "metrics.distinct_count": "distinct_count",
    "metrics.all_identical": "all_identical", "metrics.pairwise_agreement": "pairwise_agreement",
    "metrics.divergence_char_indices": "divergence_char_indices",
    "metrics.output_token_variance": "output_token_variance", "prefill_ms.min": "prefill_ms.min",
    "prefill_ms.median": "prefill_ms.median", "prefill_ms.max": "prefill_ms.max",
    "flags.model_drift": "model_drift", "flags.response_models": "response_models",
    "flags.wire_mismatch": "wire_mismatch",
}
MISSING = object()


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def _agree(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _row(key: str, reported: Any, ours: Any) -> dict[str, Any]:
    if ours is MISSING:
        return {"value": key, "report": reported, "kit": None, "agree": None}
    return {"value": key, "report": reported, "kit": ours, "agree": _agree(reported, ours)}


def _controls(table: dict[str, Any], *names: str) -> int:
    return sum(table["totals"]["controls_excluded"].get(name, 0) for name in names)


def compare(table: dict[str, Any], report: dict[str, Any], box: str | None) -> dict[str, Any]:
    """Rows for every value of the report's box `box` (its only box when None), and the counts."""
    boxes = report.get("boxes") or {}
    name = box if box in boxes else next(iter(boxes), None)
    found = boxes.get(name) or {}
    rows = []
    for arm, reported in (found.get("arms") or {}).items():
        ours = table["arms"].get(arm, {})
        for key, value in _flat(reported).items():
            kit_key = ARM_KEYS.get(key)
            rows.append(_row(f"arms.{arm}.{key}", value, _get(ours, kit_key) if kit_key else MISSING))
    for key, value in _flat(found.get("gates") or {}).items():
        rows.append(_row(f"gates.{key}", value, _get(table["gates"], key)))
    rows.append(_row("arms_differ", found.get("arms_differ"), table["arms_differ"]))
    totals = report.get("totals") or {}
    ours_totals = {"records_in": table["totals"]["records_in"], "flushers_excluded": _controls(table, "flusher"),
                   "warmups_excluded": _controls(table, "warmup", "burnin")}
    rows += [_row(f"totals.{key}", value, ours_totals.get(key, MISSING)) for key, value in totals.items()]
    counted = [r for r in rows if r["agree"] is not None]
    return {"box": name, "rows": rows, "compared": len(counted), "agree": sum(r["agree"] for r in counted),
            "differ": [r["value"] for r in counted if not r["agree"]],
            "not_computed_by_the_kit": [r["value"] for r in rows if r["agree"] is None]}
