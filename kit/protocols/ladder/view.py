"""The ladder as the console and the launcher show it: the rungs, the fixes table, its figure's rows."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.atomic_file import writing
from kit.core.layout import DASH, Layout
from kit.protocols.headline import Headline
from kit.protocols.kind import PlotRow
from kit.protocols.ladder.table import ContrastRow, LadderResults

STATUS_STYLE = {"holds": "green", "diverges": "red", "VOID": "yellow", "not measured": "dim"}


def _status(row: ContrastRow) -> Text:
    return Text(row.status, style=STATUS_STYLE.get(row.status, "white"))


def _share(row: ContrastRow) -> str:
    if not row.pairs or len(row.interval) != 2:
        return DASH
    lo, hi = row.interval
    return f"{row.identical}/{row.pairs} [{lo:.2f}, {hi:.2f}]"


def _first(row: ContrastRow) -> str:
    first = row.first_difference
    return f"{first.unit}#{first.trial} @{first.token}" if first else "—"


def _gap(row: ContrastRow) -> str:
    return "—" if row.max_logprob_gap is None else f"{row.max_logprob_gap:.3g}"


def _control(row: ContrastRow) -> str | Text:
    return Text("no", style="red") if row.control is False else "—" if row.control is None else "yes"


def rungs_table(t: LadderResults) -> Table:
    view = Table(title=f"Determinism ladder: {t.headline.text}", title_justify="left")
    for column in ("rung", "contrast", "status", "identical (95% CI)", "unique/prompt", "logprobs equal",
                   "first difference", "max |Δlogprob|", "control"):
        view.add_column(column, justify="left" if column in ("rung", "contrast", "status") else "right")
    for row in t.rungs:
        if not row.measured:
            view.add_row(row.rung, row.what, _status(row), Text(str(row.reason), style="dim"), "", "", "", "", "")
            continue
        unique = f"{row.unique_max} (mean {row.unique_mean:.2f})" if row.pairs else "—"
        equal = f"{row.logprobs_equal}/{row.pairs}" if row.pairs else "—"
        view.add_row(row.rung, row.what, _status(row), _share(row), unique, equal, _first(row), _gap(row),
                     _control(row))
    voided = [f"{row.rung} {row.what}: {row.reason}" for row in t.rungs if row.status == "VOID"]
    view.caption = "\n".join(["holds: every request byte-identical in tokens; unique/prompt: distinct outputs per "
                              "prompt over the trials (SGLang's and vLLM's measure)", *voided])
    view.caption_justify = "left"
    return view


def _closing(t: LadderResults) -> str:
    return f"closes L2: {', '.join(t.closes_L2)}" if t.closes_L2 else "no fix measured here closes L2"


def fixes_table(t: LadderResults) -> Table:
    view = Table(title=f"Fixes for L2 (cache hit vs miss): {_closing(t)}", title_justify="left")
    for column in ("fix", "status after the fix", "identical (95% CI)", "latency s", "tokens/s", "latency ×",
                   "throughput Δ"):
        view.add_column(column, justify="left" if column in ("fix", "status after the fix") else "right")
    for row in t.fixes:
        if not row.measured:
            view.add_row(str(row.fix), _status(row), Text(str(row.reason), style="dim"), "", "", "", "")
            continue
        cost = row.cost
        view.add_row(str(row.fix), _status(row), _share(row),
                     f"{cost.latency_s:.2f}" if cost else "—", f"{cost.tokens_per_s:.1f}" if cost else "—",
                     *_against(row, "—"))
    notes = [f"{row.fix}: {row.note}" for row in t.fixes if row.note]
    view.caption = "\n".join(["cost: the served requests' mean latency and generated tokens per second, against "
                              "the unfixed arm's cache hits", *notes])
    view.caption_justify = "left"
    return view


def _against(row: ContrastRow, none: str) -> list[str]:
    """A fix's latency ratio and throughput change against the unfixed arm, as cells."""
    return [f"{row.latency_ratio:.2f}" if row.latency_ratio is not None else none,
            f"{row.throughput_change_pct:+.1f}%" if row.throughput_change_pct is not None else none]


def ladder_table(t: LadderResults) -> Group:
    """The rungs, then the fixes table."""
    return Group(rungs_table(t), fixes_table(t))


def plot_rows(t: LadderResults) -> list[PlotRow]:
    """Per measured contrast (rungs, then fixes): the share of requests that diverged, with its interval."""
    rows = []
    for row in [*t.rungs, *t.fixes]:
        if row.status in ("holds", "diverges") and row.pairs and len(row.interval) == 2:
            lo, hi = row.interval
            label = f"fix: {row.fix}" if row.fix else f"{row.rung} {row.what}"
            rows.append((label[:60], row.pairs - row.identical, row.pairs, 1 - hi, 1 - lo))
    return rows


def figure(run_dir: Path, table: LadderResults) -> Path | None:
    """figures/ladder.png: a bar per rung contrast (diverged share, 95% interval), the fixes beside.
    None when matplotlib is not installed or the folder cannot be written."""
    try:
        import matplotlib  # noqa: PLC0415 - only when a figure is drawn

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    rows = plot_rows(table)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    labels = [label for label, *_ in rows][::-1]
    rates = [k / n for _, k, n, _, _ in rows][::-1]
    errors = [[max(0.0, rate - row[3]) for rate, row in zip(rates, rows[::-1])],
              [max(0.0, row[4] - rate) for rate, row in zip(rates, rows[::-1])]]
    colours = ["tab:orange" if label.startswith("fix:") else "tab:blue" for label in labels]
    ax.barh(labels, rates, xerr=errors, color=colours, capsize=3)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of requests diverged (95% Wilson interval)")
    ax.set_title(textwrap.fill(table.headline.text, 100), fontsize=9)
    path = run_dir / "figures" / "ladder.png"
    try:
        path.parent.mkdir(exist_ok=True)
        with writing(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120, bbox_inches="tight")
    except OSError:
        return None
    finally:
        plt.close(fig)
    return path


def ladder_note(run_dir: Path, t: LadderResults | None) -> str | None:
    """Under the tables: the headline, what closes L2, and the figure (drawn here: figures/ladder.png)."""
    if t is None:
        return None
    drawn = figure(run_dir, t)
    parts = [t.headline.text, f"L2 closed by: {', '.join(t.closes_L2)}" if t.closes_L2 else "no fix closed L2"]
    if drawn is not None:
        parts.append(f"figure: {drawn}")
    return "; ".join(parts)


def headline(t: LadderResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report):
    how far up the ladder the engine stays invariant, what closes L2, each rung's control, the two tables."""
    h.verdict.append(t.headline.text)
    h.verdict.append(_closing(t))
    controls = [row for row in t.rungs if row.control is not None]
    for row in controls:
        h.controls.append(f"{row.rung} {row.what}: its control " + ("reproduced" if row.control else "did NOT reproduce"))
    h.held = all(row.control for row in controls) if controls else None
    h.tables.append(Layout("ladder", "Each rung against the same baseline (holds: every request byte-identical "
                           "in tokens).", ["rung", "contrast", "status", "identical (95% CI)", "reason"],
                           [[row.rung, row.what, row.status, _share(row), str(row.reason or "")] for row in t.rungs]))
    h.tables.append(Layout("ladder fixes", "Fixes for L2 with their cost against the unfixed arm.",
                           ["fix", "status", "identical (95% CI)", "latency ×", "throughput Δ"],
                           [[str(row.fix), row.status, _share(row), *_against(row, DASH)] for row in t.fixes]))
