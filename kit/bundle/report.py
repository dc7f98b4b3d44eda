"""The offline HTML report: one self-contained page (inline CSS, figures as data URIs, no network).

Tables are rendered from the bundled results themselves (JSON and CSV), so the page shows exactly
the numbers `kit verify` re-checks.
"""

from __future__ import annotations

import base64
import json
from html import escape
from typing import Any

from kit.bundle.content import BundledRun, summary

COMPARE_FILE = "analysis/compare-paper.json"  # written by `kit compare RUN_DIR --reference paper`
COMPARE_COLUMNS = ("table", "row", "quantity", "published", "this_run", "verdict", "rule")

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:70rem;color:#1d1d1f;
line-height:1.4;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:2px solid #3b6ea5;padding-bottom:.2rem;margin-top:2.5rem}
h3{margin-top:1.6rem;font-size:1.05rem;font-family:ui-monospace,monospace}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}
th,td{border:1px solid #c8ccd2;padding:.25rem .55rem;text-align:left;vertical-align:top}
th{background:#e8eef6}tr:nth-child(even) td{background:#f7f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.status-finished{color:#176b2c;font-weight:600}.status-failed,.status-interrupted{color:#a31515;font-weight:600}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #c8ccd2}figcaption{font-size:.8rem;color:#555}
code{font-family:ui-monospace,monospace;font-size:.85em;word-break:break-all}.note{color:#555;font-size:.9rem}
"""


def _cell(value: Any) -> str:
    if value is None:
        return '<td class="null">&mdash;</td>'
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, (int, float)):
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        return f'<td class="num">{escape(text)}</td>'
    if isinstance(value, (list, dict)):
        return f"<td><code>{escape(json.dumps(value, ensure_ascii=False))}</code></td>"
    return f"<td>{escape(str(value))}</td>"


def _rows_table(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    head = "".join(f"<th>{escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(row.get(c)) for c in columns) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _kv_table(pairs: dict[str, Any]) -> str:
    body = "".join(f"<tr><th>{escape(str(k))}</th>{_cell(v)}</tr>" for k, v in pairs.items())
    return f"<table><tbody>{body}</tbody></table>"


def _grid_table(grid: list[list[Any]]) -> str:
    if not grid:
        return '<p class="note">(empty)</p>'
    head = "".join(f"<th>{escape(str(c))}</th>" for c in grid[0])
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in grid[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def render_value(data: Any) -> str:
    """A JSON result as tables: scalars as a key/value table, lists of objects as row tables."""
    if _is_rows(data):
        return _rows_table(data)
    if not isinstance(data, dict):
        return _kv_table({"value": data})
    scalars = {k: v for k, v in data.items() if not (isinstance(v, dict) or _is_rows(v))}
    parts = [_kv_table(scalars)] if scalars else []
    for key, value in data.items():
        if key in scalars:
            continue
        parts.append(f"<h4>{escape(str(key))}</h4>{render_value(value)}")
    return "".join(parts)


def _figure(name: str, media: str, data: bytes) -> str:
    uri = f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"
    return f'<figure><img src="{uri}" alt="{escape(name)}"><figcaption>{escape(name)}</figcaption></figure>'


def paper_comparison(data: Any) -> str | None:
    """The section `kit compare` leaves in analysis/compare-paper.json: one line per published value with
    this run's value and the verdict; None when the file is not laid out that way (then shown as JSON)."""
    if not isinstance(data, dict) or not isinstance(data.get("lines"), list) or not all(
            isinstance(line, dict) for line in data["lines"]):
        return None
    rows = [{c.replace("_", " "): line.get(c) for c in COMPARE_COLUMNS} for line in data["lines"]]
    counts = data.get("counts") if isinstance(data.get("counts"), dict) else {}
    absent = [a for a in data.get("absent") or [] if isinstance(a, dict) and isinstance(a.get("rows"), list)]
    parts = ["<h3>Against the paper's published values (kit compare)</h3>",
             f'<p class="note">{escape(", ".join(f"{k} {v}" for k, v in counts.items()))}. Each line names the '
             "rule it used; underpowered: a smaller run than the paper's; not comparable: the line says what "
             "differs.</p>"]
    parts.append(_rows_table(rows) if rows else '<p class="note">(no line)</p>')
    if absent:
        parts.append('<p class="note">Not in this run: ' + "; ".join(
            escape(f"{a.get('table')}: {len(a['rows'])} published rows ({a.get('reason')})") for a in absent) + "</p>")
    return "".join(parts)


def _run_section(run: BundledRun) -> str:
    info = summary(run)
    status = escape(str(info["status"]))
    parts = [f'<h2 id="{escape(run.run_id)}">Run {escape(run.run_id)} '
             f'<span class="status-{status}">{status}</span></h2>', "<h3>Provenance</h3>", _kv_table(info)]
    tables = run.tables()
    comparison = paper_comparison(tables.get(COMPARE_FILE)) if COMPARE_FILE in tables else None
    if comparison is not None:
        parts.append(comparison)
    for name, data in tables.items():
        if name.endswith(".csv") and name[:-4] + ".json" in run.files:
            continue  # the JSON twin is shown, with more detail
        if name == COMPARE_FILE and comparison is not None:
            continue  # shown above, as its own section
        parts.append(f"<h3>{escape(name)}</h3>")
        parts.append(_grid_table(data) if name.endswith(".csv") else render_value(data))
    figures = run.figures()
    if figures:
        parts.append("<h3>Figures</h3>")
        parts.extend(_figure(name, media, data) for name, (media, data) in figures.items())
    others = [n for n in run.computed() if n not in figures and not n.endswith((".json", ".csv"))]
    if others:
        parts.append('<p class="note">Also in the bundle: ' + ", ".join(f"<code>{escape(n)}</code>" for n in others)
                     + "</p>")
    return "".join(parts)


def render(runs: list[BundledRun], index: dict[str, Any]) -> str:
    """The whole report as one HTML string."""
    title = f"Cache-divergence kit results: {', '.join(r.run_id for r in runs)}"
    intro = (f'<p class="note">Bundle written {escape(str(index.get("created")))} by kit '
             f'{escape(str(index.get("kit", {}).get("version")))}. Every number below is read from the bundled '
             "results; <code>kit verify</code> recomputes them from the raw records. This page needs no network.</p>")
    body = "".join(_run_section(run) for run in runs)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{intro}{body}</body></html>\n")
