"""What a reviewer reads first about a run, as plain strings: its headline verdict (what diverged, how often,
with its interval), whether its controls held, and its main table. Each kind reads its own results table into
a `Headline` (`Kind.headline`, in its view.py); the bundle's report, README and `kit show` render them
(kit.bundle.headline). The parts several kinds share are here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.core.layout import DASH, Layout, ci, pct

FEW = 10  # below this many observations a rate is flagged as resting on few observations


@dataclass
class Headline:
    """One run's verdict lines, control lines (held: True, False, or None when it has none or they were
    not judged) and its main results table(s)."""

    run_id: str
    kind: str
    status: str
    verdict: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    held: bool | None = None
    tables: list[Layout] = field(default_factory=list)
    qualitative: list[str] = field(default_factory=list)  # the paper's claims on this run: a summary, then each


def few(n: Any) -> str:
    """A warning appended to a rate that rests on fewer than FEW observations."""
    return f" (n={n} only: little evidence)" if isinstance(n, int) and n < FEW else ""


def rate(k: int, n: int, interval: dict[str, Any] | None = None, unit: str = "episodes") -> str:
    """`k/n unit (r%, 95% CI [lo, hi])`; the Wilson interval is computed when the results give none."""
    if not n:
        return f"0/0 {unit} (no observation)"
    if interval and interval.get("lo") is not None:
        lo, hi, method = interval["lo"], interval["hi"], interval.get("method")
    else:
        from kit.stats.intervals import wilson_interval  # noqa: PLC0415 - kit.stats is heavy to import

        (lo, hi), method = wilson_interval(k, n), "wilson"
    label = f"95% CI{' (' + method + ')' if method else ''}"
    return f"{k}/{n} {unit} ({pct(k / n)}%, {label} {ci(lo, hi)}){few(n)}"


def comparison_line(c: dict[str, Any]) -> str:
    """One comparison of two passes (grid kinds) as a rate with its interval, or why it was not compared."""
    if "skipped" in c:
        return f"not compared: {c['skipped']}"
    return rate(int(c["diverged"]), int(c["episodes"]), c.get("interval"))


def comparison_row(name: str, c: dict[str, Any]) -> list[str]:
    """One comparison of two passes as a row under COMPARISON_HEADER."""
    if "skipped" in c:
        return [name, " vs ".join(c.get("passes") or []) or DASH, DASH, DASH, DASH, str(c["skipped"])]
    interval = c.get("interval") or {}
    n = int(c["episodes"])
    return [name, " vs ".join(c.get("passes") or []), f"{c['diverged']}/{n}",
            pct(c["diverged"] / n) if n else DASH, ci(interval.get("lo"), interval.get("hi")), few(n).strip()]


COMPARISON_HEADER = ["comparison", "passes", "diverged", "rate (%)", "95% CI", "note"]
