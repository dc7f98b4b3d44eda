"""The offline HTML report: one self-contained page a reviewer reads top to bottom (inline CSS, figures as
data URIs, no script, no network), under a Content-Security-Policy that lets the page run nothing and load
nothing but its own style sheet (by its hash) and data: images, so that even a text that escaped escaping
could not run or fetch anything (docs/security.md, rule 4).

It opens with a headline verdict per run (kit.bundle.headline: what diverged, how often, with its
interval, and whether the controls held), then each run: its verdict and controls, its main table (and any
figure its kind draws from it, such as the remedy's cost by prompt length, as a data: SVG image),
the paper's Tables III–VII when `kit analyze` left findings in the run folder, the comparison with the
published values (`kit compare`), the figures, the provenance, and links to the raw results files
(never dumped). Every text from a bundle file is HTML-escaped. `render` is deterministic: `kit verify`
renders it again from the verified files and compares (kit.bundle.reader_files): a reviewer is shown only
this kit's own rendering.
"""

from __future__ import annotations

import base64
import html
from typing import Any
from urllib.parse import quote

from kit.core.digests import sha256_base64
from kit.core.layout import Layout
from kit.bundle.content import BundledRun, summary
from kit.bundle.headline import FINDINGS, Headline, headline, paper_tables
from kit.core.terminal_text import printable

COMPARE_FILE = "analysis/compare-paper.json"  # written by `kit compare RUN_DIR --reference paper`
COMPARE_COLUMNS = ("table", "row", "quantity", "published", "this_run", "verdict", "rule")
FIGURE_NOTES = {
    "fig3": "Margin bins with fewer positions than the threshold printed on the figure are hatched and labelled "
            "with their n: a rate from so few positions says little.",
}

STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:70rem;color:#1d1d1f;
line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;overflow-wrap:anywhere}h2{border-bottom:2px solid #3b6ea5;padding-bottom:.2rem;margin-top:2.5rem;
overflow-wrap:anywhere}h3{margin-top:1.6rem;font-size:1.05rem}
.wide{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem;max-width:100%}
caption{text-align:left;font-size:.85rem;color:#333;padding-bottom:.3rem}
th,td{border:1px solid #c8ccd2;padding:.25rem .55rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
table.kv td{overflow-wrap:anywhere}
th{background:#e8eef6}tr:nth-child(even) td{background:#f7f8fa}
table.kv th{width:12rem}
.status-finished{color:#176b2c}.status-failed,.status-interrupted{color:#a31515}
.held{color:#176b2c;font-weight:600}.broken{color:#a31515;font-weight:600}.unjudged{color:#7a5b00;font-weight:600}
.verdict{border-left:4px solid #3b6ea5;background:#f3f6fa;padding:.5rem 1rem;margin:.8rem 0}
.verdict ul{margin:.2rem 0;padding-left:1.2rem}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #c8ccd2}
figcaption{font-size:.8rem;color:#555}
code{font-family:ui-monospace,monospace;font-size:.85em;overflow-wrap:anywhere}.note{color:#555;font-size:.9rem}
"""

# What the page may load: its own style sheet (this one, by its sha256) and data: images; no script, no
# font, frame, form target or base URL. Set by a <meta> before anything else is parsed.
def content_security_policy(style: str) -> str:
    """The policy of a page the kit renders: its own style sheet `style` (by its sha256) and data: images."""
    return ("default-src 'none'; img-src data:; style-src "
            f"'sha256-{sha256_base64(style)}'; "
            "base-uri 'none'; form-action 'none'")


CSP = content_security_policy(STYLE)


def escape(text: Any) -> str:
    """Text from a bundle file as HTML: control characters removed (a page is plain UTF-8 text; kit verify
    refuses NUL), then escaped."""
    return html.escape(printable(str(text)))


def _table(layout: Layout, title: str | None = None) -> str:
    caption = f"<caption><strong>{escape(title)}.</strong> {escape(layout.caption)}</caption>" if title else \
        f"<caption>{escape(layout.caption)}</caption>"
    head = "".join(f"<th>{escape(c)}</th>" for c in layout.header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in layout.rows)
    if not layout.rows:
        body = f'<tr><td colspan="{max(1, len(layout.header))}">(no rows)</td></tr>'
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in layout.notes)
    return f'<div class="wide"><table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{notes}'


def _kv_table(pairs: dict[str, Any]) -> str:
    body = "".join(f"<tr><th>{escape(str(k))}</th><td>{'&mdash;' if v is None else escape(str(v))}</td></tr>"
                   for k, v in pairs.items())
    return f'<div class="wide"><table class="kv"><tbody>{body}</tbody></table></div>'


def _held(h: Headline) -> str:
    label, css = {True: ("controls held", "held"), False: ("controls did NOT hold", "broken"),
                  None: ("controls not judged", "unjudged")}[h.held]
    return f'<span class="{css}">{label}</span>'


def _verdict(h: Headline) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in h.verdict)
    controls = "".join(f"<li>{escape(line)}</li>" for line in h.controls)
    claims = "".join(f"<li>{escape(line)}</li>" for line in h.qualitative[1:])
    paper = (f"<p><strong>The paper's findings</strong>: {escape(h.qualitative[0])}</p>"
             + (f"<ul>{claims}</ul>" if claims else "")) if h.qualitative else ""
    return (f'<div class="verdict"><p><strong>Verdict</strong></p><ul>{items}</ul>'
            f"<p><strong>Controls</strong>: {_held(h)}</p>" + (f"<ul>{controls}</ul>" if controls else "") + paper
            + "</div>")


def _link(run: BundledRun, name: str) -> str:
    return f'<a href="{escape(quote(run.prefix + name))}"><code>{escape(name)}</code></a>'


def paper_comparison(data: Any) -> str | None:
    """The section `kit compare` leaves in analysis/compare-paper.json: one line per published value with
    this run's value and the verdict; None when the file is not laid out that way (then only linked)."""
    if not isinstance(data, dict) or not isinstance(data.get("lines"), list) or not all(
            isinstance(line, dict) for line in data["lines"]):
        return None
    counts = found if isinstance(found := data.get("counts"), dict) else {}
    layout = Layout("compare", f"{', '.join(f'{k} {v}' for k, v in counts.items())}. Each line names the rule it "
                    "used; underpowered: a smaller run than the paper's; not comparable: the line says what differs.",
                    [c.replace("_", " ") for c in COMPARE_COLUMNS],
                    [["" if line.get(c) is None else str(line.get(c)) for c in COMPARE_COLUMNS]
                     for line in data["lines"]])
    absent = [a for a in data.get("absent") or [] if isinstance(a, dict) and isinstance(a.get("rows"), list)]
    layout.notes = ["Not in this run: " + "; ".join(f"{a.get('table')}: {len(a['rows'])} published rows "
                                                    f"({a.get('reason')})" for a in absent)] if absent else []
    return "<h3>Against the paper's published values (kit compare)</h3>" + _table(layout)


def _figure(name: str, media: str, data: bytes, note: str | None = None) -> str:
    uri = f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"
    stem = name.rsplit("/", 1)[-1]
    note = note or next((n for key, n in FIGURE_NOTES.items() if stem.startswith(key)), "")
    return (f'<figure><img src="{uri}" alt="{escape(name)}"><figcaption><code>{escape(name)}</code>'
            f"{' ' + escape(note) if note else ''}</figcaption></figure>")


def _run_section(run: BundledRun, h: Headline) -> str:
    status = escape(h.status)
    parts = [f'<h2 id="{escape(run.run_id)}">Run {escape(run.run_id)} <span class="status-{status}">({status})'
             "</span></h2>", _verdict(h)]
    parts.extend(_table(layout, f"Results: {layout.name}") for layout in h.tables)
    parts.extend(_figure(f.name, f.media, f.data, f.caption) for f in h.figures)  # drawn by the kit from the table
    shown, absent = paper_tables(run)
    if shown or absent:
        parts.append("<h3>The paper's tables (kit analyze)</h3>")
        parts.extend(_table(layout, f"Table {layout.name}") for layout in shown)
        if absent:
            parts.append('<p class="note">Not computed from this run: ' + "; ".join(escape(a) for a in absent) + "</p>")
    tables = run.tables()
    comparison = paper_comparison(tables.get(COMPARE_FILE)) if COMPARE_FILE in tables else None
    if comparison is not None:
        parts.append(comparison)
    figures = run.figures()
    if figures:
        parts.append("<h3>Figures</h3>")
        parts.extend(_figure(name, media, data) for name, (media, data) in figures.items())
    parts += ["<h3>Provenance</h3>", _kv_table(summary(run))]
    raw = [n for n in run.computed() if n not in figures]
    if raw:
        findings = f"; <code>{escape(FINDINGS)}</code> holds every finding with its counts" if FINDINGS in raw else ""
        parts.append(f'<p class="note">Raw results in the bundle (every number above is read from them{findings}): '
                     + ", ".join(_link(run, n) for n in raw) + "</p>")
    return "".join(parts)


def _overview(heads: list[Headline]) -> str:
    rows = "".join(f'<tr><td><a href="#{escape(quote(h.run_id))}">{escape(h.run_id)}</a></td><td>{escape(h.kind)}'
                   f"</td><td>{escape(h.status)}</td><td>{escape(h.verdict[0] if h.verdict else '')}</td>"
                   f"<td>{_held(h)}</td><td>{escape(h.qualitative[0] if h.qualitative else 'not measured by this run')}"
                   "</td></tr>" for h in heads)
    return ('<h2>Headline</h2><div class="wide"><table><thead><tr><th>run</th><th>kind</th><th>status</th>'
            "<th>what diverged, how often</th><th>controls</th><th>the paper's qualitative findings</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def render(runs: list[BundledRun], index: dict[str, Any]) -> str:
    """The whole report as one HTML string."""
    title = f"Cache-divergence kit results: {', '.join(r.run_id for r in runs)}"
    kit = found if isinstance(found := index.get("kit"), dict) else {}
    intro = (f'<p class="note">Bundle written {escape(str(index.get("created")))} by kit '
             f'{escape(str(kit.get("version")))}. Every number below is read from the bundled results; '
             "<code>kit verify</code> recomputes them from the raw records and renders this page again from the "
             "verified files. This page needs no network.</p>")
    heads = [headline(run) for run in runs]
    body = _overview(heads) + "".join(_run_section(run, h) for run, h in zip(runs, heads))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{intro}{body}</body></html>\n")
