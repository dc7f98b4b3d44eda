"""An imported determinism-harness run as the console and the launcher show it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.layout import DASH, Layout
from kit.protocols.harness.table import Arm, HarnessResults, HarnessRunV1, HarnessStudy, ReportComparison
from kit.protocols.headline import Headline, few


def harness_table(table: HarnessResults) -> Group:
    """An imported determinism-harness study: per box and arm its outputs and prefill, each box's gates and
    estimator, the boxes compared, the report's verdict (a run imported before several boxes: its first table)."""
    if not isinstance(table, HarnessStudy):
        return _harness_table_v1(HarnessRunV1.of(table))
    arms = Table(title=f"Imported harness study ({table.mode}): measured calls per box and arm",
                 title_justify="left")
    for column in ("box", "arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    blocks = [(box, block.arms) for box, block in table.boxes.items()]
    for box, by_arm in blocks + ([("all boxes", table.arms)] if len(table.boxes) > 1 else []):
        for arm, entry in by_arm.items():
            arms.add_row(str(box), str(arm), *_arm_cells(entry))
    lines: list[str | Text] = []
    for box, block in table.boxes.items():
        gate = block.gates.manipulation
        line = Text.assemble(f"box {box}: manipulation gate ", _verdict(gate.pass_), f" ({gate.rule}); "
                             f"arms differ: {_arms_differ(block.arms_differ, gate.pass_)}")
        if block.churn_minus_blocked:
            est = block.churn_minus_blocked
            line.append(f"; churn − blocked {est.diff:+.4f} (95% CI {est.ci95[0]:+.4f} to {est.ci95[1]:+.4f})")
        if block.cycles:
            flips = sum(1 for c in block.cycles if c.flip_at_flusher)
            line.append(f"; cycles: {len(block.cycles)}, flip at the flusher in {flips}")
        lines.append(line)
    if table.arms_left_out:
        lines.append(f"left out, not arms of mode {table.kind}: " + ", ".join(
            f"{arm} ({n} calls)" for arm, n in table.arms_left_out.items()))
    if table.cross_box.arms:
        lines.append("boxes compared: " + "; ".join(
            f"{arm} {'same' if c.same_modal_bytes else 'different'} modal bytes, {c.shared_variants} shared "
            "outputs" for arm, c in table.cross_box.arms.items()))
    if table.report_comparison:
        lines.append(_report_line(table.report_comparison)
                     + (f"; {len(table.report_comparison.not_computed)} not computed (see results/harness.json)"
                        if table.report_comparison.not_computed else ""))
    return Group(arms, *lines)


def _arm_cells(entry: Arm) -> list[str]:
    m, ms = entry.metrics, entry.prefill_ms
    prefill = (f"{ms.median:.1f} [{ms.min:.1f}–{ms.max:.1f}]"
               if ms and ms.median is not None and ms.min is not None and ms.max is not None else "—")
    return [f"{m.n if m else 0} ({entry.n_raw})", str(m.distinct_count if m else 0),
            _share(m.modal_share if m else None), str((m and m.modal_sha256 or "—")[:12]),
            prefill]


def _report_line(report: ReportComparison) -> str:
    return (f"the harness's report: {report.agree} of {report.compared} values agree"
            + (f"; differ: {', '.join(report.differ)}" if report.differ else ""))


def _harness_table_v1(table: HarnessRunV1) -> Group:
    arms = Table(title=f"Imported harness run ({table.mode}): measured calls per arm",
                 title_justify="left")
    for column in ("arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    for arm, m in table.arms.items():
        ms = m.prefill_ms
        prefill = (f"{ms.median:.1f} [{ms.min:.1f}–{ms.max:.1f}]"
                   if ms and ms.median is not None and ms.min is not None and ms.max is not None else "—")
        arms.add_row(str(arm), f"{m.n} ({m.n_raw})", str(m.distinct_count), _share(m.modal_share),
                     str((m.modal_sha256 or "—")[:12]), prefill)
    parts = [arms]
    if table.by_state and table.thresholds_ms:
        low, high = table.thresholds_ms
        states = Table(title=f"Per prefill state (below {low:g} ms, between, above {high:g} ms)", title_justify="left")
        for column in ("arm", "state", "n", "distinct outputs", "modal share", "prefill ms median"):
            states.add_column(column)
        for arm, by_state in table.by_state.items():
            for state, m in by_state.items():
                median = f"{m.prefill_ms.median:.1f}" if m.prefill_ms and m.prefill_ms.median is not None else "—"
                states.add_row(str(arm), str(state), str(m.n), str(m.distinct_count), _share(m.modal_share), median)
        parts.append(states)
    gate = table.gates.manipulation
    lines: list[str | Text] = [Text.assemble("manipulation gate: ", _verdict(gate.pass_), f" ({gate.rule})"),
             f"arms differ: {_arms_differ(table.arms_differ, gate.pass_)}",
             "prefill classes (kit): " + "; ".join("+".join(c) for c in table.prefill_classes.classes)]
    if table.cycles:
        flips = sum(1 for c in table.cycles if c.flips)
        lines.append(f"cycles: {len(table.cycles)}, output flips at the interposed call in {flips}")
    if table.report_comparison:
        lines.append(_report_line(table.report_comparison))
    return Group(*parts, *lines)


def _share(share: float | None) -> str:
    return f"{share:.3f}" if share is not None else "—"


def _arms_differ(differ: bool | None, passed: bool | None) -> str:
    if differ is not None:
        return str(differ).lower()
    return "not judged (" + ("the gate did not pass)" if passed is False else "no manipulation gate for this mode)")


def _verdict(passed: bool | None) -> str | tuple[str, str]:
    return "not evaluated" if passed is None else ("PASS", "green") if passed else ("FAIL", "red")


def headline(t: HarnessResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    gate = t.gates.manipulation
    h.held = gate.pass_
    h.controls.append("manipulation gate " + {None: "not evaluated", True: "PASS", False: "FAIL"}[gate.pass_]
                      + f" ({gate.rule})")
    h.verdict.append("arms " + {None: "not judged", True: "DIFFER", False: "identical"}[t.arms_differ])
    over = " over every box" if isinstance(t, HarnessStudy) and len(t.boxes) > 1 else ""
    h.tables.append(Layout("harness", f"Measured calls per arm{over}.", ["arm", "n", "distinct outputs", "modal share"],
                           [[str(a), str(n), str(distinct), DASH if share is None else f"{share:.3f}{few(n)}"]
                            for a, n, distinct, share in t.arm_rows()]))
