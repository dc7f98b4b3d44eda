"""What a reviewer reads first about a run, as plain strings: its headline verdict (what diverged, how often,
with its interval), whether its controls held, and its main table. Each kind reads its own results table into
a `Headline` (`Kind.headline`, in its view.py); the bundle's report, README and `kit show` render them
(kit.bundle.headline). The parts several kinds share are here."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.core.layout import DASH, Layout, ci, pct
from kit.protocols.results_model import Comparison, Interval, JsonObject

FEW = 10  # below this many observations a rate is flagged as resting on few observations


@dataclass(frozen=True)
class Figure:
    """An image a kind draws from its results table for the bundle's report (embedded as a data: image):
    its name, a caption, its media type and its bytes."""

    name: str
    caption: str
    media: str
    data: bytes


@dataclass
class Headline:
    """One run's verdict lines, control lines (held: True, False, or None when it has none or they were
    not judged), its main results table(s) and any figure drawn from them."""

    run_id: str
    kind: str
    status: str
    verdict: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    held: bool | None = None
    tables: list[Layout] = field(default_factory=list)
    qualitative: list[str] = field(default_factory=list)  # the paper's claims on this run: a summary, then each
    figures: list[Figure] = field(default_factory=list)  # drawn by the kind from its table: the report shows them


def few(n: object) -> str:
    """A warning appended to a rate that rests on fewer than FEW observations."""
    return f" (n={n} only: little evidence)" if isinstance(n, int) and n < FEW else ""


def rate(k: int, n: int, interval: Interval | JsonObject | None = None, unit: str = "episodes") -> str:
    """`k/n unit (r%, 95% CI [lo, hi])`; the Wilson interval is computed when the results give none."""
    if not n:
        return f"0/0 {unit} (no observation)"
    given = Interval.of(interval) if interval is not None else None
    if given is not None and given.lo is not None:
        lo, hi, method = given.lo, given.hi, given.method
    else:
        from kit.stats.intervals import wilson_interval  # noqa: PLC0415 - kit.stats is heavy to import

        (lo, hi), method = wilson_interval(k, n), "wilson"
    label = f"95% CI{' (' + method + ')' if method else ''}"
    return f"{k}/{n} {unit} ({pct(k / n)}%, {label} {ci(lo, hi)}){few(n)}"


def comparison_line(comparison: Comparison | JsonObject) -> str:
    """One comparison of two passes (grid kinds) as a rate with its interval, or why it was not compared."""
    c = Comparison.of(comparison)
    if not c.compared:
        return f"not compared: {c.skipped}"
    return rate(c.diverged, c.episodes, c.interval)


def comparison_row(name: str, comparison: Comparison | JsonObject) -> list[str]:
    """One comparison of two passes as a row under COMPARISON_HEADER."""
    c = Comparison.of(comparison)
    if not c.compared:
        return [name, " vs ".join(c.passes) or DASH, DASH, DASH, DASH, str(c.skipped)]
    interval = c.interval or Interval()
    n = c.episodes
    return [name, " vs ".join(c.passes), f"{c.diverged}/{n}", pct(c.diverged / n) if n else DASH,
            ci(interval.lo, interval.hi), few(n).strip()]


def rate_cells(comparison: Comparison | JsonObject) -> tuple[str, str, str]:
    """A comparison's diverged/episodes, rate and Wilson interval as the console's table cells."""
    c = Comparison.of(comparison)
    if not c.compared:
        return "—", "—", str(c.skipped)
    interval = c.interval
    if interval is None or interval.rate is None or interval.lo is None or interval.hi is None:
        return "0/0", "—", ""
    return (f"{c.diverged}/{c.episodes}", f"{100 * interval.rate:.1f}%",
            f"[{100 * interval.lo:.1f}, {100 * interval.hi:.1f}]")


COMPARISON_HEADER = ["comparison", "passes", "diverged", "rate (%)", "95% CI", "note"]
