"""An imported determinism-harness run as the console and the launcher show it."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from kit.terminal_text import shown


def harness_table(table: dict[str, Any]) -> Group:
    """An imported determinism-harness run: per arm its outputs and prefill, the gates, the report's verdict."""
    arms = Table(title=f"Imported harness run ({shown(table.get('mode'))}): measured calls per arm",
                 title_justify="left")
    for column in ("arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    for arm, m in table["arms"].items():
        ms = m.get("prefill_ms")
        share = f"{m['modal_share']:.3f}" if m["modal_share"] is not None else "—"
        prefill = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms else "—"
        arms.add_row(shown(arm), f"{m['n']} ({m['n_raw']})", str(m["distinct_count"]), share,
                     shown((m["modal_sha256"] or "—")[:12]), prefill)
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
                states.add_row(shown(arm), shown(state), str(m["n"]), str(m["distinct_count"]), share, median)
        parts.append(states)
    gate = table["gates"]["manipulation"]
    lines = [f"manipulation gate: {_verdict(gate.get('pass'))} ({shown(gate['rule'])})",
             f"arms differ: {_arms_differ(table['arms_differ'], gate.get('pass'))}",
             "prefill classes (kit): " + shown("; ".join("+".join(c) for c in table["prefill_classes"]["classes"]))]
    if table.get("cycles"):
        flips = sum(1 for c in table["cycles"] if c["flips"])
        lines.append(f"cycles: {len(table['cycles'])}, output flips at the interposed call in {flips}")
    report = table.get("report_comparison")
    if report:
        lines.append(f"the harness's report: {report['agree']} of {report['compared']} values agree"
                     + (f"; differ: {shown(', '.join(report['differ']))}" if report["differ"] else ""))
    return Group(*parts, *lines)


def _arms_differ(differ: bool | None, passed: bool | None) -> str:
    if differ is not None:
        return str(differ).lower()
    return "not judged (" + ("the gate did not pass)" if passed is False else "no manipulation gate for this mode)")


def _verdict(passed: bool | None) -> str:
    return "not evaluated" if passed is None else "[green]PASS[/]" if passed else "[red]FAIL[/]"
