"""What a run measured that decides the paper's qualitative claims (kit.compare.claims), per table, read from
the findings.json `kit analyze` wrote or, for a run not analysed yet, from its restored-state results table
(results/reset_table.json: Table IV's measures only).

Everything here is counts and intervals as the findings give them; nothing is matched against the paper's
configuration (a claim is judged on any model, format or scale).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kit.analysis.findings_model import (
    Findings,
    TableIIIRow,
    TableIVRow,
    TableVIIRow,
    TableVIRow,
    TableVRow,
    from_json,
)
from kit.compare.names import model_display
from kit.compare.run_rows import FindingsShape, count, number, odds_ratio, optional, slope
from kit.compare.measures import Measured
from kit.core.paths import RunPaths
from kit.protocols.reset.results import TABLE as RESET_TABLE
from kit.protocols.reset.results import ResetResults
from kit.protocols.results_model import NotResults

RESET_FILE = RunPaths.result_name("reset_table")  # where a reset run's results table lies in its folder
FINDINGS_FILE = f"{RunPaths.ANALYSIS}/{RunPaths.FINDINGS}"


@dataclass(frozen=True)
class Rate:
    """k of n, with the 95% interval the findings give (fractions), where they give one."""

    k: int
    n: int
    lo: float | None = None
    hi: float | None = None

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 0.0

    def text(self) -> str:
        if self.lo is None or self.hi is None:
            return f"{self.k}/{self.n}"
        return f"{self.k}/{self.n} [{100 * self.lo:.1f}, {100 * self.hi:.1f}]%"


@dataclass(frozen=True)
class RerunRow:
    """Table III: cache-on run-to-run divergence of one grid run, with its prompt-cache setting and pass order."""

    label: str
    prompt_cache: str
    order: str
    rerun: Rate


@dataclass(frozen=True)
class Session:
    """Table IV: one session's counts of items (each path reproduces, the paths differ, and of those how many
    on items where each path reproduced: None where the findings of an earlier kit do not say)."""

    name: str
    items: int
    recompute: int
    hit: int
    differ: int
    cache_caused: int | None


@dataclass(frozen=True)
class ResetRow:
    """Table IV: one restored-state run (one format): its sessions and the items the same in all of them."""

    label: str
    sessions: tuple[Session, ...]
    across_items: int | None = None  # items served in every OK session (None: fewer than two sessions)
    recompute_same: int | None = None
    hit_same: int | None = None


@dataclass(frozen=True)
class GridRow:
    """Table V: one configuration's path divergence and, where run twice, each arm's run-to-run divergence."""

    label: str
    prompt_cache: str
    path: Rate
    off: Rate | None
    on: Rate | None


@dataclass(frozen=True)
class Trend:
    """A trend over formats: its estimate and 95% interval, and the value of no trend (1 for an odds ratio)."""

    label: str
    what: str
    estimate: float
    lo: float | None
    hi: float | None
    null: float


@dataclass(frozen=True)
class FormatDifference:
    """Table VI: a format's paired difference from the reference format (points) and in how many histories it
    lay above the reference."""

    format: str
    reference: str
    diff: float
    lo: float
    hi: float
    above: int
    histories: int


@dataclass(frozen=True)
class BridgeRow:
    """Table VII: one bridge configuration's path determinism, cache-attributable divergence and correctness."""

    label: str
    n: int
    recompute: int
    hit: int
    attributable: int
    differ: int
    flips: int | None = None  # None: no correctness in this run
    b: int | None = None
    c: int | None = None
    p: float | None = None


@dataclass
class Evidence:
    """Everything one run (or one findings.json) measured that a claim reads, per table; `source` says where it
    was read from."""

    source: str
    iii: list[RerunRow] = field(default_factory=list)
    iv: list[ResetRow] = field(default_factory=list)
    v: list[GridRow] = field(default_factory=list)
    v_trend: list[Trend] = field(default_factory=list)
    vi: list[FormatDifference] = field(default_factory=list)
    vi_trend: list[Trend] = field(default_factory=list)
    vii: list[BridgeRow] = field(default_factory=list)


def _label(row: TableIVRow | TableVRow | TableVIIRow) -> str:
    return f"{model_display(str(row.model), {})} {row.format}"


def _rate(row: TableIIIRow | TableVRow, prefix: str, what: str) -> Rate:
    def cell(key: str) -> Any:
        return getattr(row, f"{prefix}{key}")

    return Rate(count(cell("k"), f"{what} k"), count(cell("n"), f"{what} n"), optional(cell("lo"), f"{what} lo"),
                optional(cell("hi"), f"{what} hi"))


def _reset_row(label: str, sessions: list[Session], across: Mapping[str, Any]) -> ResetRow:
    if across.get("items") is None:
        return ResetRow(label, tuple(sessions))
    return ResetRow(label, tuple(sessions), count(across["items"], "across_sessions items"),
                    count(across["recompute_same_in_all"], "recompute_same_in_all"),
                    count(across["hit_same_in_all"], "hit_same_in_all"))


def _table_iv(rows: list[TableIVRow]) -> list[ResetRow]:
    found = []
    for r in rows:
        caused: list[Any] = list(r.cache_caused) if r.cache_caused else [None] * len(r.items)
        lists = {"sessions": r.sessions, "items": r.items, "recompute_reproduces": r.recompute_reproduces,
                 "hit_reproduces": r.hit_reproduces, "paths_differ": r.paths_differ, "cache_caused": caused}
        if len({len(values) for values in lists.values()}) != 1:
            raise FindingsShape(f"row {r.run!r} gives per-session lists of different lengths ("
                                + ", ".join(f"{k} {len(values)}" for k, values in lists.items()) + ")")
        sessions = [Session(str(name), count(items, "items"), count(rec, "recompute_reproduces"),
                            count(hit, "hit_reproduces"), count(differ, "paths_differ"),
                            None if cause is None else count(cause, "cache_caused"))
                    for name, items, rec, hit, differ, cause in zip(*lists.values(), strict=True)]
        if sessions:
            found.append(_reset_row(_label(r), sessions, r.across_sessions))
    return found


def _trend(label: str, found: Measured | str, what: str, null: float) -> Trend | None:
    """A trend of kit.compare.run_rows' reading (None where it says why there is none)."""
    if not isinstance(found, Measured) or found.value is None:
        return None
    return Trend(label, what, found.value, found.lo, found.hi, null)


def _odds_ratio(label: str, fit: Any, what: str) -> Trend | None:
    return _trend(label, odds_ratio(fit, what), what, 1.0)


def _grid_trends(findings: Findings) -> list[Trend]:
    trends = []
    for name, entry in (findings.grid_trend.models if findings.grid_trend else {}).items():
        label = f"{name} over {'+'.join(map(str, entry.get('formats') or []))}"
        trend = _odds_ratio(label, entry.get("glmm"), "random-intercept odds ratio per format step") or _odds_ratio(
            label, entry.get("conditional_logit"), "conditional-logit odds ratio per format step")
        if trend is not None:
            trends.append(trend)
    return trends


def _sweep_trend(findings: Findings) -> list[Trend]:
    boot = findings.sweep.bootstrap if findings.sweep else {}
    if not boot.get("formats"):
        return []
    label = "sweep over " + "+".join(str(f.get("label")) for f in boot["formats"] if isinstance(f, dict))
    fit = None if boot.get("glmm_skipped") or boot.get("glmm_note") else _odds_ratio(
        label, boot, "history-averaged odds ratio per format step")
    what = "rate slope, points per format step"
    found = fit or _trend(label, slope(boot, what), what, 0.0)
    return [found] if found is not None else []


def _table_vi(rows: list[TableVIRow]) -> list[FormatDifference]:
    reference = next((r.format for r in rows if r.is_reference), "the reference")
    return [FormatDifference(r.format, reference, 100 * number(r.diff, "diff"), 100 * number(r.diff_lo, "diff_lo"),
                             100 * number(r.diff_hi, "diff_hi"), count(r.above_reference, "above_reference"),
                             count(r.histories, "histories"))
            for r in rows if not r.is_reference]


def _table_vii(rows: list[TableVIIRow]) -> list[BridgeRow]:
    found = []
    for r in rows:
        n = count(r.n, "n")
        if n == 0:
            continue
        label = f"{_label(r)}{', session ' + str(r.session) if r.session else ''}, {n} items"
        row = BridgeRow(label, n, count(r.recompute_reproduces, "recompute_reproduces"),
                        count(r.hit_reproduces, "hit_reproduces"),
                        count(r.attributable_items or 0, "attributable_items"),
                        count(r.paths_differ or 0, "paths_differ"))
        mcnemar = r.mcnemar
        if r.correctness_skipped is None and r.flips is not None and isinstance(mcnemar, dict):
            row = BridgeRow(row.label, row.n, row.recompute, row.hit, row.attributable, row.differ,
                            count(r.flips, "flips"), count(mcnemar.get("b", 0), "mcnemar b"),
                            count(mcnemar.get("c", 0), "mcnemar c"), optional(mcnemar.get("p"), "mcnemar p"))
        found.append(row)
    return found


def _table_iii(rows: list[TableIIIRow]) -> list[RerunRow]:
    return [RerunRow(r.run, r.prompt_cache, r.order, _rate(r, "", "run-to-run")) for r in rows]


def _table_v(rows: list[TableVRow]) -> list[GridRow]:
    return [GridRow(f"{r.engine} {_label(r)}", r.prompt_cache, _rate(r, "path_", "path"),
                    _rate(r, "off_", "cache-off") if r.off_k is not None else None,
                    _rate(r, "on_", "cache-on") if r.on_k is not None else None) for r in rows]


def _shape(what: str, read: Callable[[], Any]) -> Any:
    """`read()`, or FindingsShape naming `what` (a table) and what is wrong in it (one line)."""
    try:
        return read()
    except FindingsShape as exc:
        raise FindingsShape(f"{what}: {exc}") from None
    except ValidationError as exc:  # a row that is not of its table's typed view
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "row"
        said = f"a row has no {key}" if first["type"] == "missing" else \
            f"{key} is {repr(first['input'])[:40]} ({first['msg'].lower()})"
        raise FindingsShape(f"{what}: {said}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        said = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise FindingsShape(f"{what}: {said}") from None


def from_findings(findings: Findings, source: str = "findings.json") -> Evidence:
    """The evidence of a findings.json (every table it has rows for, read through its typed row views, strictly:
    a value of another type is refused, never converted); FindingsShape naming the table when one is odd."""
    table = findings.table
    return Evidence(source,
                    iii=_shape("Table III", lambda: _table_iii(TableIIIRow.of(table("III"), strict=True))),
                    iv=_shape("Table IV", lambda: _table_iv(TableIVRow.of(table("IV"), strict=True))),
                    v=_shape("Table V", lambda: _table_v(TableVRow.of(table("V"), strict=True))),
                    v_trend=_shape("the grid trend", lambda: _grid_trends(findings)),
                    vi=_shape("Table VI", lambda: _table_vi(TableVIRow.of(table("VI"), strict=True))),
                    vi_trend=_shape("the sweep trend", lambda: _sweep_trend(findings)),
                    vii=_shape("Table VII", lambda: _table_vii(TableVIIRow.of(table("VII"), strict=True))))


def from_reset_table(table: Any, label: str, source: str = RESET_FILE) -> Evidence:
    """Table IV's evidence from a restored-state run's own results table (a run `kit analyze` has not read), read
    through the reset kind's model (kit.protocols.reset.results): FindingsShape naming the field when it is odd."""
    try:
        t = ResetResults.of(table, source)
    except NotResults as exc:
        raise FindingsShape(exc.message) from None
    sessions = [Session(s.session, s.items, s.recompute_reproduces, s.hit_reproduces, s.paths_differ, s.cache_caused)
                for s in t.ok_sessions()]
    return Evidence(source, iv=[_reset_row(label, sessions, t.across_sessions.to_json())] if sessions else [])


def from_run(findings: Any, results: list[Any], label: str) -> Evidence | None:
    """A run's evidence: its analysis/findings.json when it has one (every table), else its restored-state
    results table (Table IV); None when it has neither. FindingsShape when the file it reads is odd."""
    if isinstance(findings, dict):
        try:
            parsed = from_json(findings)
        except (ValueError, TypeError) as exc:  # kit.analysis.findings_model.NotFindings is a ValueError
            raise FindingsShape(f"{FINDINGS_FILE}: {exc}") from None
        return _shape(FINDINGS_FILE, lambda: from_findings(parsed, FINDINGS_FILE))
    tables = [t for t in results if isinstance(t, dict) and t.get("table") == RESET_TABLE]
    if not tables:
        return None
    evidence = Evidence(RESET_FILE)
    for table in tables:
        evidence.iv.extend(from_reset_table(table, label).iv)
    return evidence
