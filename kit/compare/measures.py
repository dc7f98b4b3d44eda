"""The quantities `kit compare` knows, per table, and the shapes both sides are read into.

A published value (kit/compare/paper.yaml) names one of these quantities; the run's findings.json is
read into the same quantities (kit.compare.run_rows), so the two sides meet on a key, never on a
column position. Rates, differences and slopes are held in percent (points), as the paper prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

Kind = Literal["rate", "difference", "slope", "odds_ratio", "p_value"]
Section = tuple[str, str]  # (table, part): part "rows" for a table's rows, "trend" for its trend over formats

ROWS: Final = "rows"
TREND: Final = "trend"
SCALE_KEYS = ("episodes", "items", "histories", "sessions")
CONDITION_NAMES = {"prompt_cache": "prompt cache", "order": "pass order", "workload": "workload",
                   "reference": "difference from"}


@dataclass(frozen=True)
class Measure:
    """One quantity of a table: what it is called and which rule compares it."""

    label: str
    kind: Kind


MEASURES: dict[Section, dict[str, Measure]] = {
    ("III", ROWS): {"on_r2r": Measure("run-to-run divergence, cache on", "rate")},
    ("IV", ROWS): {
        "recompute_reproduces": Measure("recompute path reproduces (per session)", "rate"),
        "hit_reproduces": Measure("cache-hit path reproduces (per session)", "rate"),
        "paths_differ": Measure("paths differ (per session)", "rate"),
        "recompute_same_in_all": Measure("recompute path same in all sessions", "rate"),
        "hit_same_in_all": Measure("cache-hit path same in all sessions", "rate"),
    },
    ("V", ROWS): {
        "off_r2r": Measure("run-to-run divergence, cache off", "rate"),
        "on_r2r": Measure("run-to-run divergence, cache on", "rate"),
        "path": Measure("path divergence", "rate"),
    },
    ("V", TREND): {
        "glmm_odds_ratio": Measure("random-intercept odds ratio per format step", "odds_ratio"),
        "clogit_odds_ratio": Measure("conditional-logit odds ratio per format step", "odds_ratio"),
        "permutation_p": Measure("exact within-episode permutation test p", "p_value"),
        "rate_slope": Measure("rate slope, points per format step", "slope"),
    },
    ("VI", ROWS): {
        "canonical": Measure("canonical history path divergence", "rate"),
        "mean": Measure("mean path divergence over random histories", "rate"),
        "diff": Measure("paired difference from F16, points", "difference"),
    },
    ("VI", TREND): {
        "glmm_odds_ratio": Measure("history-averaged random-intercept odds ratio per format step", "odds_ratio"),
        "rate_slope": Measure("rate slope, points per format step", "slope"),
        "permutation_p": Measure("exact within-episode permutation test p", "p_value"),
    },
    ("VII", ROWS): {
        "recompute_reproduces": Measure("recompute path reproduces", "rate"),
        "hit_reproduces": Measure("cache-hit path reproduces", "rate"),
        "path_divergence": Measure("cache-attributable path divergence", "rate"),
        "flips": Measure("correctness flips", "rate"),
        "correct_recompute": Measure("correct on the recompute path", "rate"),
        "correct_hit": Measure("correct on the cache-hit path", "rate"),
        "mcnemar_p": Measure("exact McNemar p", "p_value"),
    },
}
TABLES = ("III", "IV", "V", "VI", "VII")


def section_name(section: Section) -> str:
    table, part = section
    return f"Table {table}" + (" (trend)" if part == TREND else "")


@dataclass(frozen=True)
class Measured:
    """This run's value of one quantity: point value, 95% interval (None where it has none), the
    counts behind a rate, how the interval was made, and for per-session counts each session's own."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    k: int | None = None
    n: int | None = None
    method: str = ""
    alternative: str | None = None
    sessions: tuple[Measured, ...] = ()


@dataclass
class RunRow:
    """One row of this run's findings, in the terms the published rows use."""

    section: Section
    run: str
    label: str  # the row within its table, without the model (a format, a setting)
    model: str
    format: str
    engine: str | None  # None: findings.json does not say
    scale: dict[str, int] = field(default_factory=dict)
    conditions: dict[str, str | None] = field(default_factory=dict)  # None: not recorded
    measures: dict[str, Measured] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # quantity -> why this run has no value
    scale_overrides: dict[str, dict[str, int]] = field(default_factory=dict)  # quantity -> its own n
    notes: list[str] = field(default_factory=list)
