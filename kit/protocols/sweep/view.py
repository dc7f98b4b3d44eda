"""The sweep's results as the console and the launcher show them."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from kit.core.layout import DASH, Layout, pct
from kit.protocols.headline import Headline, comparison_line, few
from kit.protocols.sweep.results import SweepResults


def sweep_table(t: SweepResults) -> Table:
    """Path divergence per weight format over histories, then the reference and replicate checks."""
    view = Table(title="Sweep: path divergence (cache-on pass vs the format's cache-off reference)",
                 title_justify="left")
    for column in ("format", "diverged per history", "mean", "SD", "range", "status varies"):
        view.add_column(column)
    for label, row in t.formats.items():
        if row.skipped is not None:
            view.add_row(label, row.skipped, "—", "—", "—", "—")
            continue
        cells = {c.history: c for c in t.cells.values() if c.format == label and c.compared}
        per_history = "  ".join(f"h{h} {c.diverged}/{c.episodes}" for h, c in sorted(cells.items()))
        view.add_row(label, per_history, f"{100 * row.mean:.1f}%", f"{100 * row.sd:.1f}",
                     f"{100 * row.min:.0f}–{100 * row.max:.0f}%", f"{row.episodes_status_varies}/{row.episodes}")
    notes = []
    for label, check in t.reference_check.items():
        if not check.compared:
            notes.append(Text(f"{label} reference: {check.skipped}"))
        else:
            verdict = "identical" if check.identical else (f"{check.diverged} episodes differ", "yellow")
            notes.append(Text.assemble(f"{label} reference under two orders: ", verdict))
    for label, replicate in t.replicates.items():
        if replicate.compared:
            notes.append(Text(f"{label} second process, canonical history: {replicate.diverged}/{replicate.episodes} "
                              "differ"))
    if t.void_passes:
        notes.append(Text("not analysed: " + ", ".join(f"{v.pass_} ({v.status})" for v in t.void_passes)))
    view.caption, view.caption_justify = Text("\n").join(notes), "left"
    return view


def headline(t: SweepResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    layout = Layout("sweep", "Path divergence per weight format over histories (cache-on pass vs the format's "
                    "cache-off reference).", ["format", "histories", "mean (%)", "SD", "range (%)", "status varies"])
    for label, row in t.formats.items():
        if row.skipped is not None:
            layout.rows.append([label, DASH, DASH, DASH, DASH, row.skipped])
            h.verdict.append(f"{label}: {row.skipped}")
            continue
        layout.rows.append([label, str(row.histories), pct(row.mean), pct(row.sd), f"{pct(row.min)}{DASH}{pct(row.max)}",
                            f"{row.episodes_status_varies}/{row.episodes}"])
        h.verdict.append(f"{label}: path divergence {pct(row.mean)}% on average over {row.histories} "
                         f"histories of {row.episodes} episodes (range {pct(row.min)}{DASH}{pct(row.max)}%)"
                         f"{few(row.histories)}; the two-way interval is Table VI of `kit analyze`")
    h.tables.append(layout)
    checks = t.reference_check
    judged = [c for c in checks.values() if c.compared]
    h.held = all(c.identical for c in judged) if judged else None
    for label, c in checks.items():
        h.controls.append(f"{label} reference under two orders (should not diverge): {comparison_line(c)}")
    if not checks:
        h.controls.append("no repeated reference pass: the control was not run")
