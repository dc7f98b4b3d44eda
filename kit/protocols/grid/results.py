"""The grid's results, computed from its records: divergence per comparison, exact identity of the
cache-off repeat, and BFCL outcomes per pass with the paired flips between arms."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from kit.protocols.passes import Logprobs, RecordsReader
from kit.protocols.results_files import write_results
from kit.protocols.results_model import (
    Comparison,
    Count,
    EpisodeVerdict,
    Identity,
    Interval,
    McNemar,
    Part,
    Results,
    said_not_ok,
    field_alias,
)
from kit.record.divergence import TOKEN_IDS, comparison_level, episode_divergence, level_note
from kit.record.manifest import Manifest, PassInfo
from kit.core.paths import RunPaths
from kit.record.files import DeferredLogprobs, logprobs_pair, read_records



class Outcomes(Part):
    """A pass's BFCL outcomes: episodes, how many scored valid, and the count of each outcome."""

    episodes: Count
    valid: Count
    by_outcome: dict[str, Count]


class GridPass(Part):
    """One pass of the run: its arm, how it ended and, where it is OK and its records are there, its outcomes."""

    pass_: str = field_alias("pass")
    arm: str | None = None
    status: str | None = None
    reason: str | None = None
    outcomes: Outcomes | None = None


class Flips(Part):
    """Episodes valid in one arm of a path comparison and not in the other, with their exact McNemar test."""

    episodes: Count
    valid_off_invalid_on: Count
    invalid_off_valid_on: Count
    mcnemar: McNemar


class GridResults(Results):
    """results/grid.json: the grid's comparisons of two passes, its passes' outcomes and the path flips."""

    passes: list[GridPass]
    void_passes: list[str] = []
    comparisons: dict[str, Comparison]
    flips: dict[str, Flips] = {}

    def not_ok(self) -> list[tuple[str, str, str]]:
        return said_not_ok((p.pass_, p.status, p.reason) for p in self.passes)


WITHIN_ORDER = {"run-to-run cache-off": (("off", 1), ("off", 2)), "run-to-run cache-on": (("on", 1), ("on", 2)),
                "path": (("on", 1), ("off", 1))}


class Planned(Protocol):
    """A pass as the comparisons read it: a plan (kit.protocols.bfcl_passes.model.PassPlan) or a manifest's pass
    (`PassRead`)."""

    @property
    def pass_id(self) -> str: ...
    @property
    def arm(self) -> str: ...
    @property
    def repeat(self) -> int: ...
    @property
    def order(self) -> int: ...


class PassRead(NamedTuple):
    """A pass of a run's manifest: its arm as written ("" where none is), repeat and episode order."""

    pass_id: str
    arm: str
    repeat: int
    order: int


def comparisons(passes: Sequence[Planned]) -> dict[str, tuple[str, str]]:
    """The comparisons a set of passes allows: run-to-run within each arm and the path comparison under each
    order, and each arm's first pass across orders."""
    index: dict[tuple[str, int, int], str] = {(p.arm, p.repeat, p.order): p.pass_id for p in passes}
    orders = list(dict.fromkeys(p.order for p in passes))
    found = {}
    for order in orders:
        tag = "" if len(orders) == 1 else f" (order {order})"
        for name, (first, second) in WITHIN_ORDER.items():
            a, b = index.get((*first, order)), index.get((*second, order))
            if a and b:
                found[name + tag] = (a, b)
    for order in orders[1:]:
        for arm in ("on", "off"):
            a, b = index.get((arm, 1, orders[0])), index.get((arm, 1, order))
            if a and b:
                found[f"cache-{arm} across orders ({orders[0]} vs {order})"] = (a, b)
    return found


@dataclass(frozen=True, slots=True)
class GridRequest:
    """What the grid's results need of a request record (the prompt text and raw body are dropped): its
    `logprobs` as read (parsed, or DeferredLogprobs: `identity` parses them); `emitted`, its tokens at the
    comparison level (`_emitted`)."""

    step: int
    prompt_sha256: str
    ids: list[int] | None
    tokens: list[str]
    logprobs: Logprobs
    emitted: Sequence[int | str] | None = None


class EpisodeScore(NamedTuple):
    """What the grid's results need of an episode record: BFCL's verdict and the episode's outcome."""

    valid: bool
    outcome: str


Requests = dict[str, list[GridRequest]]  # a pass's requests per episode, in step order
Loaded = tuple[Requests, dict[str, EpisodeScore], list[str]]  # (requests, episodes, execution order) of a pass


def compared_on(a: Requests, b: Requests) -> str:
    """The comparison level of two passes (kit.record.divergence.comparison_level)."""
    return comparison_level(all(r.ids is not None for side in (a, b) for requests in side.values()
                                for r in requests))


def _emitted(requests: list[GridRequest], level: str) -> list[GridRequest]:
    """`requests` with `emitted` at the comparison level."""
    return [replace(r, emitted=list(r.ids) if level == TOKEN_IDS and r.ids is not None else list(r.tokens))
            for r in requests]


def load_pass(run_dir: Path, info: PassInfo, records: RecordsReader | None = None) -> Loaded:
    """(requests per episode in step order, episodes' scores, episode execution order) of one pass, read
    through `records` (e.g. RunFolder.records) when given, every log-probability array asked for (`identity`
    compares them)."""
    read = records or (lambda file, logprobs: read_records(run_dir / file, logprobs=logprobs).records)
    requests: Requests = defaultdict(list)
    for record in read(str(info.file), True):
        if record.get("action") != "sentinel":
            completion = record["completion"]
            requests[record["unit"]].append(GridRequest(
                record["step"], record["prompt_sha256"], completion.get("token_ids"),
                list(completion.get("tokens") or ()), completion["logprobs"]))
    episodes = {r["unit"]: EpisodeScore(bool(r["score"]["valid"]), r["outcome"])
                for r in read(str(info.episodes_file), True)}
    order = [unit for unit in info.order if unit in episodes]
    return {u: sorted(rs, key=lambda r: r.step) for u, rs in requests.items()}, episodes, order


def walk(requests: list[GridRequest]) -> list[tuple[str, Sequence[int | str]]]:
    return [(r.prompt_sha256, r.emitted or []) for r in requests]


def _same_valid(a: Any, b: Any) -> int | None:
    """The number of entries of two deferred arrays not parsed yet with the same bytes that the mechanism's view
    decodes (kit.record.files.DeferredLogprobs.positions: valid JSON, so no NaN, each entry an object with a token),
    or None. Each entry of such a pair equals itself, token and id too, as `identity` counts them in the full parse."""
    if DeferredLogprobs.same_bytes(a, b) and not a.parsed:
        found = a.positions()
        return None if found is None else len(found)
    return None


def identity(a: Requests, b: Requests, units: list[str]) -> Identity:
    """Exact identity of two passes: episodes, log-probability records and their values (RQ1)."""
    counts = {"episodes": len(units), "episodes_identical": 0, "logprob_records": 0, "tokens_identical": 0,
              "logprobs_identical": 0}
    for unit in units:
        same_episode = len(a[unit]) == len(b[unit])
        for ra, rb in zip(a[unit], b[unit]):
            same = _same_valid(ra.logprobs, rb.logprobs)
            if same is not None:  # the same bytes, each entry equal to itself: counted without the full parse
                for key in ("logprob_records", "tokens_identical", "logprobs_identical"):
                    counts[key] += same
                same_episode &= ra.prompt_sha256 == rb.prompt_sha256 and ra.emitted == rb.emitted
                continue
            la, lb = logprobs_pair(ra.logprobs, rb.logprobs)
            counts["logprob_records"] += len(la)
            if la is lb:  # one parse of the same bytes (logprobs_pair): each entry equals itself, as a dict does
                counts["tokens_identical"] += sum(x["token"] == x["token"] and x.get("id") == x.get("id") for x in la)
                counts["logprobs_identical"] += len(la)
            else:
                for x, y in zip(la, lb):
                    counts["tokens_identical"] += x["token"] == y["token"] and x.get("id") == y.get("id")
                    counts["logprobs_identical"] += x == y
            same_episode &= ra.prompt_sha256 == rb.prompt_sha256 and ra.emitted == rb.emitted and la == lb
        counts["episodes_identical"] += same_episode
    return Identity(**counts)


def _compare(a: tuple[Requests, dict[str, EpisodeScore]], b: tuple[Requests, dict[str, EpisodeScore]],
             order: list[str], passes: list[str], level: str, same: Identity) -> Comparison:
    """Episode divergence of pass `a` against pass `b` (each: its requests, its episodes) in `order`, made at
    `level`, with their exact identity `same`."""
    from kit.stats import rate_interval  # noqa: PLC0415 - loads scipy: only when computing

    units = [u for u in order if u in a[1] and u in b[1]]
    verdicts = {u: episode_divergence(walk(a[0].get(u, [])), walk(b[0].get(u, []))) for u in units}
    diverged = [v for v in verdicts.values() if v.diverged]
    kinds: dict[str, int] = defaultdict(int)
    for v in diverged:
        kinds[str(v.kind)] += 1
    made = Comparison(passes=passes, episodes=len(units), diverged=len(diverged),
                      interval=Interval(**rate_interval(len(diverged), len(units)).to_json()) if units else None,
                      kinds=dict(kinds), first_request_index=[v.request_index for v in diverged],
                      first_token_index=[v.token_index for v in diverged if v.token_index is not None],
                      per_episode={u: EpisodeVerdict(**v.to_json()) for u, v in verdicts.items()}, identity=same)
    if "compared_on" in level_note(level):  # written where it was made on strings (set: dumped in its place)
        made.compared_on = level
    return made


def outcomes(episodes: dict[str, EpisodeScore]) -> Outcomes:
    valid = sum(e.valid for e in episodes.values())
    by_outcome: dict[str, int] = defaultdict(int)
    for e in episodes.values():
        by_outcome[e.outcome] += 1
    return Outcomes(episodes=len(episodes), valid=valid, by_outcome=dict(by_outcome))


def flips(on: dict[str, EpisodeScore], off: dict[str, EpisodeScore]) -> Flips:
    from kit.stats import exact_mcnemar  # noqa: PLC0415 - loads numpy: only when computing

    units = sorted(set(on) & set(off))
    to_invalid = sum(off[u].valid and not on[u].valid for u in units)
    to_valid = sum(on[u].valid and not off[u].valid for u in units)
    return Flips(episodes=len(units), valid_off_invalid_on=to_invalid, invalid_off_valid_on=to_valid,
                 mcnemar=McNemar(**exact_mcnemar(to_invalid, to_valid).to_json()))


def _repeat(pass_id: str) -> int:
    """The repeat number a pass id carries (`off2` → 2), for manifests written before `repeat` was recorded."""
    found = re.match(r"(?:on|off)(\d+)", pass_id)
    return int(found.group(1)) if found else 1


def grid_table(run_dir: Path, infos: dict[str, PassInfo] | None = None,
               records: RecordsReader | None = None) -> GridResults:
    """The grid's comparisons over the run's passes (or over `infos`, one cell's passes of a run), their
    records read through `records` when given (see `load_pass`)."""
    manifest = Manifest.load(run_dir)
    infos = infos if infos is not None else manifest.run.passes
    loaded = {pid: load_pass(run_dir, info, records) for pid, info in infos.items()
              if info.status == "OK" and (run_dir / str(info.file)).exists()}
    # a pass the manifest names no arm of is in no comparison (its arm matches neither on nor off)
    planned = [PassRead(pid, info.arm or "", info.repeat or _repeat(pid), info.order_index or 0)
               for pid, info in infos.items()]
    emitted: dict[tuple[str, str], Requests] = {}  # (pass, level) -> its requests with `emitted`
    found: dict[str, Comparison] = {}
    for name, (a, b) in comparisons(planned).items():
        if a not in loaded or b not in loaded:
            found[name] = Comparison(passes=[a, b], skipped="a pass is not OK (VOID, failed or cut short)")
            continue
        level = compared_on(loaded[a][0], loaded[b][0])
        for p in (a, b):  # a pass in two comparisons at one level is prepared once
            if (p, level) not in emitted:
                emitted[p, level] = {u: _emitted(rs, level) for u, rs in loaded[p][0].items()}
        first, second = emitted[a, level], emitted[b, level]
        units = [u for u in loaded[a][2] if u in loaded[b][1]]
        found[name] = _compare((first, loaded[a][1]), (second, loaded[b][1]), loaded[a][2], [a, b], level,
                               identity(first, second, units))
    return GridResults(
        table="grid", run_id=manifest.run_id,
        files={"grid": RunPaths.result_name("grid"), "grid_csv": RunPaths.result_name("grid", ".csv")},
        passes=[GridPass(pass_=pid, arm=info.arm, status=info.status, reason=info.reason,
                         **({"outcomes": outcomes(loaded[pid][1])} if pid in loaded else {}))
                for pid, info in infos.items()],
        void_passes=[pid for pid, info in infos.items() if info.status != "OK"], comparisons=found,
        flips={name: flips(loaded[c.passes[0]][1], loaded[c.passes[1]][1]) for name, c in found.items()
               if name.startswith("path") and c.compared})


CSV_FIELDS = ("comparison", "pass_a", "pass_b", "episodes", "diverged", "rate", "lo", "hi")


def write(run_dir: Path) -> dict[str, Any]:
    """Compute the grid results and write results/grid.json and results/grid.csv."""
    table = grid_table(run_dir)
    rows = [{"comparison": name, "pass_a": c.passes[0], "pass_b": c.passes[1],
             "episodes": c.episodes if c.compared else None, "diverged": c.diverged if c.compared else None,
             **{k: getattr(c.interval, k, None) for k in ("rate", "lo", "hi")}}
            for name, c in table.comparisons.items()]
    return write_results(run_dir, table, "grid", "grid", CSV_FIELDS, rows)
