"""The rules that decide the paper's qualitative claims (kit/compare/claims.yaml names one per claim) from a
run's evidence (kit.compare.evidence).

Each rule reads only the measures of its table and returns a `Judgement`: holds, does not hold, inconclusive
(an interval rule whose interval holds the null value) or not measured (the run lacks the measures: the
reason says which), with the counts that decided it on one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kit.compare.evidence import Evidence, Rate, ResetRow, Trend

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "does not hold", "inconclusive", "not measured"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED)
ALPHA = 0.05
DEFAULT, DISABLED = "default", "disabled"
ADJACENT, BETWEEN = "adjacent", "cache-off pass in between"


@dataclass(frozen=True)
class Judgement:
    """A claim's verdict on this run and the counts that decided it (or why it is not measured)."""

    verdict: str
    counts: str


def _decided(ok: bool, counts: str) -> Judgement:
    return Judgement(HOLDS if ok else FAILS, counts)


def _missing(why: str) -> Judgement:
    return Judgement(NOT_MEASURED, why)


def _sessions(row: ResetRow, text: Callable[[Any], str]) -> str:
    return ", ".join(f"{s.name} {text(s)}" for s in row.sessions)


def _wilson(k: int, n: int) -> str:
    from kit.stats import rate_interval  # noqa: PLC0415 - loads scipy: only when judging

    found = rate_interval(k, n)
    return f"[{100 * found.lo:.1f}, {100 * found.hi:.1f}]%"


# ---- Table III ------------------------------------------------------------------------------------------

def _by_setting(ev: Evidence) -> dict[tuple[str, str], list[Rate]]:
    found: dict[tuple[str, str], list[Rate]] = {}
    for row in ev.iii:
        found.setdefault((row.prompt_cache, row.order), []).append(row.rerun)
    return found


def _pooled(rates: list[Rate]) -> Rate:
    return Rate(sum(r.k for r in rates), sum(r.n for r in rates))


def prompt_cache_raises_reruns(ev: Evidence) -> Judgement:
    cells = _by_setting(ev)
    orders = [o for o in (ADJACENT, BETWEEN) if (DEFAULT, o) in cells and (DISABLED, o) in cells]
    if not orders:
        return _missing("needs Table III rows with the prompt cache both at its default and disabled, in one order")
    pairs = {o: (_pooled(cells[(DEFAULT, o)]), _pooled(cells[(DISABLED, o)])) for o in orders}
    counts = "; ".join(f"{o}: default {d.text()} vs disabled {x.text()}" for o, (d, x) in pairs.items())
    return _decided(all(d.value > x.value for d, x in pairs.values()), counts)


def _order_pair(ev: Evidence, setting: str) -> tuple[Rate, Rate] | None:
    cells = _by_setting(ev)
    if (setting, ADJACENT) not in cells or (setting, BETWEEN) not in cells:
        return None
    return _pooled(cells[(setting, ADJACENT)]), _pooled(cells[(setting, BETWEEN)])


def order_inert_when_disabled(ev: Evidence) -> Judgement:
    pair = _order_pair(ev, DISABLED)
    if pair is None:
        return _missing("needs Table III rows with the prompt cache disabled in both pass orders")
    adjacent, between = pair
    return _decided(adjacent.k == between.k and adjacent.n == between.n,
                    f"adjacent {adjacent.text()} vs in between {between.text()}")


def order_matters_at_default(ev: Evidence) -> Judgement:
    pair = _order_pair(ev, DEFAULT)
    if pair is None:
        return _missing("needs Table III rows with the prompt cache at its default in both pass orders")
    adjacent, between = pair
    return _decided(between.value > adjacent.value, f"in between {between.text()} vs adjacent {adjacent.text()}")


# ---- Table IV -------------------------------------------------------------------------------------------

def _no_reset(ev: Evidence) -> Judgement | None:
    return None if ev.iv else _missing("needs a restored-state (reset) run with an OK session")


def each_path_reproduces(ev: Evidence) -> Judgement:
    if (missing := _no_reset(ev)) is not None:
        return missing
    ok = all(s.recompute == s.items and s.hit == s.items for row in ev.iv for s in row.sessions)
    counts = "; ".join(f"{row.label}: recompute " + _sessions(row, lambda s: f"{s.recompute}/{s.items}")
                       + ", cache hit " + _sessions(row, lambda s: f"{s.hit}/{s.items}") for row in ev.iv)
    return _decided(ok, counts)


def paths_differ(ev: Evidence) -> Judgement:
    if (missing := _no_reset(ev)) is not None:
        return missing
    ok = all(sum(s.differ for s in row.sessions) >= 1 for row in ev.iv)
    counts = "; ".join(f"{row.label}: paths differ on " + _sessions(
        row, lambda s: f"{s.differ}/{s.items} {_wilson(s.differ, s.items)}" if s.items else "0/0") for row in ev.iv)
    return _decided(ok, counts)


def _cache_caused(row: ResetRow) -> list[int] | None:
    """Per session, the differing items on which each path reproduced; None where the findings do not say and
    the counts cannot tell (some item did not reproduce)."""
    found = []
    for s in row.sessions:
        if s.cache_caused is not None:
            found.append(s.cache_caused)
        elif s.recompute == s.items and s.hit == s.items:
            found.append(s.differ)  # every item reproduced: every difference is attributable
        else:
            return None
    return found


def difference_is_cache_state(ev: Evidence) -> Judgement:
    if (missing := _no_reset(ev)) is not None:
        return missing
    if not any(s.differ for row in ev.iv for s in row.sessions):
        return _missing("the paths differ on no item: there is no difference to attribute")
    caused = {row.label: _cache_caused(row) for row in ev.iv}
    unknown = [label for label, c in caused.items() if c is None]
    if unknown:
        return _missing(f"{', '.join(unknown)}: findings.json of an earlier kit gives no cache-attributable count "
                        "and an item did not reproduce (run `kit analyze` again)")
    ok = all(sum(c or []) >= 1 and all(k == s.differ for k, s in zip(c or [], row.sessions))
             for row, c in zip(ev.iv, caused.values()))
    counts = "; ".join(f"{row.label}: cache-attributable " + ", ".join(
        f"{s.name} {k} of {s.differ} differing" for k, s in zip(c or [], row.sessions))
        for row, c in zip(ev.iv, caused.values()))
    return _decided(ok, counts)


def same_in_every_session(ev: Evidence) -> Judgement:
    rows = [row for row in ev.iv if row.across_items]
    if not rows:
        return _missing("needs a restored-state run with two or more OK sessions serving the same items")
    ok = all(row.recompute_same == row.across_items and row.hit_same == row.across_items for row in rows)
    counts = "; ".join(f"{row.label}: same in all {len(row.sessions)} sessions: recompute {row.recompute_same}/"
                       f"{row.across_items}, cache hit {row.hit_same}/{row.across_items}" for row in rows)
    return _decided(ok, counts)


# ---- Table V --------------------------------------------------------------------------------------------

def cache_off_reruns_zero(ev: Evidence) -> Judgement:
    rows = [(row.label, row.off) for row in ev.v if row.off is not None]
    if not rows:
        return _missing("needs a grid run with two cache-off passes")
    return _decided(all(off.k == 0 for _, off in rows), "; ".join(f"{label}: {off.text()}" for label, off in rows))


def path_divergence_positive(ev: Evidence) -> Judgement:
    if not ev.v:
        return _missing("needs a grid run (cache-on and cache-off passes)")
    return _decided(all(row.path.k >= 1 for row in ev.v), "; ".join(f"{row.label}: {row.path.text()}" for row in ev.v))


def cache_on_reruns_positive(ev: Evidence) -> Judgement:
    rows = [(row.label, row.on) for row in ev.v if row.on is not None and row.prompt_cache == DEFAULT]
    if not rows:
        return _missing("needs a llama.cpp grid run with two cache-on passes and the prompt cache at its default")
    return _decided(all(on.k >= 1 for _, on in rows), "; ".join(f"{label}: {on.text()}" for label, on in rows))


def above(estimate: float, lo: float | None, hi: float | None, null: float) -> str:
    """An interval rule: holds when the 95% interval lies above the null value; does not hold when the estimate
    is at or below it (or the whole interval below it); inconclusive otherwise (the interval holds it)."""
    if estimate <= null or (hi is not None and hi < null):
        return FAILS
    return HOLDS if lo is not None and lo > null else INCONCLUSIVE


def _worst(verdicts: list[str], counts: str) -> Judgement:
    """One verdict over several rows: does not hold if any row does not, else inconclusive if any is."""
    return Judgement(FAILS if FAILS in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else HOLDS, counts)


def _trends(trends: list[Trend], what: str) -> Judgement:
    if not trends:
        return _missing(f"needs {what} over two or more formats with a finite fit")
    return _worst([above(t.estimate, t.lo, t.hi, t.null) for t in trends], "; ".join(
        f"{t.label}: {t.what} {t.estimate:.2f} [{'-inf' if t.lo is None else f'{t.lo:.2f}'}, "
        f"{'inf' if t.hi is None else f'{t.hi:.2f}'}]" for t in trends))


def grid_trend_rises(ev: Evidence) -> Judgement:
    return _trends(ev.v_trend, "grid runs of one model")


# ---- Table VI -------------------------------------------------------------------------------------------

def formats_above_reference(ev: Evidence) -> Judgement:
    if not ev.vi:
        return _missing("needs a sweep of two or more formats")
    return _worst([above(d.diff, d.lo, d.hi, 0.0) for d in ev.vi], "; ".join(
        f"{d.format} vs {d.reference}: {d.diff:+.1f} [{d.lo:+.1f}, {d.hi:+.1f}] points, above in "
        f"{d.above}/{d.histories} histories" for d in ev.vi))


def sweep_trend_rises(ev: Evidence) -> Judgement:
    return _trends(ev.vi_trend, "a sweep")


# ---- Table VII ------------------------------------------------------------------------------------------

def bridge_paths_deterministic(ev: Evidence) -> Judgement:
    if not ev.vii:
        return _missing("needs a bridge (reset) run with an OK session")
    return _decided(all(r.recompute == r.n and r.hit == r.n for r in ev.vii), "; ".join(
        f"{r.label}: recompute {r.recompute}/{r.n}, cache hit {r.hit}/{r.n}" for r in ev.vii))


def bridge_paths_differ(ev: Evidence) -> Judgement:
    if not ev.vii:
        return _missing("needs a bridge (reset) run with an OK session")
    return _decided(all(r.differ >= 1 for r in ev.vii), "; ".join(
        f"{r.label}: {r.differ}/{r.attributable} attributable items"
        + (f" {_wilson(r.differ, r.attributable)}" if r.attributable else "") for r in ev.vii))


def flips_without_bias(ev: Evidence) -> Judgement:
    scored = [r for r in ev.vii if r.flips is not None]
    if not scored:
        return _missing("needs a bridge run with correctness (GSM8K or arithmetic answers scored)")
    flipped = [r for r in scored if r.flips and r.p is not None]
    if not flipped:
        return _missing("no correctness flip in this run ("
                        + "; ".join(f"{r.label}: 0 flips" for r in scored) + "): no direction to test")
    counts = "; ".join(f"{r.label}: {r.flips} flips ({r.b} recompute right, {r.c} cache hit right), exact McNemar "
                       f"p={r.p:.3g}" for r in flipped)
    return _decided(all((r.p or 0.0) >= ALPHA for r in flipped), counts)


RULES: dict[str, tuple[str, Callable[[Evidence], Judgement]]] = {
    "prompt_cache_raises_reruns": ("III", prompt_cache_raises_reruns),
    "order_inert_when_disabled": ("III", order_inert_when_disabled),
    "order_matters_at_default": ("III", order_matters_at_default),
    "each_path_reproduces": ("IV", each_path_reproduces),
    "paths_differ": ("IV", paths_differ),
    "difference_is_cache_state": ("IV", difference_is_cache_state),
    "same_in_every_session": ("IV", same_in_every_session),
    "cache_off_reruns_zero": ("V", cache_off_reruns_zero),
    "path_divergence_positive": ("V", path_divergence_positive),
    "cache_on_reruns_positive": ("V", cache_on_reruns_positive),
    "grid_trend_rises": ("V", grid_trend_rises),
    "formats_above_reference": ("VI", formats_above_reference),
    "sweep_trend_rises": ("VI", sweep_trend_rises),
    "bridge_paths_deterministic": ("VII", bridge_paths_deterministic),
    "bridge_paths_differ": ("VII", bridge_paths_differ),
    "flips_without_bias": ("VII", flips_without_bias),
}
