"""The ladder as the console and the launcher show it: the rungs, the fixes table, its figure's rows."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kit.core.atomic_file import writing
from kit.core.layout import DASH, Layout
from kit.protocols.headline import Headline
from kit.protocols.kind import PlotRow

STATUS_STYLE = {"holds": "green", "diverges": "red", "VOID": "yellow", "not measured": "dim"}


def _status(row: dict[str, Any]) -> Text:
    return Text(str(row["status"]), style=STATUS_STYLE.get(row["status"], "white"))


def _share(row: dict[str, Any]) -> str:
    if not row.get("pairs"):
        return DASH
    lo, hi = row["interval"]
    return f"{row['identical']}/{row['pairs']} [{lo:.2f}, {hi:.2f}]"


def _first(row: dict[str, Any]) -> str:
    first = row.get("first_difference")
    return f"{first['unit']}#{first['trial']} @{first['token']}" if first else "—"


def _gap(row: dict[str, Any]) -> str:
    gap = row.get("max_logprob_gap")
    return "—" if gap is None else f"{gap:.3g}"


def _control(row: dict[str, Any]) -> str | Text:
    return {True: "yes", False: Text("no", style="red"), None: "—"}[row.get("control")]


def rungs_table(table: dict[str, Any]) -> Table:
    view = Table(title=f"Determinism ladder: {table['headline']['text']}", title_justify="left")
    for column in ("rung", "contrast", "status", "identical (95% CI)", "unique/prompt", "logprobs equal",
                   "first difference", "max |Δlogprob|", "control"):
        view.add_column(column, justify="left" if column in ("rung", "contrast", "status") else "right")
    for row in table["rungs"]:
        if row["status"] == "not measured":
            view.add_row(row["rung"], str(row["what"]), _status(row), Text(str(row["reason"]), style="dim"),
                         "", "", "", "", "")
            continue
        unique = f"{row['unique_max']} (mean {row['unique_mean']:.2f})" if row.get("pairs") else "—"
        equal = f"{row['logprobs_equal']}/{row['pairs']}" if row.get("pairs") else "—"
        view.add_row(row["rung"], str(row["what"]), _status(row), _share(row), unique, equal, _first(row),
                     _gap(row), _control(row))
    voided = [f"{row['rung']} {row['what']}: {row['reason']}" for row in table["rungs"]
              if row["status"] == "VOID"]
    view.caption = "\n".join(["holds: every request byte-identical in tokens; unique/prompt: distinct outputs per "
                              "prompt over the trials (SGLang's and vLLM's measure)", *voided])
    view.caption_justify = "left"
    return view


def fixes_table(table: dict[str, Any]) -> Table:
    closing = table.get("closes_L2") or []
    answer = f"closes L2: {', '.join(closing)}" if closing else "no fix measured here closes L2"
    view = Table(title=f"Fixes for L2 (cache hit vs miss): {answer}", title_justify="left")
    for column in ("fix", "status after the fix", "identical (95% CI)", "latency s", "tokens/s", "latency ×",
                   "throughput Δ"):
        view.add_column(column, justify="left" if column in ("fix", "status after the fix") else "right")
    for row in table["fixes"]:
        if row["status"] == "not measured":
            view.add_row(str(row["fix"]), _status(row), Text(str(row["reason"]), style="dim"), "", "", "", "")
            continue
        cost = row.get("cost") or {}
        view.add_row(str(row["fix"]), _status(row), _share(row),
                     f"{cost['latency_s']:.2f}" if cost else "—", f"{cost['tokens_per_s']:.1f}" if cost else "—",
                     f"{row['latency_ratio']:.2f}" if "latency_ratio" in row else "—",
                     f"{row['throughput_change_pct']:+.1f}%" if "throughput_change_pct" in row else "—")
    notes = [f"{row['fix']}: {row['note']}" for row in table["fixes"] if row.get("note")]
    view.caption = "\n".join(["cost: the served requests' mean latency and generated tokens per second, against "
                              "the unfixed arm's cache hits", *notes])
    view.caption_justify = "left"
    return view


def ladder_table(table: dict[str, Any]) -> Group:
    """The rungs, then the fixes table."""
    return Group(rungs_table(table), fixes_table(table))


def plot_rows(table: dict[str, Any]) -> list[PlotRow]:
    """Per measured contrast (rungs, then fixes): the share of requests that diverged, with its interval."""
    rows = []
    for row in [*table["rungs"], *table["fixes"]]:
        if row["status"] in ("holds", "diverges") and row.get("pairs"):
            lo, hi = row["interval"]
            label = f"fix: {row['fix']}" if row.get("fix") else f"{row['rung']} {row['what']}"
            rows.append((label[:60], row["pairs"] - row["identical"], row["pairs"], 1 - hi, 1 - lo))
    return rows


def figure(run_dir: Path, table: dict[str, Any]) -> Path | None:
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
    ax.set_title(textwrap.fill(table["headline"]["text"], 100), fontsize=9)
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


def ladder_note(run_dir: Path, table: dict[str, Any] | None) -> str | None:
    """Under the tables: the headline, what closes L2, and the figure (drawn here: figures/ladder.png)."""
    if not table or table.get("table") != "ladder":
        return None
    drawn = figure(run_dir, table)
    closing = table.get("closes_L2") or []
    parts = [table["headline"]["text"], f"L2 closed by: {', '.join(closing)}" if closing else "no fix closed L2"]
    if drawn is not None:
        parts.append(f"figure: {drawn}")
    return "; ".join(str(part) for part in parts)


def headline(t: dict[str, Any], h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report):
    how far up the ladder the engine stays invariant, what closes L2, each rung's control, the two tables."""
    h.verdict.append(str(t["headline"]["text"]))
    closing = t.get("closes_L2") or []
    h.verdict.append(f"closes L2: {', '.join(closing)}" if closing else "no fix measured here closes L2")
    controls = [row for row in t["rungs"] if row.get("control") is not None]
    for row in controls:
        h.controls.append(f"{row['rung']} {row['what']}: its control " +
                          ("reproduced" if row["control"] else "did NOT reproduce"))
    h.held = all(row["control"] for row in controls) if controls else None
    h.tables.append(Layout("ladder", "Each rung against the same baseline (holds: every request byte-identical "
                           "in tokens).", ["rung", "contrast", "status", "identical (95% CI)", "reason"],
                           [[row["rung"], str(row["what"]), row["status"], _share(row),
                             str(row.get("reason") or "")] for row in t["rungs"]]))
    h.tables.append(Layout("ladder fixes", "Fixes for L2 with their cost against the unfixed arm.",
                           ["fix", "status", "identical (95% CI)", "latency ×", "throughput Δ"],
                           [[str(row["fix"]), row["status"], _share(row),
                             f"{row['latency_ratio']:.2f}" if "latency_ratio" in row else DASH,
                             f"{row['throughput_change_pct']:+.1f}%" if "throughput_change_pct" in row else DASH]
                            for row in t["fixes"]]))
