"""The atlas as the kit shows it: a terminal view (Rich; one column per atlas row, so two or three rows sit
side by side in 100 columns), an HTML page of the kit's own rendering (every value escaped, no markup from
any input, the bundle report's strict Content-Security-Policy built for this page's style sheet, the wide
table in a box that scrolls inside the page so the page itself never scrolls sideways) and CSV."""

from __future__ import annotations

import csv
import io

from rich.table import Table
from rich.text import Text

from kit.atlas.table import KEY_NAMES, Atlas, csv_rows, key_cells
from kit.bundle.report import STYLE, content_security_policy, escape
from kit.core.terminal_text import one_line

PAGE_STYLE = STYLE + """
.atlas td,.atlas th{min-width:7rem;max-width:18rem}
.atlas td:first-child,.atlas th:first-child{min-width:2rem}
.atlas td.why{color:#7a5b00;font-style:italic}
.atlas th.group{background:#d3deec}
"""
PAGE_CSP = content_security_policy(PAGE_STYLE)


def terminal(atlas: Atlas) -> Table:
    """Transposed for the console: a line per key field and measure, a column per atlas row."""
    view = Table(title="Atlas: engine x build x machine x CPU backend x model x weight format x cache setting x server "
                       "binary or image",
                 title_justify="left", show_lines=False)
    view.add_column("", style="bold", overflow="fold")
    for number in range(len(atlas.rows)):
        view.add_column(f"#{number + 1}", overflow="fold")
    keys = [key_cells(row) for row in atlas.rows]
    for name in KEY_NAMES:
        view.add_row(name, *[Text(one_line(key[name])) for key in keys])
    group = None
    for column in atlas.columns:
        if column.group != group:
            group = column.group
            view.add_row(Text(group, style="underline"), *["" for _ in atlas.rows])
        cells = [atlas.cell(row, column) for row in atlas.rows]
        view.add_row(Text(column.label), *[Text(one_line(c.brief), style="dim italic" if c.why else "")
                                           for c in cells])
    return view


def legend(atlas: Atlas) -> list[str]:
    """The ladder columns' contrasts and the columns of a table's further rows (`IV:paths_differ·2`), then the
    notes (n/a in the terminal: the cell cannot be compared)."""
    return [f"{c.group} {c.label}: {c.what}" for c in atlas.columns if c.group == "ladder" or "·" in c.label] + \
        atlas.notes


def html_page(atlas: Atlas, title: str = "Cache-divergence atlas") -> str:
    """The whole page as one string; every value escaped."""
    head = "".join(f"<th>{escape(name)}</th>" for name in ("#", *KEY_NAMES))
    groups = f'<th class="group" colspan="{len(KEY_NAMES) + 1}">row</th>'
    spans: list[tuple[str, int]] = []
    for column in atlas.columns:
        if spans and spans[-1][0] == column.group:
            spans[-1] = (column.group, spans[-1][1] + 1)
        else:
            spans.append((column.group, 1))
    groups += "".join(f'<th class="group" colspan="{n}">{escape(g)}</th>' for g, n in spans)
    head += "".join(f'<th title="{escape(c.what)}">{escape(c.label)}</th>' for c in atlas.columns)
    body = []
    for number, row in enumerate(atlas.rows, 1):
        cells = [f"<td>{number}</td>", *(f"<td>{escape(value)}</td>" for value in row.key)]
        for column in atlas.columns:
            cell = atlas.cell(row, column)
            cells.append(f'<td class="why">{escape(cell.shown)}</td>' if cell.why else f"<td>{escape(cell.text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    items = "".join(f"<li>{escape(line)}</li>" for line in legend(atlas))
    sources = "".join(f"<li><code>{escape(run.source)}</code> ({escape(run.run_id)})</li>"
                      for row in atlas.rows for run in row.runs)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}"><title>{escape(title)}</title>'
            f'<style>{PAGE_STYLE}</style></head><body><h1>{escape(title)}</h1>'
            '<p class="note">Every input was verified first (bundles by <code>kit verify</code>\'s code; run folders '
            "recomputed from their raw records); every value below is read from what was verified. A cell that "
            "cannot be compared says why. Rates: percent [Wilson or the run's own 95% interval] (k/n).</p>"
            f'<div class="wide"><table class="atlas"><thead><tr>{groups}</tr><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
            f"<h2>Columns</h2><ul>{items}</ul><h2>Inputs</h2><ul>{sources}</ul></body></html>\n")


def _inert(value: str) -> str:
    """A value a spreadsheet would run as a formula gets a leading quote (values come from the inputs)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def csv_text(atlas: Atlas) -> str:
    rows = csv_rows(atlas)
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _inert(one_line(v)) for k, v in row.items()} for row in rows)
    return out.getvalue()
