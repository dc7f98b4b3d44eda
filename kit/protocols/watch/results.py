"""The results of a watch run, from its records only: calls by cache state, endpoint and decoding, upstream
latency, the requests asked more than once and how many outputs each got in which state, and the alarms
recomputed with the proxy's own tracker (kit.record.alarms) in the order the calls were answered, with the
cap on remembered requests the proxy ran with (its manifest's `bounds.alarm_requests`; none before it had
one), held against the alarms the proxy recorded live.

results/watch.json holds the table; results/watch.csv one row per repeated request.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kit.core.errors import KitError
from kit.core.paths import RunPaths
from kit.protocols.results_files import write_results
from kit.protocols.results_model import Count, JsonObject, Number, Part, Results, field_alias
from kit.record.files import read_records
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


def compute(records: list[dict[str, Any]], pinned: bool, cap: int | None = None) -> JsonObject:
    """The table of a watch run's records, in answer order (pass after pass, seq within); `cap`: the requests
    the alarm tracker remembers (the table then says how many it forgot)."""
    tracker = Tracker(pinned=pinned, cap=cap)
    by_state: Counter[str] = Counter()
    requests: dict[str, dict[str, Any]] = {}
    alarm_calls: list[AlarmCall] = []
    disagree = 0
    for record in records:
        state = (record.get("state") or {}).get("state")
        by_state[state or "unknown"] += 1
        raised = tracker.see(Call(record["request_sha256"], record.get("decoding"), state, record.get("output_sha256")))
        disagree += sorted(raised) != sorted(record.get("alarms") or [])
        entry = requests.setdefault(record["request_sha256"], {"calls": 0, "outputs": {}, "alarms": Counter()})
        entry["calls"] += 1
        if record.get("output_sha256"):
            entry["outputs"].setdefault(state or "unknown", set()).add(record["output_sha256"])
        entry["alarms"].update(raised)
        if raised and len(alarm_calls) < ALARMS_LISTED:
            alarm_calls.append(AlarmCall(pass_=record["pass_id"], seq=record["seq"], alarms=list(raised), state=state,
                                         request_sha256=record["request_sha256"],
                                         output_sha256=record.get("output_sha256")))
    repeated = [Repeated(request_sha256=digest, calls=e["calls"],
                         states={s: len(o) for s, o in sorted(e["outputs"].items())},
                         distinct_outputs=len(set().union(*e["outputs"].values())) if e["outputs"] else 0,
                         alarms=dict(e["alarms"])) for digest, e in requests.items() if e["calls"] > 1]
    seconds = [r["wall_seconds"] for r in records if isinstance(r.get("wall_seconds"), (int, float))]
    forgotten = {} if cap is None else {"alarm_requests": AlarmStore(cap=cap, forgotten=tracker.forgotten)}
    return {
        "calls": len(records), "by_state": dict(by_state.most_common()),
        "by_endpoint": dict(Counter(str(r.get("endpoint")) for r in records).most_common()),
        "by_decoding": dict(Counter(str(r.get("decoding") or "sampled") for r in records).most_common()),
        "by_source": dict(Counter(str((r.get("state") or {}).get("source")) for r in records).most_common()),
        "failed": sum(1 for r in records if r.get("output_sha256") is None),
        "latency_ms": Latency(p50=_quantile(seconds, 0.5), p99=_quantile(seconds, 0.99)),
        "requests": len(requests), "repeated": repeated,
        "alarms": {kind: tracker.counts[kind] for kind in KINDS}, "alarm_calls": alarm_calls,
        "recorded_alarms_agree": disagree == 0, "pinned": pinned, **forgotten,
    }


def read(run_dir: Path) -> tuple[list[dict[str, Any]], bool, int | None]:
    """(the records of every OK pass in pass order, whether the proxy watched a pinned instance, the cap on
    the requests its alarm tracker remembered)."""
    manifest = Manifest.load(run_dir).run
    records: list[dict[str, Any]] = []
    for pass_id in sorted(manifest.passes):
        info = manifest.passes[pass_id]
        if info.status == "OK" and info.file:
            records.extend(read_records(run_dir / info.file, logprobs=False).records)
    resolved = manifest.protocol.resolved
    bounds = resolved.get("bounds")
    cap = bounds.get("alarm_requests") if isinstance(bounds, dict) else None
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise KitError(f"{run_dir}: the manifest's protocol.resolved.bounds.alarm_requests is not a positive "
                       "whole number", "this run folder was changed after `kit watch` wrote it")
    return records, bool(resolved.get("pinned")), cap


def watch_results(run_dir: Path) -> WatchResults:
    """The watch table, from the run folder only (what `results` writes; `kit analyze` reads it too)."""
    manifest = Manifest.load(run_dir).run
    resolved = manifest.protocol.resolved
    return WatchResults(table="watch", run_id=manifest.run_id, upstream=resolved.get("upstream"),
                        engine_kind=resolved.get("engine_kind"), **compute(*read(run_dir)))


def watch_table(run_dir: Path) -> JsonObject:
    """The watch table's JSON values (`kit analyze` keeps them in findings.json)."""
    return watch_results(run_dir).to_json()


RESULTS = RunPaths.result_name("watch")
FILES = {"watch": RESULTS, "watch_csv": RunPaths.result_name("watch", ".csv")}


def results(run_dir: Path) -> dict[str, Any]:
    """Compute the watch table from the run folder and write results/watch.json and .csv; the table with the
    results files in its `files`, as every kind's (the run's manifest records them). results/watch.json is the
    table as every earlier kit wrote it, without `files`, so that their bundles' results still compare equal
    to the ones `kit verify` recomputes."""
    table = watch_results(run_dir)
    written = write_results(run_dir, table, "watch", "watch", FIELDS, [r.to_json() for r in table.repeated])
    return {**written, "files": FILES}
