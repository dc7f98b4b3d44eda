"""A remedy run (kit.protocols.remedy) held against the paper's unfixed values: per table (IV: GSM8K paths
differ, VII: correctness flips, V: BFCL path divergence) and per fixed arm, "closed" or "not closed".

The paper measured no fix, so its tables give the unfixed divergence only, one row per model, format and
engine. A fix closes a table against the paper when it reads 0 and its Wilson 95% upper bound lies below the
smallest divergence above 0 the paper's llama.cpp rows print for that quantity (so it is below every unfixed
rate the paper reports, whatever the model); 0 with an interval that reaches it is too few to tell, and any
divergence is not closed. Where every row of the paper reads 0 there is nothing to close. Read from the
remedy tables `kit analyze` keeps in findings.json (`kinds.remedy`)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from kit.analysis.findings_model import Findings
from kit.compare.measures import ROWS
from kit.compare.published import Reference
from kit.core.layout import ci, pct
from kit.core.terminal_text import printable
from kit.protocols.remedy.results import RemedyResults
from kit.protocols.results_model import Interval

QUANTITIES = {"IV": "paths_differ", "VII": "flips", "V": "path"}  # the remedy's measure -> the paper's quantity
ENGINE = "llama.cpp"
CLOSED, NOT_CLOSED, NOTHING, NOT_MEASURED = "closed", "not closed", "nothing to close", "not measured"


@dataclass(frozen=True)
class RemedyLine:
    """One fixed arm on one table: its value, the paper's unfixed value it is held against, the verdict and why."""

    run: str
    table: str
    arm: str
    this_run: str
    paper: str
    verdict: str
    why: str


def paper_floor(reference: Reference, table: str) -> tuple[float, str] | None:
    """The smallest unfixed rate above 0 (a fraction) among the paper's llama.cpp rows of `table` for its
    quantity, with the row it comes from; None where every row reads 0 or none gives it."""
    found = []
    for row in reference.section_rows((table, ROWS)):
        if row.engine != ENGINE:
            continue
        for value in row.values:
            if value.quantity != QUANTITIES[table] or value.conditions:
                continue
            rate = value.k / value.n if value.k is not None and value.n else (
                value.value / 100 if value.value is not None else None)
            if rate:
                found.append((rate, f"{row.short_model} {row.format}"))
    return min(found) if found else None


def judge(mine: Interval | None, floor: tuple[float, str] | None) -> tuple[str, str]:
    """The verdict of one fixed arm on one table and why."""
    if mine is None or not mine.n or mine.k is None:
        return NOT_MEASURED, "this run did not measure it"
    if floor is None:
        return NOTHING, "every unfixed row of the paper reads 0"
    rate, _ = floor
    if mine.k:
        return NOT_CLOSED, "it still diverges"
    if mine.hi is not None and mine.hi < rate:
        return CLOSED, "0, its 95% CI below the paper's value"
    return NOT_CLOSED, "0, but its 95% CI reaches the paper's value: too few to tell"


def table(lines: list[RemedyLine]) -> Table:
    """The lines as a terminal table (cells as plain text, never Rich markup)."""
    runs = sorted({line.run for line in lines})
    out = Table(title=f"remedy ({', '.join(runs)}): each fix held against the paper's unfixed values (the smallest "
                "above 0 of its llama.cpp rows)", title_justify="left")
    for column in ("table", "fix", "this run", "paper unfixed", "verdict", "why"):
        out.add_column(column)
    for line in lines:
        out.add_row(*(Text(printable(cell)) for cell in (
            line.table if len(runs) == 1 else f"{line.run} {line.table}", line.arm, line.this_run, line.paper,
            line.verdict, line.why)))
    return out


def remedy_lines(findings: Findings, reference: Reference, source: str) -> list[RemedyLine]:
    """Every fixed arm of every remedy run in `findings` on each table, held against the paper's unfixed
    values (NotResults naming `source` for a remedy table not laid out as this kit writes it)."""
    lines = []
    for entry in (findings.kinds or {}).get("remedy", []):
        t = RemedyResults.of(entry, f"{source}: kinds.remedy")
        run = str(entry.get("run") or t.run_id)
        for table in QUANTITIES:
            if not any(table in arm.divergence for arm in t.arms):
                continue
            floor = paper_floor(reference, table)
            paper = f"{pct(floor[0])}% ({floor[1]})" if floor else "0 in every row"
            for arm in t.arms[1:]:
                mine = arm.divergence.get(table)
                verdict, why = judge(mine, floor)
                shown = f"{mine.k}/{mine.n} {ci(mine.lo, mine.hi)}" if mine and mine.n else "-"
                lines.append(RemedyLine(run, f"Table {table}", arm.name, shown, paper, verdict, why))
    return lines

