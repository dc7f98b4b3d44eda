"""Tables III–VII in the paper's layout, written as CSV (the raw numbers of each row), Markdown and
LaTeX (the formatted layout). A small writer of our own; no templating engine needed."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.analysis.findings_model import (Findings, Table, TableIIIRow, TableIVRow, TableVIIRow, TableVIRow,
                                         TableVRow)
from kit.core.atomic_file import write_text_atomic
from kit.core.layout import DASH, Layout, ci, pct

def _skips(table: Table) -> list[str]:
    return [" ".join(f"{k}={v}" for k, v in s.items() if k != "reason") + f": {s['reason']}" if len(s) > 1
            else s["reason"] for s in table.skipped]


TABLE_IV_COUNTS = ("recompute_reproduces", "hit_reproduces", "paths_differ")


def of_n(k: Any, n: Any) -> str:
    """A count with what it counts out of: `4 of 6`."""
    return f"{k} of {n}"


def per_session(sessions: list[str], cells: list[str]) -> str:
    """One cell for a count every session has: `x in each session` when all sessions agree, else each
    session's value by name (`s1: 4 of 6, s2: 3 of 6`)."""
    if not cells:
        return DASH
    if len(set(cells)) == 1:
        return cells[0] if len(cells) == 1 else f"{cells[0]} in each session"
    return ", ".join(f"{s}: {c}" for s, c in zip(sessions, cells))


def table_iii(t: Table) -> Layout:
    layout = Layout("III", "Run-to-run divergence of the cache-enabled arm (%), server-level prompt cache x pass "
                           "order, dependence-aware 95% intervals; k of n: episodes that diverged of the episodes "
                           "compared.",
                    ["Model", "Weights", "Server-level prompt cache", "passes adjacent (%)",
                     "cache-off pass in between (%)"], notes=_skips(t))
    cells: dict[tuple, dict[str, str]] = {}
    for r in TableIIIRow.of(t):
        key = (r.model, r.format, r.prompt_cache)
        cells.setdefault(key, {})[r.order] = f"{pct(r.rate)} {ci(r.lo, r.hi)} ({of_n(r.k, r.n)})"
    for (model, fmt, setting), by_order in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        layout.rows.append([model, fmt, setting, by_order.get("adjacent", DASH),
                            by_order.get("cache-off pass in between", DASH)])
    return layout


def table_iv(t: Table) -> Layout:
    layout = Layout("IV", "Restored-state control. Each count reads k of n: k of the n items whose four phases all "
                          "succeeded in that session (in each session: every session gave the same count); "
                          "the last two columns count the items whose tokens are identical in all the run's OK "
                          "sessions, of the items OK in all of them.",
                    ["Model", "Weights", "sessions", "recompute reproduces", "cache hit reproduces", "paths differ",
                     "same in all sessions: recompute", "same in all sessions: cache hit"], notes=_skips(t))
    for r in TableIVRow.of(t):
        across, names = r.across_sessions, [str(s) for s in r.sessions]
        counts = [per_session(names, [of_n(k, n) for k, n in zip(getattr(r, key), r.items)])
                  for key in TABLE_IV_COUNTS]
        same = [of_n(across[key], across["items"]) if key in across else DASH
                for key in ("recompute_same_in_all", "hit_same_in_all")]
        layout.rows.append([r.model, r.format, f"{len(names)} ({', '.join(names)})", *counts, *same])
        if "note" in across:
            layout.notes.append(f"{r.run}: {across['note']}")
    return layout


def table_iv_csv(t: Table) -> list[dict[str, Any]]:
    """Table IV's CSV: one line per run and session, every count a plain number beside the number it is out
    of (`items` for the per-session counts, `items_in_all_sessions` for the last two), as the Markdown and
    LaTeX tables show them (`k of n`)."""
    out = []
    for r in TableIVRow.of(t):
        across = r.across_sessions
        for i, session in enumerate(r.sessions):
            out.append({"run": r.run, "model": r.model, "format": r.format, "sessions": len(r.sessions),
                        "session": session, "items": r.items[i],
                        **{key: getattr(r, key)[i] for key in TABLE_IV_COUNTS},
                        "items_in_all_sessions": across.get("items", ""),
                        "recompute_same_in_all": across.get("recompute_same_in_all", ""),
                        "hit_same_in_all": across.get("hit_same_in_all", "")})
    return out


def table_v(t: Table) -> Layout:
    layout = Layout("V", "Episode-level divergence per configuration: run-to-run (cache off, cache on) and path "
                         "divergence, envelope of circular block bootstrap and Wilson 95% intervals; n: episodes "
                         "compared.",
                    ["Engine", "Model", "Weights", "prompt cache", "n", "cache off (%)", "cache on (%)", "95% CI", "path (%)",
                     "95% CI"], notes=_skips(t))
    for r in TableVRow.of(t):
        layout.rows.append([r.engine, r.model, r.format, r.prompt_cache, str(r.n), pct(r.off_rate), pct(r.on_rate),
                            ci(r.on_lo, r.on_hi), pct(r.path_rate), ci(r.path_lo, r.path_hi)])
    return layout


def table_vi(t: Table) -> Layout:
    rows = TableVIRow.of(t)
    h = rows[0].histories if rows else 0
    layout = Layout("VI", "Replicated sweep: path divergence per format; the interval resamples episodes and "
                          "histories; the difference from the reference is paired by episode and history; histories "
                          "above reference: k of the n histories.",
                    ["Weights", "canonical history (%)", f"mean of {h} histories (%)", "SD", "range", "95% CI",
                     "difference (points)", "histories above reference"], notes=_skips(t))
    for r in rows:
        ref = r.is_reference
        layout.rows.append([r.format, pct(r.canonical_rate), pct(r.mean), pct(r.sd),
                            f"{pct(r.min)}{DASH}{pct(r.max)}", ci(r.lo, r.hi),
                            DASH if ref else f"{100 * r.diff:+.1f} {ci(r.diff_lo, r.diff_hi, True)}",
                            DASH if ref else of_n(r.above_reference, r.histories)])
    return layout


def table_vii(t: Table) -> Layout:
    layout = Layout("VII", "Single-turn bridge: path determinism, cache-attributable path divergence (Wilson 95%), "
                           "correctness flips and the exact McNemar test; n: items; recompute and cache hit: k of n "
                           "items whose path reproduced itself; flips and correct: items.",
                    ["Model", "Weights", "n", "recompute", "cache hit", "path (%)", "95% CI", "flips",
                     "correct recompute", "correct cache hit", "McNemar p"], notes=_skips(t))
    for r in TableVIIRow.of(t):
        div = r.path_divergence or {}
        layout.rows.append([r.model, r.format, str(r.n), of_n(r.recompute_reproduces, r.n),
                            of_n(r.hit_reproduces, r.n), pct(div.get("rate")), ci(div.get("lo"), div.get("hi")),
                            *(DASH if v is None else str(v) for v in (r.flips, r.correct_recompute, r.correct_hit)),
                            DASH if r.mcnemar is None else f"{r.mcnemar['p']:.3f}"])
        if r.correctness_skipped is not None:
            layout.notes.append(f"{r.run}: correctness not computed: {r.correctness_skipped}")
    return layout


LAYOUTS: dict[str, Callable[[Table], Layout]] = {
    "III": table_iii, "IV": table_iv, "V": table_v, "VI": table_vi, "VII": table_vii}
# tables laid out anew since bundles were first written: kit verify compares an older layout of these by the
# numbers it shows (kit.bundle.rendered), since they no longer line up with this kit's
RELAID = {"IV": "Table IV as kits up to commit eb721ab wrote it: per-session counts joined by '/', no sessions "
                "column, its CSV one line per run"}
CSV_ROWS: dict[str, Callable[[Table], list[dict[str, Any]]]] = {"IV": table_iv_csv}


def markdown(layout: Layout) -> str:
    lines = [f"**Table {layout.name}.** {layout.caption}", "", "| " + " | ".join(layout.header) + " |",
             "|" + "|".join("---" for _ in layout.header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in layout.rows]
    if not layout.rows:
        lines.append("| " + " | ".join(["(no rows)"] + [""] * (len(layout.header) - 1)) + " |")
    lines += [""] + [f"- skipped: {note}" for note in layout.notes]
    return "\n".join(lines).rstrip() + "\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "–": "--"}


def tex(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


def latex(layout: Layout) -> str:
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{tex(layout.caption)}}}",
             rf"\label{{tab:{layout.name.lower()}}}", r"\begin{tabular}{" + "l" * len(layout.header) + "}",
             r"\hline", " & ".join(tex(h) for h in layout.header) + r" \\", r"\hline"]
    lines += [" & ".join(tex(c) for c in row) + r" \\" for row in layout.rows]
    lines += [r"\hline", r"\end{tabular}", r"\end{table}"]
    lines += [f"% skipped: {note}" for note in layout.notes]
    return "\n".join(lines) + "\n"


def flat(row: dict[str, Any]) -> dict[str, Any]:
    """Scalar columns of a raw row; lists joined with '/', nested objects left out of the CSV."""
    out = {}
    for key, value in row.items():
        if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
            out[key] = "/".join(str(v) for v in value)
        elif not isinstance(value, (dict, list)):
            out[key] = value
    return out


def csv_text(rows: list[dict[str, Any]]) -> str:
    flats = [flat(r) for r in rows]
    fields = list(dict.fromkeys(k for r in flats for k in r))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields or ["no_rows"])
    writer.writeheader()
    writer.writerows(flats)
    return buffer.getvalue()


def render(name: str, table: Table) -> dict[str, str]:
    """Table `name` as its three files: extension -> text (what `write_all` writes, and what `kit verify`
    compares a bundled table with)."""
    layout = LAYOUTS[name](table)
    rows = CSV_ROWS[name](table) if name in CSV_ROWS else table.rows  # the CSV: each row's raw numbers, as written
    return {"csv": csv_text(rows), "md": markdown(layout), "tex": latex(layout)}


def write_all(findings: Findings, folder: Path) -> dict[str, list[str]]:
    """Write table_<N>.csv/.md/.tex for every table; returns the file names per table."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in LAYOUTS:
        stem = f"table_{name}"
        for ext, text in render(name, findings.tables[name]).items():
            write_text_atomic(folder / f"{stem}.{ext}", text)
        written[name] = [f"tables/{stem}.{ext}" for ext in ("csv", "md", "tex")]
    return written
