"""The pinning verdict (`kit check`) as the console and the launcher show it."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.layout import DASH, Layout, pct
from kit.protocols.headline import Headline, few


def _share(summary: dict[str, Any]) -> str:
    if not summary.get("n"):
        return "—"
    lo, hi = summary["wilson95"]
    return f"{summary['modal_count']}/{summary['n']} [{lo:.2f}, {hi:.2f}]"


def pinning_verdict(table: dict[str, Any]) -> Group:
    """The short verdict of `kit check`: states with their prefill signatures, determinism per state,
    the gate, whether the arms differ and where they fork, the pinned regimes, and the advice."""
    states = Table(title="Cache states found (cycle calls of the measured prompt)", title_justify="left")
    for column in ("state", "calls", "prefill ms median [min–max]", "outputs", "modal share [95% CI]"):
        states.add_column(column)
    for s in table["states"]:
        ms = s.get("prefill_ms")
        sig = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms else "—"
        states.add_row(str(s["state"]), ", ".join(s["roles"]), sig,
                       f"{s['distinct']} (modal {s['modal_output']})", _share(s))
    gate = table["gate"]
    style = "green" if gate["status"] == "PASS" else "red"
    lines: list[str | Text] = [Text.assemble(
        "gate: ", (str(gate["status"]), style), f" — reloads confirmed {gate['reloads_confirmed'][0]}/"
        f"{gate['reloads_confirmed'][1]}; arm states {gate['arm_states']}"
        + (f"; {'; '.join(map(str, gate['reasons']))}" if gate["reasons"] else ""))]
    arms = table["arms"]
    if arms.get("differ") is None:
        lines.append(f"arms: {arms.get('withheld', 'not measured')}")
    else:
        fork = arms.get("fork")
        lines.append(Text.assemble(f"arms: pure {_share(arms['pure'])} output {arms['pure'].get('modal_output')}, "
                                   f"contaminated {_share(arms['contaminated'])} output "
                                   f"{arms['contaminated'].get('modal_output')}; ",
                                   *((("differ", "yellow"), f", fork at character {fork['char']}, token {fork['token']}")
                                     if arms["differ"] else ("identical",))))
        flips = [c for c in table["cycles"] if c["flip_at_interposed_only"]]
        lines.append(f"flip at the interposed call (and nowhere else in the arms): {len(flips)} of "
                     f"{len(table['cycles'])} cycles")
    regimes = table["regimes"]
    lines.append(f"pinned regimes: always-fresh {_share(regimes['always_fresh'])}, "
                 f"steady-state {_share(regimes['steady'])}")
    lines += [f"• {line}" for line in table["verdict"]["advice"]]
    return Group(states, *lines)


def _headline_share(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return DASH
    lo, hi = s["wilson95"]
    return f"{s['modal_count']}/{s['n']} ({pct(lo)}{DASH}{pct(hi)}%){few(s['n'])}"


def headline(t: dict[str, Any], h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    gate = t["gate"]
    h.held = gate["status"] == "PASS"
    h.controls.append(f"gate {gate['status']}: reloads confirmed {gate['reloads_confirmed'][0]}/"
                      f"{gate['reloads_confirmed'][1]}" + "".join(f"; {r}" for r in gate.get("reasons") or []))
    arms = t["arms"]
    if arms.get("differ") is None:
        h.verdict.append(f"pure vs contaminated arm: {arms.get('withheld', 'not measured')}")
    else:
        h.verdict.append(f"pure vs contaminated arm: {'outputs DIFFER' if arms['differ'] else 'identical outputs'}"
                         f" (modal share: pure {_headline_share(arms['pure'])}, contaminated {_headline_share(arms['contaminated'])})")
    h.verdict.extend(str(a) for a in (t.get("verdict") or {}).get("advice") or [])
    h.tables.append(Layout("pinning", "Cache states found (cycle calls of the measured prompt).",
                           ["state", "calls", "distinct outputs", "modal share (95% CI)"],
                           [[str(s["state"]), ", ".join(map(str, s.get("roles") or [])), str(s.get("distinct")),
                             _headline_share(s)] for s in t["states"]]))
