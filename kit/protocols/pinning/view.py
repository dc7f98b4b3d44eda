"""The pinning verdict (`kit check`) as the console and the launcher show it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.layout import DASH, Layout, pct
from kit.protocols.headline import Headline, few
from kit.protocols.pinning.table import Modal, PinningResults


def _share(summary: Modal) -> str:
    return summary.share("—", "{k}/{n} [{lo:.2f}, {hi:.2f}]")


def pinning_verdict(t: PinningResults) -> Group:
    """The short verdict of `kit check`: states with their prefill signatures, determinism per state,
    the gate, whether the arms differ and where they fork, the pinned regimes, and the advice."""
    unreset = t.without_reset
    rows = t.states or (unreset.states if unreset else [])
    title = "Cache states found (cycle calls of the measured prompt)" if t.states or not unreset else \
        "Cache states found without a reset (cycle and steady calls of the measured prompt)"
    states = Table(title=title, title_justify="left")
    for column in ("state", "calls", "prefill ms median [min–max]", "outputs", "modal share [95% CI]"):
        states.add_column(column)
    for s in rows:
        ms = s.prefill_ms
        sig = f"{ms.median:.1f} [{ms.min:.1f}–{ms.max:.1f}]" if ms else "—"
        states.add_row(s.state, ", ".join(s.roles), sig, f"{s.distinct} (modal {s.modal_output})", _share(s))
    gate = t.gate
    confirmed = "/".join(map(str, gate.reloads_confirmed))
    lines: list[str | Text] = [Text.assemble(
        "gate: ", (gate.status, "green" if gate.passed else "red"), f" — reloads confirmed {confirmed}; arm states "
        f"{gate.arm_states}" + (f"; {'; '.join(gate.reasons)}" if gate.reasons else ""))]
    arms = t.arms
    if arms.differ is None:
        lines.append(f"arms: {arms.withheld or 'not measured'}")
    else:
        fork = arms.fork
        lines.append(Text.assemble(f"arms: pure {_share(arms.pure)} output {arms.pure.modal_output}, "
                                   f"contaminated {_share(arms.contaminated)} output "
                                   f"{arms.contaminated.modal_output}; ",
                                   *((("differ", "yellow"), f", fork at character {fork.char if fork else None}, "
                                      f"token {fork.token if fork else None}") if arms.differ else ("identical",))))
        flips = [c for c in t.cycles if c.flip_at_interposed_only]
        lines.append(f"flip at the interposed call (and nowhere else in the arms): {len(flips)} of "
                     f"{len(t.cycles)} cycles")
    lines.append(f"pinned regimes: always-fresh {_share(t.regimes['always_fresh'])}, "
                 f"steady-state {_share(t.regimes['steady'])}")
    lines += [f"• {line}" for line in (t.verdict.advice if t.verdict else [])]
    return Group(states, *lines)


def _headline_share(s: Modal) -> str:
    if not s.n or len(s.wilson95) != 2:
        return DASH
    lo, hi = s.wilson95
    return f"{s.modal_count}/{s.n} ({pct(lo)}{DASH}{pct(hi)}%){few(s.n)}"


def headline(t: PinningResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    gate = t.gate
    h.held = gate.passed
    h.controls.append(f"gate {gate.status}: reloads confirmed {'/'.join(map(str, gate.reloads_confirmed))}"
                      + "".join(f"; {r}" for r in gate.reasons))
    arms = t.arms
    if arms.differ is None:
        h.verdict.append(f"pure vs contaminated arm: {arms.withheld or 'not measured'}")
    else:
        h.verdict.append(f"pure vs contaminated arm: {'outputs DIFFER' if arms.differ else 'identical outputs'}"
                         f" (modal share: pure {_headline_share(arms.pure)}, contaminated "
                         f"{_headline_share(arms.contaminated)})")
    h.verdict.extend(t.verdict.advice if t.verdict else [])
    h.tables.append(Layout("pinning", "Cache states found (cycle calls of the measured prompt).",
                           ["state", "calls", "distinct outputs", "modal share (95% CI)"],
                           [[s.state, ", ".join(s.roles), str(s.distinct), _headline_share(s)] for s in t.states]))
