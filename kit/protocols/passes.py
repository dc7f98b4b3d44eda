"""One pass's requests, read from its records file and kept slim: per unit (episode or item), the
requests in step order with what divergence and the mechanism need, and the pass's execution order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.record.completion import TokenLogprob
from kit.record.divergence import (TOKEN_IDS, EpisodeDivergence, comparison_level, emitted, episode_divergence,
                                   level_note)
from kit.record.manifest import PassInfo
from kit.record.files import DeferredLogprobs, logprobs_pair, read_records
from kit.record.view import PositionView
from kit.protocols.results_model import Comparison


Logprobs = list[TokenLogprob] | DeferredLogprobs | None  # a completion's `logprobs` as a read gives it
# a run folder's records file (relative to it), how much of the log-probabilities to keep -> its records as read
RecordsReader = Callable[[str, bool | Literal["deferred"]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Request:
    """What analysis needs of one record."""

    prompt_sha256: str
    tokens: tuple  # the emitted ids where the engine gave them, else the token strings
    strings: tuple  # the emitted token strings
    has_ids: bool
    cached_tokens: int | None
    top_k: int | None
    logprobs: Margins | None  # one (token key, top-two margin) per log-probability record
    phase: str | None
    expect: str | None
    text: str
    outcome: str | None


@dataclass
class PassData:
    """Requests per unit (step order, or phase order for single-turn items) and the execution order."""

    pass_id: str
    units: dict[str, list[Request]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def walk(self, unit: str, level: str = TOKEN_IDS) -> list[tuple[str, tuple]]:
        """(prompt sha256, emitted tokens at `level`) of each request of `unit`."""
        return [(r.prompt_sha256, r.tokens if level == TOKEN_IDS else r.strings) for r in self.units.get(unit, [])]

    def all_ids(self) -> bool:
        return all(r.has_ids for requests in self.units.values() for r in requests)


def top_two_margin(logprobs: list[float]) -> float:
    """Top-1 minus top-2 log-probability of one position's alternatives (NaN with fewer than two)."""
    if len(logprobs) < 2:
        return float("nan")
    first, second = sorted(logprobs, reverse=True)[:2]
    return first - second


def _position(entry: TokenLogprob) -> tuple[int | str, float]:
    """(token key: the id where the engine gave one, else the token string; top-two margin) of one entry."""
    key = entry.get("id")
    return (entry["token"] if key is None else key,
            top_two_margin([float(t["logprob"]) for t in entry.get("top") or ()]))


def _lean_position(entry: PositionView) -> tuple[int | str, float]:
    """`_position` of an entry decoded as kit.record.view.PositionView: the same values."""
    return (entry.token if entry.id is None else entry.id,
            top_two_margin([float(t.logprob) for t in entry.top or ()]))


def _lean(read: Logprobs) -> list[PositionView] | None:
    """The entries of a deferred array not parsed yet, decoded as kit.record.view.positions decodes them (or None)."""
    return read.positions() if isinstance(read, DeferredLogprobs) and not read.parsed else None


class Margins(Sequence):
    """(token key, top-two margin) of each log-probability record of a completion, parsed (when its read
    deferred them: kit.record.files.logprobs_of) and worked out as they are visited (`_position`): the
    mechanism compares only some of a pass's requests, and walks each only to its first flip. A deferred array
    is decoded into only what the margins need where it fits (kit.record.view.positions), else parsed in full."""

    __slots__ = ("_read", "_entries", "_position")

    def __init__(self, logprobs: Logprobs):
        self._read: Logprobs = logprobs  # the completion's `logprobs` as read, until parsed
        self._entries: list[Any] = []
        self._position: Callable[[Any], tuple[int | str, float]] = _position

    def _take(self, lean: list[PositionView] | None, full: Any) -> None:
        self._entries, self._position = (lean, _lean_position) if lean is not None else (full or [], _position)
        self._read = None

    @property
    def entries(self) -> list[Any]:
        if self._read is not None:
            lean = _lean(self._read)
            self._take(lean, None if lean is not None else logprobs_pair(self._read, None)[0])
        return self._entries

    def __len__(self) -> int:
        return len(self.entries)

    def pair(self, other: Margins) -> None:
        """Parse both sides' arrays now, once if their bytes are the same (kit.record.files.logprobs_pair)."""
        mine, theirs = self._read, other._read
        if mine is None or theirs is None:
            return
        lean = _lean(mine)
        if lean is not None:
            # the same bytes: one decode, shared as one parse is
            other_lean = lean if DeferredLogprobs.same_bytes(mine, theirs) else _lean(theirs)
            if other_lean is not None:
                self._take(lean, None)
                other._take(other_lean, None)
                return
        full = logprobs_pair(mine, theirs)
        self._take(None, full[0])
        other._take(None, full[1])

    def __getitem__(self, index):
        entries = self.entries  # parsed first: the parse sets how an entry is read
        if isinstance(index, slice):
            return tuple(map(self._position, entries[index]))
        return self._position(entries[index])

    def __iter__(self) -> Iterator[tuple[int | str, float]]:
        entries = self.entries
        return map(self._position, entries)


def slim(record: dict[str, Any], keep_logprobs: bool) -> Request:
    completion = record.get("completion") or {}
    body = (record.get("request") or {}).get("body") or {}
    top_k = body.get("n_probs", body.get("logprobs"))
    logprobs = None
    if keep_logprobs:
        logprobs = Margins(completion.get("logprobs"))
    return Request(prompt_sha256=record["prompt_sha256"], tokens=tuple(emitted(record)),
                   strings=tuple(completion.get("tokens") or ()), has_ids=completion.get("token_ids") is not None,
                   cached_tokens=completion.get("cached_tokens"), top_k=int(top_k) if top_k is not None else None,
                   logprobs=logprobs, phase=record.get("phase"), expect=record.get("expect"),
                   text=completion.get("text") or "", outcome=completion.get("outcome"))


def load_pass(run_dir: Path, pass_id: str, info: PassInfo, keep_logprobs: bool = False,
              records: RecordsReader | None = None) -> PassData:
    """Read a pass's records file (through `records`, e.g. RunFolder.records, when given: file, keep
    log-probabilities? -> its records); units keep the manifest's execution order (`order`)."""
    units: dict[str, list[tuple[int, int, Request]]] = defaultdict(list)
    keep: Literal["deferred"] | bool = "deferred" if keep_logprobs else False
    read = records(str(info.file), keep) if records else read_records(run_dir / str(info.file), logprobs=keep).records
    for record in read:
        rank = record.get("phase_index", record.get("step", 0))
        units[str(record["unit"])].append((int(rank or 0), int(record.get("seq", 0)), slim(record, keep_logprobs)))
    data = PassData(pass_id, {u: [r for _, _, r in sorted(rs, key=lambda t: t[:2])] for u, rs in units.items()})
    data.order = [str(u) for u in info.order if str(u) in data.units] or sorted(data.units)
    return data


def divergence_indicators(a: PassData, b: PassData) -> tuple[list[str], list[int], list[EpisodeDivergence]]:
    """Episodes present in both passes in `a`'s execution order, their 0/1 divergence, and the verdicts."""
    units = [u for u in a.order if u in b.units]
    level = comparison_level(a.all_ids() and b.all_ids())
    verdicts = [episode_divergence(a.walk(u, level), b.walk(u, level)) for u in units]
    return units, [int(v.diverged) for v in verdicts], verdicts


class OkPasses:
    """The OK passes of a run (their record files present), each read once when first needed (through `records`
    where given, as `load_pass` takes it)."""

    def __init__(self, run_dir: Path, infos: dict[str, PassInfo],
                 records: RecordsReader | None = None):
        self.run_dir = run_dir
        self.ok = {p: i for p, i in infos.items() if i.status == "OK" and (run_dir / (i.file or "")).is_file()}
        self.loaded: dict[str, PassData] = {}
        self.records = records

    def get(self, pass_id: str) -> PassData | None:
        if pass_id not in self.ok:
            return None
        if pass_id not in self.loaded:
            self.loaded[pass_id] = load_pass(self.run_dir, pass_id, self.ok[pass_id], records=self.records)
        return self.loaded[pass_id]

    def compare(self, a: str, b: str) -> Comparison:
        """Episode divergence of pass `a` against pass `b` (in `a`'s execution order)."""
        from kit.stats import rate_interval  # noqa: PLC0415 - loads scipy: only when computing

        pa, pb = self.get(a), self.get(b)
        if pa is None or pb is None:
            return Comparison(passes=[a, b], skipped="a pass is not OK (VOID, failed or not run)")
        units, indicators, verdicts = divergence_indicators(pa, pb)
        level = comparison_level(pa.all_ids() and pb.all_ids())
        made = Comparison(passes=[a, b],
                          episodes=len(units), diverged=sum(indicators),
                          rate=sum(indicators) / len(units) if units else None,
                          interval=rate_interval(sum(indicators), len(units)).to_json() if units else None,
                          status=dict(zip(units, indicators)),
                          first_request_index=[v.request_index for v in verdicts if v.diverged])
        if "compared_on" in level_note(level):  # unset on ids (set: dumped in its place)
            made.compared_on = level
        return made
