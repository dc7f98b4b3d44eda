"""What `kit compare` shows and writes: a terminal table, and compare-paper.md, .csv and .json beside
the findings.json it read (each placed atomically: a reader sees the old file or the new one).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from kit.compare import claims
from kit.compare.claim_rules import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from kit.core.atomic_file import write_json_atomic, write_text_atomic
from kit.compare.verdicts import CONSISTENT, INCONSISTENT, NOT_COMPARABLE, RULES, UNDERPOWERED, Comparison
from kit.record.manifest import now
from kit.core.terminal_text import one_line

SCHEMA = "kit.compare/1"
STEM = "compare-paper"
CSV_FIELDS = ("table", "row", "quantity", "published", "this_run", "verdict", "verdict_kind", "rule", "note", "run",
              "run_row", "published_id")
STYLES = {CONSISTENT: "green", INCONSISTENT: "bold red", UNDERPOWERED: "yellow", NOT_COMPARABLE: "dim"}
CLAIM_STYLES = {HOLDS: "green", FAILS: "bold red", INCONCLUSIVE: "yellow"}
SHORT_RULES = {"rate": "inside 95% CI", "difference": "inside 95% CI", "slope": "same sign, CIs overlap",
               "odds_ratio": "same side of 1, CIs overlap", "p_value": "both p<0.05 or both not"}


def document(comparison: Comparison, findings_path: Path, findings_created: str | None, reference: Any,
             reference_name: str) -> dict[str, Any]:
    """compare-paper.json: every line with its numbers, the counts, the rules and what is not in this run."""
    return {"schema": SCHEMA, "created": now(), "reference": reference_name, "paper": reference.paper,
            "findings": str(findings_path), "findings_created": findings_created,
            "counts": comparison.counts(), "rules": RULES,
            "lines": [line.to_json() for line in comparison.lines], "absent": comparison.absent}


def summary_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def terminal_table(comparison: Comparison) -> Table:
    """One line per published value: where it is, both values, and the verdict with its rule (and any
    note) beneath."""
    table = Table(title="This run against the paper (seed 000)", show_lines=False, expand=False)
    for column in ("table", "row: quantity", "published", "this run [95% CI]", "verdict (rule)"):
        table.add_column(column, overflow="fold")
    for line in comparison.lines:
        verdict = Text(one_line(line.verdict), style=STYLES.get(line.verdict_kind, ""))
        verdict.append("\n" + (SHORT_RULES.get(line.kind) or one_line(line.rule)), style="dim")
        if line.note:
            verdict.append("\n" + one_line(line.note), style="dim italic")
        table.add_row(Text(one_line(line.table)), Text(one_line(f"{line.row}: {line.quantity}")),
                      Text(one_line(line.published)), Text(one_line(line.this_run)), verdict)
    return table


def absent_lines(comparison: Comparison) -> list[str]:
    return [one_line(f"{a['table']}: {len(a['rows'])} published row{'s' if len(a['rows']) != 1 else ''} not in this "
                     f"run ({a['reason']})") for a in comparison.absent]


def _md(text: Any) -> str:
    return one_line(str(text)).replace("\\", "\\\\").replace("|", "\\|")


def markdown(doc: dict[str, Any]) -> str:
    counts = doc["counts"]
    out = ["# This run against the paper (seed 000)", "",
           f"Findings: `{_md(doc['findings'])}` (analysed {_md(doc['findings_created'])}); reference: "
           f"{_md(doc['reference'])} ({_md(doc['paper'])}). Written {_md(doc['created'])} by `kit compare`.", "",
           f"**{summary_line(counts)}**", "",
           "Rules (each line names the one it used):", ""]
    out += [f"- {_md(rule)}" for rule in doc["rules"].values()]
    out += ["- underpowered: this run is smaller than the paper's (episodes, items, histories, sessions), whatever "
            "its interval says", "- not comparable: a different model, format, engine or setting, or a value this run "
            "does not have (the line says which)", "",
            "| table | row | quantity | published | this run [95% CI] | verdict | rule | note | run |",
            "|---|---|---|---|---|---|---|---|---|"]
    for line in doc["lines"]:
        out.append("| " + " | ".join(_md(line[k]) for k in ("table", "row", "quantity", "published", "this_run",
                                                             "verdict", "rule", "note", "run")) + " |")
    if doc["absent"]:
        out += ["", "## Published rows this run has nothing to set beside", ""]
        out += [f"- {_md(a['table'])} ({_md(a['reason'])}): " + "; ".join(_md(r) for r in a["rows"])
                for a in doc["absent"]]
    return "\n".join(out) + "\n"


def csv_text(doc: dict[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for line in doc["lines"]:
        writer.writerow({k: one_line(str(line.get(k) if line.get(k) is not None else "")) for k in CSV_FIELDS})
    return buffer.getvalue()


def claims_table(judged: list[claims.Judged]) -> Table:
    """One line per qualitative claim this run measures: the claim, its verdict and the counts behind it."""
    table = Table(title="The paper's qualitative findings on this run (any model or scale)", show_lines=False,
                  expand=False)
    for column in ("table", "claim", "verdict (counts)"):
        table.add_column(column, overflow="fold")
    for j in judged:
        if j.judgement.verdict == NOT_MEASURED:
            continue
        verdict = Text(j.judgement.verdict, style=CLAIM_STYLES.get(j.judgement.verdict, ""))
        verdict.append("\n" + one_line(j.judgement.counts), style="dim")
        table.add_row(Text(f"Table {j.claim.table}"), Text(one_line(j.claim.statement)), verdict)
    return table


def write_all(folder: Path, doc: dict[str, Any], claims_doc: dict[str, Any] | None = None) -> list[Path]:
    """compare-paper.md, .csv and .json in `folder`, and compare-claims.md and .json when given (every text
    rendered before the first is written)."""
    texts = {folder / f"{STEM}.md": markdown(doc), folder / f"{STEM}.csv": csv_text(doc)}
    if claims_doc is not None:
        texts[folder / f"{claims.STEM}.md"] = claims.markdown(claims_doc)
    for path, text in texts.items():
        write_text_atomic(path, text)
    write_json_atomic(folder / f"{STEM}.json", doc)
    written = [*texts, folder / f"{STEM}.json"]
    if claims_doc is not None:
        write_json_atomic(folder / f"{claims.STEM}.json", claims_doc)
        written.append(folder / f"{claims.STEM}.json")
    return written
