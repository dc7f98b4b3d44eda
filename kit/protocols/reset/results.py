"""The restored-state control's table (the layout of the paper's Table IV), computed from records."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Self

from pydantic import model_validator

from kit.core.errors import KitError
from kit.protocols.results_files import write_results
from kit.protocols.results_model import Count, McNemar, Part, Results, said_not_ok
from kit.record.divergence import emitted, first_difference
from kit.record.manifest import Manifest
from kit.core.paths import RunPaths
from kit.record.files import read_records
from kit.workloads.answers import is_correct


class Outcomes(Part):
    """Correctness per path over the scored items, the flips in both directions and their exact McNemar test."""

    items: Count
    recompute_correct: Count
    hit_correct: Count
    recompute_right_hit_wrong: Count
    recompute_wrong_hit_right: Count
    mcnemar: McNemar


class Session(Part):
    """One session's row: its status, and for an OK session its counts (`counts`), its answers' correctness
    (None where no item has a reference) and where the paths first differ."""

    session: str
    status: str | None  # null for a pass the manifest lists without an ending
    reason: str | None = None
    items: Count = 0
    recompute_reproduces: Count = 0
    hit_reproduces: Count = 0
    paths_differ: Count = 0
    cache_caused: Count | None = None  # absent in tables of kits before it was counted
    outcomes: Outcomes | None = None
    first_difference_tokens: list[Count] = []

    @model_validator(mode="after")
    def _counted(self) -> Self:
        missing = [key for key in COUNT_KEYS[:4] if self.ok and key not in self.model_fields_set]
        if missing:
            raise ValueError(f"an OK session needs its counts: {', '.join(missing)} missing")
        return self

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    @property
    def reproduces(self) -> bool:
        """Each path reproduced itself on every item."""
        return self.recompute_reproduces == self.items and self.hit_reproduces == self.items


class AcrossSessions(Part):
    """Items whose every output on a path is the same in all OK sessions (`note`: why not counted)."""

    sessions: Count
    note: str | None = None
    items: Count | None = None
    recompute_same_in_all: Count | None = None
    hit_same_in_all: Count | None = None


class ResetResults(Results):
    """results/reset_table.json: the restored-state control's table (the paper's Table IV layout)."""

    sessions: list[Session]
    across_sessions: AcrossSessions
    void_sessions: list[str] = []

    def not_ok(self) -> list[tuple[str, str, str]]:
        return said_not_ok((s.session, s.status, s.reason) for s in self.sessions)

    def ok_sessions(self) -> list[Session]:
        return [s for s in self.sessions if s.ok]


Output = tuple[int | str, ...]  # an answer's emitted tokens: ids where the engine gave them, else token strings
Path_ = Literal["cold", "warm"]  # recompute (cold) or cache hit (warm)


@dataclass
class ItemPaths:
    """One item's outputs on each path in phase order (two each where its phases all succeeded), the first text
    of each path and its reference answer (None: the item has none)."""

    cold: list[Output] = field(default_factory=list)
    warm: list[Output] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    reference: str | None = None

    def outputs(self, path: Path_) -> list[Output]:
        return self.cold if path == "cold" else self.warm


def item_paths(records: list[dict]) -> dict[str, ItemPaths]:
    """unit -> its outputs per path (`ItemPaths`), for units whose phases all succeeded (records as read)."""
    units: dict[str, ItemPaths] = defaultdict(ItemPaths)
    failed = set()
    for record in sorted(records, key=lambda r: r["seq"]):
        unit = units[record["unit"]]
        if record["completion"].get("outcome") != "ok":
            failed.add(record["unit"])
        expect = record["expect"]
        if expect not in ("cold", "warm"):
            raise KitError(f"a reset record of unit {record['unit']!r} expects {expect!r}, neither cold nor warm",
                           "the records file was changed after the run wrote it")
        unit.outputs(expect).append(tuple(emitted(record)))
        unit.texts.setdefault(expect, record["completion"]["text"])
        unit.reference = record.get("reference")
    return {u: p for u, p in units.items() if u not in failed and len(p.cold) == 2 and len(p.warm) == 2}


def outcomes(units: dict[str, ItemPaths]) -> Outcomes | None:
    """Correctness per path (answers compared numerically), flips in both directions, exact McNemar."""
    from kit.stats import exact_mcnemar  # noqa: PLC0415 - loads numpy: only when computing

    scored = {u: p for u, p in units.items() if p.reference is not None}
    if not scored:
        return None
    right = {u: {path: is_correct(p.texts[path], p.reference) for path in ("cold", "warm")}
             for u, p in scored.items() if p.reference is not None}
    lost = sum(r["cold"] and not r["warm"] for r in right.values())
    gained = sum(r["warm"] and not r["cold"] for r in right.values())
    return Outcomes(items=len(right), recompute_correct=sum(r["cold"] for r in right.values()),
                    hit_correct=sum(r["warm"] for r in right.values()), recompute_right_hit_wrong=lost,
                    recompute_wrong_hit_right=gained, mcnemar=McNemar(**exact_mcnemar(lost, gained).to_json()))


def counts(units: dict[str, ItemPaths]) -> dict[str, int]:
    """One session's counts (units: item -> its two outputs per path): items, each path reproducing itself, the
    paths differing, and differing on an item where each path reproduced (cache-caused)."""
    return {"items": len(units),
            "recompute_reproduces": sum(p.cold[0] == p.cold[1] for p in units.values()),
            "hit_reproduces": sum(p.warm[0] == p.warm[1] for p in units.values()),
            "paths_differ": sum(p.cold[0] != p.warm[0] for p in units.values()),
            "cache_caused": sum(p.cold[0] == p.cold[1] and p.warm[0] == p.warm[1]
                                and p.cold[0] != p.warm[0] for p in units.values())}


TABLE = "restored-state control"  # the `table` name of its results
COUNT_KEYS = tuple(counts({}))  # the names of a session's counts, in their order (for lists of them per session)


def session_rows(run_dir: Path) -> tuple[list[Session], dict[str, dict[str, ItemPaths]]]:
    manifest = Manifest.load(run_dir)
    rows: list[Session] = []
    paths_by_session: dict[str, dict[str, ItemPaths]] = {}
    passes = sorted(manifest.run.passes.items(), key=lambda kv: kv[1].session or 0)
    for pass_id, info in passes:
        file = run_dir / (info.file or "")
        if info.status != "OK" or not info.file or not file.exists():
            rows.append(Session(session=pass_id, status=info.status, reason=info.reason))
            continue
        units = item_paths(read_records(file).records)
        paths_by_session[pass_id] = units
        firsts = [first_difference(p.cold[0], p.warm[0]) for p in units.values()]
        rows.append(Session(session=pass_id, status=info.status, reason=info.reason, **counts(units),
                            outcomes=outcomes(units),
                            first_difference_tokens=sorted(f for f in firsts if f is not None)))
    return rows, paths_by_session


def across_sessions(paths_by_session: dict[str, dict[str, ItemPaths]]) -> AcrossSessions:
    """Items whose every output on a path is the same token sequence in all OK sessions."""
    if len(paths_by_session) < 2:
        return AcrossSessions(sessions=len(paths_by_session), note="needs at least two OK sessions")
    common = set.intersection(*(set(units) for units in paths_by_session.values()))

    def same_in_all(path: Path_) -> int:
        return sum(len({out for units in paths_by_session.values() for out in units[unit].outputs(path)}) == 1
                   for unit in common)

    return AcrossSessions(sessions=len(paths_by_session), items=len(common), recompute_same_in_all=same_in_all("cold"),
                          hit_same_in_all=same_in_all("warm"))


def reset_table(run_dir: Path) -> ResetResults:
    rows, paths = session_rows(run_dir)
    return ResetResults(table=TABLE, run_id=Manifest.load(run_dir).run_id,
                        files={"reset_table": RunPaths.result_name("reset_table")}, sessions=rows,
                        across_sessions=across_sessions(paths), void_sessions=[r.session for r in rows if not r.ok])


def cut_answers(run_dir: Path) -> tuple[int | None, dict[str, tuple[int, int]]]:
    """Why correctness can read 0: (max_tokens, {session: (answers scored, answers cut at max_tokens before any
    final answer)}), over the answers `outcomes` scores (each item's first recompute and cache-hit answer).
    Read from the records, for the printed results only: not part of the table."""
    from kit.workloads.answers import extract  # noqa: PLC0415

    manifest = Manifest.load(run_dir)
    found: dict[str, tuple[int, int]] = {}
    for pass_id, info in manifest.run.passes.items():
        file = run_dir / (info.file or "")
        if info.status != "OK" or not file.is_file():
            continue
        scored: dict[tuple[str, str], tuple[object, str]] = {}  # (unit, path) -> its first (finish_reason, text)
        for record in sorted(read_records(file).records, key=lambda r: r["seq"]):
            if record.get("reference") is not None:
                completion = record["completion"]
                scored.setdefault((record["unit"], record["expect"]),
                                  (completion.get("finish_reason"), completion.get("text") or ""))
        cut = sum(reason == "length" and extract(text)[0] is None for reason, text in scored.values())
        found[pass_id] = (len(scored), cut)
    return manifest.run.plan.max_tokens, found


CSV_FIELDS = ("session", "status", "items", "recompute_reproduces", "hit_reproduces", "paths_differ", "cache_caused",
              "reason")


def write(run_dir: Path) -> ResetResults:
    """Compute the table and write results/reset_table.json and .csv into the run folder."""
    table = reset_table(run_dir)
    write_results(run_dir, table, "reset_table", "reset_table", CSV_FIELDS, [s.to_json() for s in table.sessions])
    return table
