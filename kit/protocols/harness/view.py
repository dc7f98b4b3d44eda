"""An imported determinism-harness run as the console and the launcher show it."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.layout import DASH, Layout
from kit.protocols.headline import Headline, few


def harness_table(table: dict[str, Any]) -> Group:
    """An imported determinism-harness study: per box and arm its outputs and prefill, each box's gates and
    estimator, the boxes compared, the report's verdict (a run imported before several boxes: its first table)."""
    if table.get("definitions") is None:
        return _harness_table_v1(table)
    arms = Table(title=f"Imported harness study ({table.get('mode')}): measured calls per box and arm",
                 title_justify="left")
    for column in ("box", "arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    blocks = list(table["boxes"].items()) + ([("all boxes", table)] if len(table["boxes"]) > 1 else [])
    for box, block in blocks:
        for arm, entry in block["arms"].items():
            m, ms = entry.get("metrics") or {}, entry.get("prefill_ms") or {}
            prefill = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms.get("median") is not None else "—"
            arms.add_row(str(box), str(arm), f"{m.get('n', 0)} ({entry['n_raw']})", str(m.get("distinct_count", 0)),
                         f"{m['modal_share']:.3f}" if m else "—", str((m.get("modal_sha256") or "—")[:12]), prefill)
    lines: list[str | Text] = []
    for box, block in table["boxes"].items():
        gate = block["gates"]["manipulation"]
        line = Text.assemble(f"box {box}: manipulation gate ", _verdict(gate.get("pass")), f" ({gate['rule']}); "
                             f"arms differ: {_arms_differ(block.get('arms_differ'), gate.get('pass'))}")
        if block.get("churn_minus_blocked"):
            est = block["churn_minus_blocked"]
            line.append(f"; churn − blocked {est['diff']:+.4f} (95% CI {est['ci95'][0]:+.4f} to {est['ci95'][1]:+.4f})")
        if block.get("cycles"):
            flips = sum(1 for c in block["cycles"] if c["flip_at_flusher"])
            line.append(f"; cycles: {len(block['cycles'])}, flip at the flusher in {flips}")
        lines.append(line)
    if table.get("arms_left_out"):
        lines.append(f"left out, not arms of mode {table.get('kind')}: " + ", ".join(
            f"{arm} ({n} calls)" for arm, n in table["arms_left_out"].items()))
    crossed = table.get("cross_box") or {}
    if crossed.get("arms"):
        lines.append("boxes compared: " + "; ".join(
            f"{arm} {'same' if c['same_modal_bytes'] else 'different'} modal bytes, {c['shared_variants']} shared "
            "outputs" for arm, c in crossed["arms"].items()))
    report = table.get("report_comparison")
    if report:
        lines.append(f"the harness's report: {report['agree']} of {report['compared']} values agree"
                     + (f"; differ: {', '.join(report['differ'])}" if report["differ"] else "")
                     + (f"; {len(report['not_computed'])} not computed (see results/harness.json)"
                        if report["not_computed"] else ""))
    return Group(arms, *lines)


def _harness_table_v1(table: dict[str, Any]) -> Group:
    arms = Table(title=f"Imported harness run ({table.get('mode')}): measured calls per arm",
                 title_justify="left")
    for column in ("arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    for arm, m in table["arms"].items():
        ms = m.get("prefill_ms")
        share = f"{m['modal_share']:.3f}" if m["modal_share"] is not None else "—"
        prefill = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms else "—"
        arms.add_row(str(arm), f"{m['n']} ({m['n_raw']})", str(m["distinct_count"]), share,
                     str((m["modal_sha256"] or "—")[:12]), prefill)
    parts: list[Any] = [arms]
    if table.get("by_state"):
        low, high = table["thresholds_ms"]
        states = Table(title=f"Per prefill state (below {low:g} ms, between, above {high:g} ms)", title_justify="left")
        for column in ("arm", "state", "n", "distinct outputs", "modal share", "prefill ms median"):
            states.add_column(column)
        for arm, by_state in table["by_state"].items():
            for state, m in by_state.items():
                median = f"{m['prefill_ms']['median']:.1f}" if m.get("prefill_ms") else "—"
                share = f"{m['modal_share']:.3f}" if m["modal_share"] is not None else "—"
                states.add_row(str(arm), str(state), str(m["n"]), str(m["distinct_count"]), share, median)
        parts.append(states)
    gate = table["gates"]["manipulation"]
    lines = [Text.assemble("manipulation gate: ", _verdict(gate.get("pass")), f" ({gate['rule']})"),
             f"arms differ: {_arms_differ(table['arms_differ'], gate.get('pass'))}",
             "prefill classes (kit): " + "; ".join("+".join(c) for c in table["prefill_classes"]["classes"])]
    if table.get("cycles"):
        flips = sum(1 for c in table["cycles"] if c["flips"])
        lines.append(f"cycles: {len(table['cycles'])}, output flips at the interposed call in {flips}")
    report = table.get("report_comparison")
    if report:
        lines.append(f"the harness's report: {report['agree']} of {report['compared']} values agree"
                     + (f"; differ: {', '.join(report['differ'])}" if report["differ"] else ""))
    return Group(*parts, *lines)


def _arms_differ(differ: bool | None, passed: bool | None) -> str:
    if differ is not None:
        return str(differ).lower()
    return "not judged (" + ("the gate did not pass)" if passed is False else "no manipulation gate for this mode)")


def _verdict(passed: bool | None) -> str | tuple[str, str]:
    return "not evaluated" if passed is None else ("PASS", "green") if passed else ("FAIL", "red")


def headline(t: dict[str, Any], h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    gate = t["gates"]["manipulation"]
    h.held = gate.get("pass")
    h.controls.append("manipulation gate " + {None: "not evaluated", True: "PASS", False: "FAIL"}[gate.get("pass")]
                      + f" ({gate.get('rule')})")
    differ = t.get("arms_differ")
    h.verdict.append("arms " + {None: "not judged", True: "DIFFER", False: "identical"}[differ])
    arms = {a: m.get("metrics", {"n": 0, "distinct_count": 0}) if "n_raw" in m and "n" not in m else m
            for a, m in t["arms"].items()}  # a study's arms hold their metrics (kit.protocols.harness.results); older: flat
    over = " over every box" if len(t.get("boxes") or {}) > 1 else ""
    h.tables.append(Layout("harness", f"Measured calls per arm{over}.", ["arm", "n", "distinct outputs", "modal share"],
                           [[str(a), str(m["n"]), str(m["distinct_count"]),
                             DASH if m.get("modal_share") is None else f"{m['modal_share']:.3f}{few(m['n'])}"]
                            for a, m in arms.items()]))
