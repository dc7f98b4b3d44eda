"""A watch run as the console and the launcher show it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from kit.core.layout import Layout
from kit.protocols.headline import Headline
from kit.protocols.watch.results import WatchResults

REPEATED_SHOWN = 20


def watch_table(t: WatchResults) -> Group:
    """Calls by state, the repeated requests with their outputs per state, and the alarms."""
    states = Table(title=f"Watched calls ({t.calls}) of {t.upstream or 'the upstream'}", title_justify="left")
    for column in ("cache state", "calls"):
        states.add_column(column)
    for state, n in t.by_state.items():
        states.add_row(state, str(n))
    repeated = Table(title=f"Requests asked more than once ({len(t.repeated)})", title_justify="left")
    for column in ("request", "calls", "outputs per state", "distinct outputs", "alarms"):
        repeated.add_column(column)
    for row in t.repeated[:REPEATED_SHOWN]:
        repeated.add_row(row.request_sha256[:12], str(row.calls), ", ".join(f"{s} {n}" for s, n in row.states.items()),
                         str(row.distinct_outputs), ", ".join(f"{k} {n}" for k, n in row.alarms.items()) or "—")
    alarms = ", ".join(f"{kind} {n}" for kind, n in t.alarms.items() if n) or "none"
    lines = [f"alarms: {alarms}" + ("" if t.recorded_alarms_agree else
                                    " (the records' live alarms DIFFER from these, recomputed)"),
             f"upstream latency p50 {t.latency_ms.p50} ms, p99 {t.latency_ms.p99} ms; failed calls {t.failed}"]
    store = t.alarm_requests
    if store is not None and store.forgotten:
        lines.append(f"the alarms remembered at most {store.cap} requests: {store.forgotten} forgotten, "
                     "their later calls compared with nothing earlier (kit watch --alarm-requests)")
    return Group(states, repeated, *lines)


def headline(t: WatchResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    alarms = {kind: n for kind, n in t.alarms.items() if n}
    h.verdict.append(f"{t.calls} watched calls; alarms: "
                     + (", ".join(f"{kind} {n}" for kind, n in alarms.items()) if alarms else "none"))
    h.held = t.recorded_alarms_agree
    h.controls.append("the proxy's live alarms " + ("equal" if h.held else "DIFFER from") + " those recomputed")
    h.tables.append(Layout("watch", "Watched calls by cache state.", ["cache state", "calls"],
                           [[state, str(n)] for state, n in t.by_state.items()]))
