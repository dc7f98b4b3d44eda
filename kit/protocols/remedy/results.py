"""The remedy's results, computed from its records and manifest only (kit verify recomputes them).

Per arm: the paper's divergence measures with Wilson 95% intervals (Table IV: GSM8K items whose recompute
and cache-hit outputs differ; Table VII: items whose answer is right on one path and wrong on the other;
Table V: BFCL episodes whose cache-on and cache-off passes take different paths), whether the fix closed
each (0 on the fixed arm where the unfixed arm had > 0), and its cost per prompt-length bin (time to first
token, prefill and decode tokens per second, end-to-end latency, each with the bin's request count, and
as a ratio to the unfixed arm's value in the same bin). Only passes that ended OK count.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

from kit.core.paths import RunPaths
from kit.protocols.passes import OkPasses, RecordsReader
from kit.protocols.reset.results import counts, item_paths, outcomes
from kit.protocols.results_files import write_results
from kit.protocols.results_model import Count, Interval, JsonObject, Number, Part, Results
from kit.record.files import RecordFile, read_records
from kit.record.manifest import Manifest

BINS = ((256, "<=256"), (1024, "257-1k"), (4096, "1k-4k"), (None, ">4k"))  # prompt tokens, upper bound inclusive
MEASURES = {"IV": "GSM8K paths differ (recompute vs cache hit)", "VII": "GSM8K correctness flips",
            "V": "BFCL path divergence (cache-on vs cache-off pass)"}
COSTS = ("ttft_ms", "prefill_tps", "decode_tps", "latency_s")


class CostRow(Part):
    """One prompt-length bin's cost: requests, mean time to first token, prefill and decode tokens per second, mean
    latency, and each as a ratio to the unfixed arm's in the same bin."""

    requests: Count
    ttft_ms: Number
    prefill_tps: Number | None = None
    decode_tps: Number | None = None
    latency_s: Number
    ratio: dict[str, Number | None] = {}


class Arm(Part):
    """One arm: its fixes, its divergence measures (Wilson intervals), its cost per bin, what it closed and its
    worst slowdown against the unfixed arm (the first)."""

    name: str
    fixes: list[str] = []
    server_args: list[str] = []
    divergence: dict[str, Interval] = {}
    cost: dict[str, CostRow] = {}
    closed: dict[str, str] = {}
    worst_slowdown: Number | None = None


class RemedyResults(Results):
    """results/remedy.json."""

    measures: dict[str, str]
    bins: list[str]
    arms: list[Arm]
    cheapest_closing: dict[str, str | None]
    not_ok_passes: list[str] = []


def bin_of(prompt_tokens: int) -> str:
    return next(label for bound, label in BINS if bound is None or prompt_tokens <= bound)


class OwnPass(NamedTuple):
    """An arm's OK pass: its id, what its manifest entry's `remedy` says of it (each value as text: `None` where
    the entry lacks it) and its records file."""

    pass_id: str
    workload: str
    unit: str
    cache: str
    file: str


def by_arm(manifest: Manifest) -> dict[str, list[OwnPass]]:
    """The passes that ended OK with a records file, grouped by the arm their remedy entry names."""
    found: dict[str, list[OwnPass]] = defaultdict(list)
    for pass_id, info in manifest.run.passes.items():
        entry = getattr(info, "remedy", None)
        if info.status == "OK" and isinstance(entry, dict) and info.file:
            found[str(entry.get("arm"))].append(OwnPass(pass_id, str(entry.get("workload")), str(entry.get("unit")),
                                                        str(entry.get("cache")), str(info.file)))
    return found


def reader(run_dir: Path) -> RecordsReader:
    """Records files of the run folder (`file` relative to it), each read once (no log-probabilities: no measure
    here needs them, whatever the caller asks), in the shape kit.protocols.passes.load_pass takes."""
    read: dict[str, RecordFile] = {}

    def once(file: str) -> RecordFile:
        if file not in read:
            read[file] = read_records(run_dir / file, logprobs=False)
        return read[file]
    return lambda file, _logprobs: once(file).records


def rate(k: int, n: int) -> Interval:
    """k of n with its Wilson 95% interval (k and n only where nothing was measured)."""
    from kit.stats import rate_interval  # noqa: PLC0415 - loads scipy: only when computing

    return Interval(**rate_interval(k, n).to_json()) if n else Interval(k=0, n=0)


def measured(read: RecordsReader, passes: OkPasses, own: list[OwnPass],
             ) -> tuple[dict[str, Interval], dict[str, CostRow]]:
    """An arm's divergence (Tables IV, VII, V) and cost per prompt-length bin from its OK passes `own`, each
    records file read once (by `read`, which `passes` reads through as well) for both."""
    gsm8k: list[dict] = []
    bfcl: dict[str, dict[str, str]] = defaultdict(dict)  # episode -> cache arm -> pass id
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for mine in own:
        records = read(mine.file, False)
        tally(records, sums)
        if mine.workload == "gsm8k":
            gsm8k += records
        elif mine.workload == "bfcl":
            bfcl[mine.unit][mine.cache] = mine.pass_id
    found: dict[str, Interval] = {}
    if gsm8k:
        units = item_paths(gsm8k)
        found["IV"] = rate(counts(units)["paths_differ"], len(units))
        scored = outcomes(units)
        if scored is not None:
            found["VII"] = rate(scored.recompute_right_hit_wrong + scored.recompute_wrong_hit_right, scored.items)
    if bfcl:
        compared = [passes.compare(pair["on"], pair["off"]) for pair in bfcl.values() if {"on", "off"} <= set(pair)]
        found["V"] = rate(sum(c.diverged for c in compared), sum(c.episodes for c in compared))
    return found, cost(sums)


def tally(records: list[dict[str, Any]], sums: dict[str, dict[str, float]]) -> None:
    """Add each answered request (no sentinel) of `records` to its prompt-length bin's sums."""
    for record in records:
        completion = record["completion"]
        prompt = completion.get("prompt_tokens")
        if completion.get("outcome") != "ok" or not isinstance(prompt, int) or record.get("action") == "sentinel":
            continue
        s = sums[bin_of(prompt)]
        s["requests"] += 1
        s["prefill_ms"] += completion.get("prefill_ms") or 0.0
        s["prefill_tokens"] += completion.get("prefill_tokens") or 0
        s["decode_ms"] += completion.get("decode_ms") or 0.0
        s["decode_tokens"] += completion.get("decode_tokens") or 0
        s["wall_seconds"] += record.get("wall_seconds") or 0.0


def cost(sums: dict[str, dict[str, float]]) -> dict[str, CostRow]:
    """Per prompt-length bin: requests, mean time to first token (ms), prefill and decode tokens per second
    (tokens over time, summed), mean end-to-end latency (s)."""
    found = {}
    for _, label in BINS:
        s = sums.get(label)
        if not s:
            continue
        n = int(s["requests"])
        found[label] = CostRow(requests=n, ttft_ms=s["prefill_ms"] / n,
                               prefill_tps=s["prefill_tokens"] / (s["prefill_ms"] / 1000) if s["prefill_ms"] else None,
                               decode_tps=s["decode_tokens"] / (s["decode_ms"] / 1000) if s["decode_ms"] else None,
                               latency_s=s["wall_seconds"] / n)
    return found


def ratios(mine: dict[str, CostRow], unfixed: dict[str, CostRow]) -> None:
    """Each bin's cost as a ratio to the unfixed arm's in the same bin (None where either lacks it)."""
    for label, row in mine.items():
        base = unfixed.get(label)

        def ratio(key: str) -> Number | None:
            value, against = getattr(row, key), getattr(base, key, None)
            return value / against if value and against else None

        row.ratio = {key: ratio(key) for key in COSTS}


def closed(mine: Interval | None, unfixed: Interval | None) -> str:
    """closed (0 on the fix, > 0 unfixed), not closed (> 0 on the fix), nothing to close (0 on both), or
    not measured."""
    if not mine or not unfixed or not mine.n or not unfixed.n:
        return "not measured"
    if mine.k:
        return "not closed"
    return "closed" if unfixed.k else "nothing to close"


def slowdown(arm: Arm) -> Number | None:
    """The arm's worst slowdown over the bins: the largest of its time-to-first-token and latency ratios to the
    unfixed arm (None where no bin has one). The cheapest fix is the one whose worst slowdown is least."""
    found = [value for row in arm.cost.values() for key in ("ttft_ms", "latency_s")
             if (value := row.ratio.get(key)) is not None]
    return max(found) if found else None


def remedy_results(run_dir: Path) -> RemedyResults:
    manifest = Manifest.load(run_dir)
    design = (getattr(manifest.run, "remedy", None) or {}).get("arms") or []
    read, own = reader(run_dir), by_arm(manifest)
    passes = OkPasses(run_dir, manifest.run.passes, read)
    arms = []
    for entry in design:
        name = entry["name"]
        divergence, costs = measured(read, passes, own.get(name, []))
        arms.append(Arm(name=name, fixes=[f["name"] for f in entry.get("fixes") or []],
                        server_args=list(entry.get("server_args") or []), divergence=divergence, cost=costs))
    unfixed = arms[0] if arms else None
    cheapest: dict[str, str | None] = {}
    for arm in arms:
        ratios(arm.cost, unfixed.cost if unfixed else {})
        arm.closed = {m: closed(arm.divergence.get(m), unfixed.divergence.get(m) if unfixed else None)
                      for m in MEASURES} if arm is not unfixed else {}
        arm.worst_slowdown = slowdown(arm) if arm is not unfixed else None
    for measure in MEASURES:
        closing = [a for a in arms[1:] if a.closed.get(measure) == "closed"]
        closing.sort(key=lambda a: (a.worst_slowdown is None, a.worst_slowdown or 0.0))
        cheapest[measure] = closing[0].name if closing else None
    void = sorted(pid for pid, info in manifest.run.passes.items() if info.status != "OK")
    return RemedyResults(table="remedy", run_id=manifest.run_id, files={"remedy": RunPaths.result_name("remedy")},
                         measures=MEASURES, bins=[label for _, label in BINS], arms=arms, cheapest_closing=cheapest,
                         not_ok_passes=void)


def remedy_table(run_dir: Path) -> JsonObject:
    """The remedy table's JSON values (`kit analyze` keeps them in findings.json)."""
    return remedy_results(run_dir).to_json()


CSV_FIELDS = ("arm", "bin", "requests", "ttft_ms", "prefill_tps", "decode_tps", "latency_s", "ttft_ratio",
              "prefill_ratio", "decode_ratio", "latency_ratio")


class CsvRow(TypedDict):
    """A row of results/remedy.csv (CSV_FIELDS): one arm's cost in one prompt-length bin."""

    arm: str
    bin: str
    requests: int
    ttft_ms: float
    prefill_tps: float | None
    decode_tps: float | None
    latency_s: float
    ttft_ratio: float | None
    prefill_ratio: float | None
    decode_ratio: float | None
    latency_ratio: float | None


def csv_rows(table: RemedyResults) -> list[CsvRow]:
    rows: list[CsvRow] = []
    for arm in table.arms:
        for label, row in arm.cost.items():
            r = row.ratio
            rows.append({"arm": arm.name, "bin": label, "requests": row.requests, "ttft_ms": row.ttft_ms,
                         "prefill_tps": row.prefill_tps, "decode_tps": row.decode_tps, "latency_s": row.latency_s,
                         "ttft_ratio": r.get("ttft_ms"), "prefill_ratio": r.get("prefill_tps"),
                         "decode_ratio": r.get("decode_tps"), "latency_ratio": r.get("latency_s")})
    return rows


def write(run_dir: Path) -> dict[str, Any]:
    """Compute the table and write results/remedy.json and .csv into the run folder."""
    table = remedy_results(run_dir)
    return write_results(run_dir, table, "remedy", "remedy", CSV_FIELDS, csv_rows(table))
