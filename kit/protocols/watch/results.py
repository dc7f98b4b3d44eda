"""The results of a watch run, from its records only: calls by cache state, endpoint and decoding, upstream
latency, the requests asked more than once and how many outputs each got in which state, and the alarms
recomputed with the proxy's own tracker (kit.record.alarms) in the order the calls were answered, with the
cap on remembered requests the proxy ran with (its manifest's `bounds.alarm_requests`; none before it had
one), held against the alarms the proxy recorded live.

results/watch.json holds the table; results/watch.csv one row per repeated request.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from kit.core.errors import KitError
from kit.core.paths import RunPaths
from kit.protocols.results_files import write_results
from kit.protocols.results_model import Count, JsonObject, Number, Part, Results, field_alias
from kit.record.files import RecordFile, read_records
from kit.record.manifest import Manifest
from kit.record.alarms import KINDS, Call, Tracker

ALARMS_LISTED = 200  # alarm calls listed in the table (all are counted)
FIELDS = ("request_sha256", "calls", "states", "distinct_outputs", "alarms")


class Repeated(Part):
    """A request asked more than once: its calls, its distinct outputs per cache state, the alarms it raised."""

    request_sha256: str
    calls: Count
    states: dict[str, Count]
    distinct_outputs: Count
    alarms: dict[str, Count]


class AlarmCall(Part):
    """A call that raised an alarm (the first ALARMS_LISTED of them)."""

    pass_: str = field_alias("pass")
    seq: Count
    alarms: list[str]
    state: str | None = None
    request_sha256: str
    output_sha256: str | None = None


class Latency(Part):
    p50: Number | None = None
    p99: Number | None = None


class AlarmStore(Part):
    """The cap on the requests the alarm tracker remembered, and how many it forgot."""

    cap: Count
    forgotten: Count


class WatchResults(Results):
    """results/watch.json (without `files`: earlier kits wrote none there; the manifest records them)."""

    upstream: str | None = None
    engine_kind: str | None = None
    calls: Count
    by_state: dict[str, Count]
    by_endpoint: dict[str, Count]
    by_decoding: dict[str, Count]
    by_source: dict[str, Count]
    failed: Count
    latency_ms: Latency
    requests: Count
    repeated: list[Repeated]
    alarms: dict[str, Count]
    alarm_calls: list[AlarmCall]
    recorded_alarms_agree: bool
    pinned: bool
    alarm_requests: AlarmStore | None = None  # absent in runs before the proxy had a cap


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


class WatchCall(NamedTuple):
    """A watch record as its results count it (read from the records file, `read`)."""

    pass_id: str
    seq: int
    request_sha256: str
    decoding: str | None  # as recorded (null: sampled)
    state: str | None  # the cache state that served it, null where unknown
    source: str  # what said that state, as its table's key (`None` where nothing did)
    endpoint: str  # as its table's key
    output_sha256: str | None
    alarms: tuple[str, ...]  # the alarms the proxy raised live
    wall_seconds: float | None


@dataclass
class _Asked:
    """One request's calls, its distinct outputs per cache state, and the alarms it raised."""

    calls: int = 0
    outputs: dict[str, set[str]] = field(default_factory=dict)
    alarms: Counter[str] = field(default_factory=Counter)


def compute(calls: list[WatchCall], pinned: bool, cap: int | None = None, *, run_id: str | None = None,
            upstream: str | None = None, engine_kind: str | None = None) -> WatchResults:
    """The table of a watch run's calls, in answer order (pass after pass, seq within); `cap`: the requests
    the alarm tracker remembers (the table then says how many it forgot)."""
    tracker = Tracker(pinned=pinned, cap=cap)
    by_state: Counter[str] = Counter()
    requests: dict[str, _Asked] = {}
    alarm_calls: list[AlarmCall] = []
    disagree = 0
    for call in calls:
        by_state[call.state or "unknown"] += 1
        raised = tracker.see(Call(call.request_sha256, call.decoding, call.state, call.output_sha256))
        disagree += sorted(raised) != sorted(call.alarms)
        entry = requests.setdefault(call.request_sha256, _Asked())
        entry.calls += 1
        if call.output_sha256:
            entry.outputs.setdefault(call.state or "unknown", set()).add(call.output_sha256)
        entry.alarms.update(raised)
        if raised and len(alarm_calls) < ALARMS_LISTED:
            alarm_calls.append(AlarmCall(pass_=call.pass_id, seq=call.seq, alarms=list(raised), state=call.state,
                                         request_sha256=call.request_sha256, output_sha256=call.output_sha256))
    repeated = [Repeated(request_sha256=digest, calls=e.calls, states={s: len(o) for s, o in sorted(e.outputs.items())},
                         distinct_outputs=len(set().union(*e.outputs.values())) if e.outputs else 0,
                         alarms=dict(e.alarms)) for digest, e in requests.items() if e.calls > 1]
    seconds = [c.wall_seconds for c in calls if c.wall_seconds is not None]
    table = WatchResults(
        table="watch", run_id=run_id, upstream=upstream, engine_kind=engine_kind,
        calls=len(calls), by_state=dict(by_state.most_common()),
        by_endpoint=dict(Counter(c.endpoint for c in calls).most_common()),
        by_decoding=dict(Counter(str(c.decoding or "sampled") for c in calls).most_common()),
        by_source=dict(Counter(c.source for c in calls).most_common()),
        failed=sum(1 for c in calls if c.output_sha256 is None),
        latency_ms=Latency(p50=_quantile(seconds, 0.5), p99=_quantile(seconds, 0.99)),
        requests=len(requests), repeated=repeated,
        alarms={kind: tracker.counts[kind] for kind in KINDS}, alarm_calls=alarm_calls,
        recorded_alarms_agree=disagree == 0, pinned=pinned,
    )
    if cap is not None:  # set only then: the table of a run before the proxy had a cap is as it was
        table.alarm_requests = AlarmStore(cap=cap, forgotten=tracker.forgotten)
    return table


def _calls(file: RecordFile) -> list[WatchCall]:
    """The calls of a records file, each read by the fields its results count."""
    calls = []
    for record in file.records:
        state = record.get("state") or {}
        seconds = record.get("wall_seconds")
        calls.append(WatchCall(record["pass_id"], record["seq"], record["request_sha256"], record.get("decoding"),
                               state.get("state"), str(state.get("source")), str(record.get("endpoint")),
                               record.get("output_sha256"), tuple(record.get("alarms") or ()),
                               seconds if isinstance(seconds, (int, float)) else None))
    return calls


def read(run_dir: Path) -> tuple[list[WatchCall], bool, int | None]:
    """(the calls of every OK pass in pass order, whether the proxy watched a pinned instance, the cap on
    the requests its alarm tracker remembered)."""
    manifest = Manifest.load(run_dir).run
    calls: list[WatchCall] = []
    for pass_id in sorted(manifest.passes):
        info = manifest.passes[pass_id]
        if info.status == "OK" and info.file:
            calls.extend(_calls(read_records(run_dir / info.file, logprobs=False)))
    resolved = manifest.protocol.resolved
    bounds = resolved.get("bounds")
    cap = bounds.get("alarm_requests") if isinstance(bounds, dict) else None
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise KitError(f"{run_dir}: the manifest's protocol.resolved.bounds.alarm_requests is not a positive "
                       "whole number", "this run folder was changed after `kit watch` wrote it")
    return calls, bool(resolved.get("pinned")), cap


def watch_results(run_dir: Path) -> WatchResults:
    """The watch table, from the run folder only (what `results` writes; `kit analyze` reads it too)."""
    manifest = Manifest.load(run_dir).run
    resolved = manifest.protocol.resolved
    return compute(*read(run_dir), run_id=manifest.run_id, upstream=resolved.get("upstream"),
                   engine_kind=resolved.get("engine_kind"))


def watch_table(run_dir: Path) -> JsonObject:
    """The watch table's JSON values (`kit analyze` keeps them in findings.json)."""
    return watch_results(run_dir).to_json()


RESULTS = RunPaths.result_name("watch")
FILES = {"watch": RESULTS, "watch_csv": RunPaths.result_name("watch", ".csv")}


def results(run_dir: Path) -> WatchResults:
    """Compute the watch table from the run folder and write results/watch.json and .csv; the table with the
    results files in its `files`, as every kind's (the run's manifest records them). results/watch.json is the
    table as every earlier kit wrote it, without `files`, so that their bundles' results still compare equal
    to the ones `kit verify` recomputes."""
    table = watch_results(run_dir)
    write_results(run_dir, table, "watch", "watch", FIELDS, [r.to_json() for r in table.repeated])
    return table.model_copy(update={"files": FILES})
