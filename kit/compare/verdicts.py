"""Matching a run's rows to the published rows, and the verdict for each value.

A run row meets the published row of the same table, model, weight format and engine, and the same
settings where the paper names them (prompt cache, pass order, workload); a value then gets, in order:

* not comparable: <what differs>, when the configuration differs or the run lacks the value;
* underpowered (n=... vs the paper's ...), when the run is smaller than the paper's (episodes, items,
  histories, sessions); never consistent on a wide interval alone;
* consistent / inconsistent by the rule of its kind, stated on every line:
  - rates, counts and paired differences: the published value inside this run's 95% interval;
  - slopes and odds ratios: same sign (an odds ratio: the same side of 1) and the 95% intervals overlap;
  - p-values: both significant or both not at 0.05 (with the same alternative).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kit.analysis.findings_model import Findings
from kit.compare.measures import CONDITION_NAMES, MEASURES, Measured, RunRow, Section, section_name
from kit.compare.names import engine_key, format_key, model_display, model_key
from kit.compare.published import ConditionKey, PublishedRow, PublishedValue, Reference, ScaleKey
from kit.compare.run_rows import read_rows, skipped_reason

ALPHA = 0.05
EPS = 1e-9
CONSISTENT, INCONSISTENT, UNDERPOWERED, NOT_COMPARABLE = "consistent", "inconsistent", "underpowered", "not comparable"
RULES = {
    "rate": "rate: the published value inside this run's 95% interval",
    "difference": "paired difference: the published value inside this run's 95% interval",
    "slope": "slope: same sign and the 95% intervals overlap",
    "odds_ratio": "odds ratio: same side of 1 and the 95% intervals overlap",
    "p_value": f"p-value: both significant or both not at {ALPHA}",
}
UNITS = {"rate": "%", "difference": " points", "slope": " points/step", "odds_ratio": "", "p_value": ""}


@dataclass
class Line:
    """One line of the comparison: a published value beside this run's, with the verdict and its rule."""

    table: str
    row: str
    quantity: str
    published: str
    this_run: str
    verdict: str
    verdict_kind: str
    rule: str
    run: str
    run_row: str
    published_id: str | None = None
    kind: str = ""  # the published value's kind (rate, difference, slope, odds_ratio, p_value)
    note: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---- text -------------------------------------------------------------------------------------------

def _pct(x: float, signed: bool = False) -> str:
    return f"{x:+.1f}" if signed else f"{x:.1f}"


def _p_text(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2g}"


def _interval(lo: float | None, hi: float | None, kind: str) -> str:
    if lo is None or hi is None:
        return f"[{'-inf' if lo is None else _number(lo, kind)}, {'inf' if hi is None else _number(hi, kind)}]"
    return f"[{_number(lo, kind)}, {_number(hi, kind)}]"


def _number(x: float, kind: str) -> str:
    if kind == "odds_ratio":
        return f"{x:.2f}" if 0.01 <= x < 100 else f"{x:.3g}"
    return _pct(x, signed=kind == "difference")


def published_text(value: PublishedValue) -> str:
    if value.kind == "p_value":
        return f"{_p_text(value.point)} ({value.alternative})"
    head = f"{value.k}/{value.n} = " if value.k is not None else ""
    text = f"{head}{_number(value.point, value.kind)}{UNITS[value.kind]}"
    return text + (f" {_interval(value.lo, value.hi, value.kind)}" if value.lo is not None else "")


def measured_text(m: Measured, kind: str) -> str:
    if kind == "p_value":
        return f"{_p_text(m.value)} ({m.alternative})" if m.value is not None else "-"
    if m.sessions:
        counts = "/".join(str(s.k) for s in m.sessions)
        ns = sorted({s.n for s in m.sessions if s.n is not None})  # each session's Wilson count has its n
        intervals = sorted({_interval(s.lo, s.hi, kind) for s in m.sessions})
        each = f" {intervals[0]} each" if len(intervals) == 1 else " " + "; ".join(
            _interval(s.lo, s.hi, kind) for s in m.sessions)
        return f"{counts} of {'/'.join(map(str, ns))}{each} ({len(m.sessions)} sessions)"
    head = f"{m.k}/{m.n} = " if m.k is not None else ""
    return f"{head}{_number(m.value, kind)}{UNITS[kind]} {_interval(m.lo, m.hi, kind)}" if m.value is not None else "-"


# ---- rules ------------------------------------------------------------------------------------------

def _inside(point: float, m: Measured) -> bool | None:
    """Is `point` inside this run's interval (every session's, for per-session counts)? None: no interval."""
    parts = m.sessions or (m,)
    bounds = [(p.lo, p.hi) for p in parts if p.lo is not None and p.hi is not None]
    if len(bounds) < len(parts):
        return None
    return all(lo - EPS <= point <= hi + EPS for lo, hi in bounds)


def _sign(x: float, centre: float) -> int:
    return (x > centre) - (x < centre)


def rule_outcome(value: PublishedValue, m: Measured) -> tuple[bool | None, str, str]:
    """(agrees? None when it cannot be judged, the rule as stated, why it cannot be judged)."""
    rule = RULES[value.kind] + (f" ({m.method})" if m.method else "")
    if value.kind in ("rate", "difference"):
        inside = _inside(value.point, m)
        return inside, rule, "" if inside is not None else "this run gives no interval for it"
    if value.kind == "p_value":
        if m.value is None:
            return None, rule, "this run gives no p"
        if m.alternative != value.alternative:
            return None, rule, f"{m.alternative} vs the paper's {value.alternative} p"
        return (m.value < ALPHA) == (value.point < ALPHA), rule, ""
    if m.value is None or m.lo is None or m.hi is None:
        return None, rule, "this run's interval has no finite bound (a separated or failed fit)"
    centre = 1.0 if value.kind == "odds_ratio" else 0.0
    same_sign = _sign(m.value, centre) == _sign(value.point, centre) != 0
    overlap = m.lo <= value.hi + EPS and value.lo <= m.hi + EPS  # type: ignore[operator]
    return same_sign and overlap, rule, ""


# ---- matching ---------------------------------------------------------------------------------------

def _differences(run_row: RunRow, rows: list[PublishedRow], names: dict[str, str]) -> list[str]:
    """What keeps every published row of the table from being this run row's configuration."""
    diffs = []
    pool = [p for p in rows if model_key(p.model) == model_key(run_row.model)]
    if not pool:
        models = "/".join(dict.fromkeys(p.short_model for p in rows))
        diffs.append(f"{model_display(run_row.model, names)} vs {models}")
        pool = rows
    same = [p for p in pool if format_key(p.format) == format_key(run_row.format)]
    if not same:
        diffs.append(f"{run_row.format} vs {'/'.join(dict.fromkeys(p.format for p in pool))}")
        same = pool
    if run_row.engine is not None and not any(engine_key(p.engine) == engine_key(run_row.engine) for p in same):
        diffs.append(f"{run_row.engine} vs {'/'.join(dict.fromkeys(p.engine for p in same))}")
    return diffs


def _condition_differences(run: dict[str, str | None], wanted: dict[ConditionKey, str]) -> list[str]:
    return [f"{CONDITION_NAMES[k]} {run.get(k)} vs {v}" for k, v in wanted.items()
            if run.get(k) is not None and str(run.get(k)) != v]


def _unrecorded(run: dict[str, str | None], wanted: dict[ConditionKey, str]) -> list[str]:
    return [f"{CONDITION_NAMES[k]} not recorded in findings.json (not checked)" for k in wanted if run.get(k) is None]


def _fits(row: PublishedRow, run_row: RunRow) -> bool:
    return all(run_row.scale.get(k, 0) >= v for k, v in row.scale.items())


def choose(run_row: RunRow, rows: list[PublishedRow]) -> tuple[PublishedRow | None, list[str]]:
    """The published row this run row is compared with, or None and what differs."""
    names = {model_key(p.model): p.short_model for p in rows}
    exact = [p for p in rows if model_key(p.model) == model_key(run_row.model)
             and format_key(p.format) == format_key(run_row.format)
             and (run_row.engine is None or engine_key(p.engine) == engine_key(run_row.engine))]
    if not exact:
        return None, _differences(run_row, rows, names)
    settled = [p for p in exact if not _condition_differences(run_row.conditions, p.conditions)]
    if not settled:
        wanted: dict[str, list[str]] = {}
        for p in exact:
            for k, v in p.conditions.items():
                wanted.setdefault(k, []).append(v)
        diffs = [f"{CONDITION_NAMES[k]} {run_row.conditions.get(k)} vs {'/'.join(dict.fromkeys(vs))}"
                 for k, vs in wanted.items() if run_row.conditions.get(k) is not None
                 and str(run_row.conditions.get(k)) not in vs]
        return None, diffs or ["no published row with these settings"]
    fitting = [p for p in settled if _fits(p, run_row)]
    if fitting:
        return max(fitting, key=lambda p: sorted(p.scale.values(), reverse=True)), []
    return min(settled, key=lambda p: sorted(p.scale.values())), []


def _underpowered(run_scale: dict[str, int], wanted: dict[ScaleKey, int]) -> tuple[list[str], list[ScaleKey]]:
    """(shortfalls, scale keys this run does not give)."""
    short, unknown = [], []
    for key, paper in wanted.items():
        if key not in run_scale:
            unknown.append(key)
        elif run_scale[key] < paper:
            short.append(f"n={run_scale[key]} {key} vs the paper's {paper}")
    return short, unknown


def judge(run_row: RunRow, row: PublishedRow, value: PublishedValue) -> Line:
    """The line for one published value of the row this run row was matched with."""
    measure = MEASURES[row.section][value.quantity]
    base = dict(table=section_name(row.section), row=row.row, quantity=measure.label,
                published=published_text(value), run=run_row.run, run_row=run_row.label, published_id=row.id,
                kind=value.kind)
    notes = list(run_row.notes) + _unrecorded(run_row.conditions, row.conditions_of(value))
    if run_row.engine is None:
        notes.append("engine not recorded in findings.json (re-run `kit analyze`; not checked)")
    numbers: dict[str, Any] = {"published": value.model_dump(exclude={"conditions", "scale"}, exclude_none=True)}
    m = run_row.measures.get(value.quantity)
    if m is None:
        why = run_row.missing.get(value.quantity, "findings.json gives no value for it")
        return Line(**base, this_run="-", verdict=f"{NOT_COMPARABLE}: {why}", verdict_kind=NOT_COMPARABLE,
                    rule=RULES[value.kind], note="; ".join(notes), numbers=numbers)
    numbers["run"] = _numbers(m)
    this_run = measured_text(m, value.kind)
    agrees, rule, why_not = rule_outcome(value, m)
    differs = _condition_differences(run_row.conditions, value.conditions)
    scale = {**run_row.scale, **run_row.scale_overrides.get(value.quantity, {})}
    short, unknown = _underpowered(scale, row.scale_of(value))
    if differs:
        verdict, kind = f"{NOT_COMPARABLE}: {'; '.join(differs)}", NOT_COMPARABLE
    elif unknown:
        verdict, kind = f"{NOT_COMPARABLE}: findings.json does not give this run's {', '.join(unknown)}", NOT_COMPARABLE
    elif short:
        verdict, kind = f"{UNDERPOWERED} ({'; '.join(short)})", UNDERPOWERED
        if agrees is not None:
            notes.insert(0, "by the rule alone it would read " + (CONSISTENT if agrees else INCONSISTENT))
    elif agrees is None:
        verdict, kind = f"{NOT_COMPARABLE}: {why_not}", NOT_COMPARABLE
    else:
        verdict = kind = CONSISTENT if agrees else INCONSISTENT
    return Line(**base, this_run=this_run, verdict=verdict, verdict_kind=kind, rule=rule, note="; ".join(notes),
                numbers=numbers)


def _numbers(m: Measured) -> dict[str, Any]:
    found = {k: v for k, v in asdict(m).items() if v not in (None, "", ()) and k != "sessions"}
    if m.sessions:
        found["sessions"] = [{k: v for k, v in asdict(s).items() if v not in (None, "", ())} for s in m.sessions]
    return found


# ---- the whole comparison ---------------------------------------------------------------------------

@dataclass
class Comparison:
    """Every line, and the published rows this run has nothing to set beside (per table, with why)."""

    lines: list[Line]
    absent: list[dict[str, Any]]

    def counts(self) -> dict[str, int]:
        kinds = (CONSISTENT, INCONSISTENT, UNDERPOWERED, NOT_COMPARABLE)
        return {k: sum(line.verdict_kind == k for line in self.lines) for k in kinds}


def compare_section(section: Section, run_rows: list[RunRow], reference: Reference) -> tuple[list[Line], set[str]]:
    rows = reference.section_rows(section)
    names = {model_key(p.model): p.short_model for p in rows}
    lines, used = [], set()
    for run_row in run_rows:
        chosen, diffs = choose(run_row, rows)
        if chosen is None:
            label = f"this run: {model_display(run_row.model, names)} {run_row.label}"
            lines.append(Line(table=section_name(section), row=label, quantity="every quantity",
                              published="-", this_run="-", verdict=f"{NOT_COMPARABLE}: {'; '.join(diffs)}",
                              verdict_kind=NOT_COMPARABLE, rule="same table, model, format, engine and settings",
                              run=run_row.run, run_row=run_row.label, note="; ".join(run_row.notes)))
            continue
        used.add(chosen.id)
        lines.extend(judge(run_row, chosen, value) for value in chosen.values)
    return lines, used


def compare(findings: Findings, reference: Reference) -> Comparison:
    """All sections of the reference against a findings.json (kit.compare.run_rows reads it)."""
    lines, absent = [], []
    for section in reference.sections:
        run_rows = read_rows(findings, section)
        found, used = compare_section(section, run_rows, reference)
        lines.extend(found)
        left = [r.row for r in reference.section_rows(section) if r.id not in used]
        if left:
            why = skipped_reason(findings, section) if not run_rows else "no row of this run has their configuration"
            absent.append({"table": section_name(section), "rows": left, "reason": why})
    return Comparison(lines, absent)
