"""What vouches for each member of a bundle, beyond the checksum list (which guards against damage, not
against someone who rewrites the list too): every member is in exactly one of three classes.

- `RECOMPUTED`: this kit made the file again from other members and compared it (results, analysis,
  the records of an imported run made again from the calls they came from, the report and README);
- `PINNED`: its sha256 (or its whole content) is held in a member that is itself checked or recomputed,
  and matched it (the protocol file by the manifest's `protocol.sha256`, an imported file by the
  manifest's `imported`);
- `NOT_CHECKED`: nothing but the checksum list vouches for it, and `by` says why (the raw records and
  manifest everything else is recomputed from, logs, figure images, a file the kit does not write ...).

`kit verify` marks members as its checks go (`Verdict.cover`); `classify` gives every other member its
class by where it is, and `notes` words the `NOT_CHECKED` ones for verify's report. A member of a bundle
this kit writes that no check marks and no place explains is `UNKNOWN` (a test holds the kit to none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kit.bundle import CHECKSUMS, CRATE, INDEX, README, REPORT, RUNS
from kit.core.paths import RunPaths

RECOMPUTED, PINNED, NOT_CHECKED = "recomputed", "pinned", "not checked"
STRENGTH = {NOT_CHECKED: 0, PINNED: 1, RECOMPUTED: 2}

RAW = "raw input, the records and manifests the rest is recomputed from"
UNKNOWN = "a file the kit does not write, which nothing checks"
LOGS = "logs, kept for a person to read"
SUPERSEDED = "records of a pass run again, kept and never counted"
FIGURES = "figures the kit drew of the run's results (image bytes differ between matplotlib versions; the results " \
          "they draw are recomputed)"
REPLAY = "the comparison `kit replay` wrote with the run it replayed, which the bundle does not hold"
RUN_FOLDERS = {f"{RunPaths.SUPERSEDED}/": SUPERSEDED, f"{RunPaths.LOGS}/": LOGS, f"{RunPaths.REPLAY}/": REPLAY,
               "figures/": FIGURES}  # written by the kit; nothing recomputes them
# the bundle-level files no check reads, and why
BUNDLE_FILES = {
    CHECKSUMS: "the checksum list itself (its seal guards against damage, not a rewrite: that needs a signature)",
    INDEX: "the index (when, by which kit, what was redacted or left out; only its schema is read)",
    CRATE: "RO-Crate metadata for research tools (the kit does not read it)",
    README: "not compared with what this kit renders (the note on it says why)",
    REPORT: "not compared with what this kit renders (the note on it says why)",
}


@dataclass(frozen=True)
class Cover:
    """How one member is vouched for: its class and by what (recomputed from, pinned by, or why not checked)."""

    how: str  # RECOMPUTED, PINNED or NOT_CHECKED
    by: str


def strongest(held: Cover | None, new: Cover) -> Cover:
    """Of two covers of one member, the stronger (a recomputed file is not demoted by a note)."""
    return new if held is None or STRENGTH[new.how] > STRENGTH[held.how] else held


def by_place(name: str) -> Cover:
    """The cover of a member no check marked, by where it is in the bundle."""
    if name in BUNDLE_FILES:
        return Cover(NOT_CHECKED, BUNDLE_FILES[name])
    parts = name.split("/", 2)
    if len(parts) == 3 and parts[0] == RUNS:
        inner = parts[2]
        if inner == RunPaths.MANIFEST or (inner.startswith(f"{RunPaths.RECORDS}/") and "/" not in
                                          inner[len(RunPaths.RECORDS) + 1:]):
            return Cover(NOT_CHECKED, RAW)
        for folder, why in RUN_FOLDERS.items():
            if inner.startswith(folder):
                return Cover(NOT_CHECKED, why)
    return Cover(NOT_CHECKED, UNKNOWN)


def classify(members: Iterable[str], marked: dict[str, Cover]) -> dict[str, Cover]:
    """Every member's one cover: the one verify's checks marked, else the one its place gives."""
    return {name: marked.get(name) or by_place(name) for name in sorted(members)}


def notes(covers: dict[str, Cover], noted: set[str], shown: int = 3) -> list[str]:
    """The members not checked that no other note names, grouped by reason, in one line (a file the kit does
    not write in a line of its own, first): each reason, how many, and the first few."""
    reasons: dict[str, list[str]] = {}
    for name, cover in covers.items():
        if cover.how == NOT_CHECKED and name not in noted:
            reasons.setdefault(cover.by, []).append(name)
    unknown = reasons.pop(UNKNOWN, [])
    out = [f"NOT CHECKED: {_listed(unknown, shown)}: {UNKNOWN}"] if unknown else []
    if reasons:
        out.append("not checked beyond the checksum list: " + "; ".join(
            f"{why}: {_listed(names, shown)}" for why, names in sorted(reasons.items(), key=lambda r: -len(r[1]))))
    return out


def _listed(names: list[str], shown: int) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def counts(covers: dict[str, Cover]) -> dict[str, int]:
    """How many members are in each class."""
    out = dict.fromkeys(STRENGTH, 0)
    for cover in covers.values():
        out[cover.how] += 1
    return out
