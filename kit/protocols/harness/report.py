"""The determinism harness's own report beside the kit's numbers for the same study, value by value.

The kit's harness table (kit.protocols.harness.results) names its values as the harness's report does, so each
value of the report is looked up at the same path: under `boxes.<box>` (each box's arms, gates,
estimator and cycles against that box's block), `totals` (over every box), and the mode's study-wide
blocks (`cache_state_decomposition`, the margins report's `cells`). A row holds the report's value,
the kit's, and whether they agree: numbers within 1e-9 relative (and 1e-12 absolute), lists element by
element, everything else equal. A value the kit does not compute is listed with the reason
(`not_computed`); a box of the report that was not imported disagrees on every value. The report's
other top-level keys describe the study in words (its cell, plan, endpoints, time) and are listed as
`descriptive`, not compared.
"""

from __future__ import annotations

import math

from pydantic import JsonValue

from kit.protocols.harness.table import HarnessStudy, ReportComparison, Row
from kit.protocols.results_model import JsonObject

COMPARED = ("boxes", "totals", "cache_state_decomposition", "cells")
UNKNOWN = "not computed, because the kit does not know this value of the harness's report"


class Missing:
    """No value at a path (a value may be null)."""


MISSING = Missing()


def _flat(data: JsonValue, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], JsonValue]]:
    """(path, value) of every leaf; a list, an empty object or a scalar is a leaf."""
    if isinstance(data, dict) and data:
        return [leaf for key, value in data.items() for leaf in _flat(value, (*path, str(key)))]
    return [(path, data)]


def get(data: JsonValue, path: tuple[str, ...]) -> JsonValue | Missing:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def agree(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(agree(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(agree(a[k], b[k]) for k in a)
    return a == b


def _because(path: tuple[str, ...], not_computed: dict[str, str]) -> str:
    return next((why for key, why in not_computed.items() if key in path), UNKNOWN)


def compare(table: HarnessStudy, report: JsonObject) -> ReportComparison:
    """Rows for every compared value of the report (kept as the harness wrote it), the counts over all and per box,
    and what was not."""
    ours: JsonValue = table.to_json()
    rows = []
    leaves = [leaf for key in COMPARED if key in report for leaf in _flat(report[key], (key,))]
    for path, value in leaves:  # each path starts with its block's key: never the table itself
        found = get(ours, path)
        name = ".".join(path)
        if not isinstance(found, Missing):
            rows.append(Row(value=name, report=value, kit=found, agree=agree(value, found)))
        elif path[0] == "boxes" and len(path) > 1 and path[1] not in table.boxes:
            rows.append(Row(value=name, report=value, kit=None, agree=False,
                            because=f"box {path[1]!r} is not among the imported calls"))
        else:
            rows.append(Row(value=name, report=value, kit=None, agree=None, because=_because(path, table.not_computed)))
    counted = [r for r in rows if r["agree"] is not None]
    per_box = {}
    for box in (report.get("boxes") or {}):
        mine = [r for r in counted if r["value"].startswith(f"boxes.{box}.")]
        per_box[box] = {"compared": len(mine), "agree": sum(bool(r["agree"]) for r in mine)}
    return ReportComparison.of({
        "boxes": per_box, "rows": rows, "compared": len(counted), "agree": sum(bool(r["agree"]) for r in counted),
        "differ": [r["value"] for r in counted if not r["agree"]],
        "not_computed": {r["value"]: r.get("because", "") for r in rows if r["agree"] is None},
        "descriptive": sorted(key for key in report if key not in COMPARED)})
