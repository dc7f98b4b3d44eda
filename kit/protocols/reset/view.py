"""The restored-state control's results as the console and the launcher show them (Table IV layout)."""

from __future__ import annotations

from pathlib import Path
from rich.table import Table
from rich.text import Text

from kit.protocols.kind import PlotRow
from kit.core.layout import DASH, Layout
from kit.protocols.headline import Headline, rate
from kit.protocols.reset.results import ResetResults, Session


def reset_table(t: ResetResults) -> Table:
    """The restored-state table in the paper's Table IV layout (counts per session)."""
    view = Table(title="Restored-state control (counts of items per session)", title_justify="left")
    for column in ("session", "status", "items", "recompute reproduces", "cache hit reproduces", "paths differ",
                   "cache-caused"):
        view.add_column(column, justify="right" if column not in ("session", "status") else "left")
    answers = []
    for row in t.sessions:
        if row.ok:
            view.add_row(row.session, "OK", *map(str, _counts(row)))
            if row.outcomes:
                o = row.outcomes
                answers.append(f"{row.session}: correct recompute {o.recompute_correct}/{o.items}, "
                               f"cache hit {o.hit_correct}/{o.items}; flips {o.recompute_right_hit_wrong} "
                               f"right→wrong, {o.recompute_wrong_hit_right} wrong→right "
                               f"(exact McNemar p={o.mcnemar.p:.3g})")
        else:
            view.add_row(row.session, Text(str(row.status), style="red"), "—", "—", "—", "—", "—")
    across = t.across_sessions
    view.caption = across_line(t) or f"across sessions: {across.note}"
    view.caption = "\n".join([view.caption, *answers])
    view.caption_justify = "left"
    return view


def _counts(s: Session) -> list[int | None]:
    return [s.items, s.recompute_reproduces, s.hit_reproduces, s.paths_differ, s.cache_caused]


def across_line(t: ResetResults) -> str | None:
    """The items the same in all OK sessions on each path; None where they were not counted."""
    a = t.across_sessions
    if a.items is None:
        return None
    return (f"same in all {a.sessions} OK sessions: recompute {a.recompute_same_in_all}/{a.items}, "
            f"cache hit {a.hit_same_in_all}/{a.items}")


def cut_answers_note(run_dir: Path, table: ResetResults | None) -> str | None:
    """Under a restored-state table whose answers were cut short: why its correct counts read low (e.g. the
    demo's 64 tokens end most answers before their '####' line). None when no scored answer was cut."""
    if table is None or not any(row.outcomes for row in table.sessions):
        return None
    from kit.protocols.reset.results import cut_answers  # noqa: PLC0415

    max_tokens, sessions = cut_answers(run_dir)
    counts = [f"{cut} of {scored} in {session}" for session, (scored, cut) in sessions.items() if cut]
    if not counts:
        return None
    most = any(2 * cut > scored for scored, cut in sessions.values())
    return "\n".join([
        f"correctness: answers cut at {max_tokens} tokens before any final answer ('#### n') count as wrong: "
        f"{', '.join(counts)} (recompute and cache-hit answers scored);",
        "so the correct counts above do not measure the model's accuracy, and their flips say little about the cache;"
        if most else "so the correct counts above read low by up to that many;",
        f"the divergence counts do not depend on it; more tokens (e.g. --max-tokens {4 * (max_tokens or 64)}) give "
        "the answers room"])


def plot_rows(table: ResetResults) -> list[PlotRow]:
    """Per OK session: how many items' paths differ, with its 95% interval (the launcher's divergence plot)."""
    from kit.stats import rate_interval  # noqa: PLC0415 - loads scipy: only when plotting

    rows = []
    for row in table.ok_sessions():
        if row.items:
            interval = rate_interval(row.paths_differ, row.items)
            rows.append((f"{row.session} paths differ", row.paths_differ, row.items, interval.lo, interval.hi))
    return rows


def headline(t: ResetResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    ok = t.ok_sessions()
    layout = Layout("restored-state control", "Per session: items whose tokens each path reproduces, and items "
                    "whose cache-hit path differs from the recompute path.",
                    ["session", "status", "items", "recompute reproduces", "cache hit reproduces", "paths differ",
                     "cache-caused"])
    for s in t.sessions:
        layout.rows.append([s.session, str(s.status)] + ([str(n) for n in _counts(s)] if s.ok else [DASH] * 5))
    h.tables.append(layout)
    if not ok:
        h.verdict.append("no OK session: nothing to judge")
        return
    if len(ok) > 1:  # one line naming every session first: the report's headline row shows the first line
        h.verdict.append(f"{len(ok)} sessions: the cache-hit path differs from the recompute path in "
                         + ", ".join(f"{s.session} {s.paths_differ}/{s.items}" for s in ok)
                         + " items; attributable to the cache: "
                         + ", ".join(f"{s.session} {s.cache_caused}" for s in ok))
    for s in ok:
        h.verdict.append(f"session {s.session}: the cache-hit path differs from the recompute path in "
                         + rate(s.paths_differ, s.items, unit="items")
                         + f"; {s.cache_caused} attributable to the cache")
    h.held = all(s.reproduces for s in ok)
    h.controls.append("each path reproduces itself: " + "; ".join(
        f"{s.session} recompute {s.recompute_reproduces}/{s.items}, cache hit {s.hit_reproduces}/{s.items}"
        for s in ok))
    across = across_line(t)
    if across:
        h.controls.append(across)
