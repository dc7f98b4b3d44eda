"""`kit verify`: check every checksum, recompute every result from the raw records, compare every number.

The bundle is read once, as a stream (kit.bundle.safe_tar): every member is checked before its data
is used, every file is hashed in chunks, and only what recomputation and comparison need (manifests,
records, protocols, results, the index and checksum list) is unpacked, into a temporary folder that
is removed afterwards. Every line printed is stripped of terminal control characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.bundle import (
    CHECKSUMS,
    INDEX,
    README,
    REPORT,
    RUNS,
    SCHEMA,
    SCHEMA_VERSION,
    checksums,
    reader_files,
    recompute,
    safe_tar,
)
from kit.bundle.compare import Mismatch, compare_file
from kit.bundle.content import COMPUTED_FOLDERS, load_json, runs_in
from kit.bundle.errors import BadBundle
from kit.bundle.limits import DEFAULT, Limits
from kit.protocols import kinds
from kit.provenance import backends_differ
from kit.terminal_text import one_line

RECORD_KEYS = ("file", "episodes_file")  # where a manifest's passes name their record files


class NewerBundle(BadBundle):
    """The bundle was written by a newer kit whose layout this kit does not know."""


@dataclass(frozen=True)
class Problem:
    """Something wrong with one file of the bundle."""

    file: str
    what: str

    def line(self) -> str:
        return f"FAIL {self.file}: {self.what}"


@dataclass
class Verdict:
    """The outcome of `verify_bundle`: problems and mismatches make it fail; notes do not."""

    files_checked: int = 0
    results_compared: list[str] = field(default_factory=list)
    values_compared: int = 0
    problems: list[Problem] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.mismatches

    def named_files(self) -> set[str]:
        return {p.file for p in self.problems} | {m.file for m in self.mismatches}

    def summary(self) -> str:
        if self.ok:
            return (f"OK: {self.files_checked} files match their checksums; {len(self.results_compared)} "
                    f"results files recomputed from the raw records, {self.values_compared} values equal")
        return f"FAILED: {len(self.problems)} problems, {len(self.mismatches)} mismatches"

    def lines(self) -> list[str]:
        """What `kit verify` prints, one line each, without terminal control characters."""
        out = [p.line() for p in self.problems] + [m.line() for m in self.mismatches]
        out += [f"note: {n}" for n in self.notes]
        return [one_line(line) for line in out + [self.summary()]]


def schema_version(schema: Any) -> int | None:
    if isinstance(schema, str) and schema.startswith("kit.bundle/"):
        tail = schema.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    return None


def check_schema(index_bytes: bytes | None, trusted: bool, verdict: Verdict) -> None:
    """A bundle from a newer kit stops here with a clear message; an unreadable index is a problem."""
    try:
        index = load_json(index_bytes) if index_bytes is not None else None
    except ValueError:
        index = None
    schema = index.get("schema") if isinstance(index, dict) else None
    version = schema_version(schema)
    if trusted and version is not None and version > SCHEMA_VERSION:
        raise NewerBundle(f"this bundle was written by a newer kit (schema {schema}; this kit reads {SCHEMA})",
                          "upgrade the kit (pip install -U cache-divergence-kit) and verify again")
    if version != SCHEMA_VERSION:
        verdict.problems.append(Problem(INDEX, f"missing, unreadable or unknown schema {schema!r}"))


def check_checksums(bundle: safe_tar.Unpacked, verdict: Verdict) -> None:
    """The checksum list against the sha256 of each file, taken while the bundle was streamed."""
    present = bundle.listing.files
    data = bundle.read(CHECKSUMS)
    if data is None:
        verdict.problems.append(Problem(CHECKSUMS, "missing; nothing can be checked"))
        return
    sums = checksums.parse(data)
    if not sums.sealed:
        verdict.problems.append(Problem(CHECKSUMS, "the checksum list itself was altered (its seal does not match)"))
    for number in sums.bad_lines:
        verdict.problems.append(Problem(CHECKSUMS, f"line {number} is not `sha256  path`"))
    for name, digest in sorted(sums.digests.items()):
        if name not in present:
            verdict.problems.append(Problem(name, "listed in the checksums but missing"))
        elif present[name].sha256 != digest:
            verdict.problems.append(Problem(name, "content differs from its checksum"))
        else:
            verdict.files_checked += 1
    for name in sorted(set(present) - set(sums.digests) - {CHECKSUMS}):
        verdict.problems.append(Problem(name, "not in the checksum list"))


def load_manifest(bundle: safe_tar.Unpacked, run_id: str, names: list[str], verdict: Verdict) -> dict | None:
    """The run's manifest when it can drive recomputation: a kit manifest naming this run, whose record
    files are files of this run's records/ folder in the bundle. Otherwise a problem and None."""
    file = f"{RUNS}/{run_id}/manifest.json"
    try:
        manifest = load_json(bundle.read(file) or b"")
    except ValueError:
        verdict.problems.append(Problem(file, "missing or not valid JSON"))
        return None
    passes = manifest.get("passes", {}) if isinstance(manifest, dict) else None
    if not (isinstance(passes, dict) and all(isinstance(p, dict) for p in passes.values())
            and isinstance(manifest.get("protocol", {}), dict)):
        verdict.problems.append(Problem(file, "is not laid out as a kit manifest (an object with `protocol` and "
                                        "`passes` objects)"))
        return None
    if manifest.get("run_id") != run_id:
        verdict.problems.append(Problem(file, f"its run_id {manifest.get('run_id')!r} is not the name of its folder "
                                        f"{run_id!r} (`kit bundle` names each run folder after its run_id)"))
        return None
    held = set(names)
    for pass_id, info in sorted(passes.items()):
        for key in RECORD_KEYS:
            ref = info.get(key)
            if ref is not None and not (isinstance(ref, str) and ref.startswith("records/") and ref in held):
                verdict.problems.append(Problem(file, f"passes.{pass_id}.{key} is {ref!r}, not a file of this "
                                                "run's records/ folder in the bundle"))
                return None
    return manifest


def check_protocol(bundle: safe_tar.Unpacked, run_id: str, manifest: dict, names: list[str],
                   verdict: Verdict) -> None:
    expected = manifest.get("protocol", {}).get("sha256")
    found = [name for name in names if name.startswith("protocol/")]
    if not (expected and found):
        return
    file = f"{RUNS}/{run_id}/{found[0]}"
    text = bundle.read(file) or b""
    if expected not in (checksums.sha256(text), checksums.sha256(text.replace(b"\n", b"\r\n"))):
        verdict.problems.append(Problem(file, "differs from the protocol sha256 in the manifest"))


def check_results(bundle: safe_tar.Unpacked, run_id: str, manifest: dict, names: list[str],
                  verdict: Verdict) -> None:
    """Recompute the run's results from a copy holding only its raw inputs and compare them."""
    prefix = f"{RUNS}/{run_id}/"
    kind = manifest.get("protocol", {}).get("kind")
    if not isinstance(kind, str) or kind not in kinds.KINDS:
        verdict.problems.append(Problem(prefix + "manifest.json", f"protocol kind {kind!r} cannot be "
                                        "recomputed by this kit (upgrade the kit)"))
        return
    copy = recompute.raw_copy(bundle.folder / RUNS / run_id, bundle.scratch, run_id)
    try:
        fresh = recompute.recompute(copy)
    except Exception as exc:  # noqa: BLE001 - any failure to recompute is reported against the run
        verdict.problems.append(Problem(prefix + "records/", f"recomputing failed: {type(exc).__name__}: {exc}"))
        return
    bundled = [name for name in names if name.startswith(COMPUTED_FOLDERS)]
    for name in sorted(set(bundled) | set(fresh)):
        file = prefix + name
        if name not in fresh:
            verdict.notes.append(f"{file} is not recomputed by this kit; only its checksum was checked")
        elif name not in bundled:
            verdict.mismatches.append(Mismatch(file, "", "<absent>", "<recomputed>"))
        else:
            data = bundle.read(file) or b""
            found = compare_file(file, data, fresh[name])
            verdict.mismatches.extend(found)
            verdict.results_compared.append(file)
            verdict.values_compared += _leaves(data, name) if not found else 0


def _leaves(data: bytes, name: str) -> int:
    if not name.endswith(".json"):
        return len(data.decode("utf-8", "replace").replace("\n", ",").split(","))
    stack, count = [load_json(data)], 0
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        else:
            count += 1
    return count


def keep(limits: Limits, records: bool = True):
    """Which files to unpack, and up to how many bytes: records (streamed) when asked for, and the files
    the kit parses whole (index, checksum list, manifests, protocols, results and analysis)."""
    def cap(rel: str) -> int | None:
        if rel in (INDEX, CHECKSUMS, REPORT, README):
            return limits.read_whole_bytes
        parts = rel.split("/", 2)
        if len(parts) < 3 or parts[0] != RUNS:
            return None
        inner = parts[2]
        if inner.startswith("records/"):
            return limits.file_bytes if records else None
        if inner == "manifest.json" or inner.startswith(("protocol/", *COMPUTED_FOLDERS)):
            return limits.read_whole_bytes
        return None
    return cap


def check(bundle: safe_tar.Unpacked) -> Verdict:
    """Every check on a bundle already streamed and unpacked by safe_tar.unpack."""
    verdict = Verdict()
    check_checksums(bundle, verdict)
    index_ok = INDEX in bundle.listing.files and not any(p.file in (INDEX, CHECKSUMS) for p in verdict.problems)
    check_schema(bundle.read(INDEX), index_ok, verdict)
    manifests = []
    for run_id, names in runs_in(bundle.listing.files).items():
        manifest = load_manifest(bundle, run_id, names, verdict)
        if manifest is not None:
            manifests.append(manifest)
            check_protocol(bundle, run_id, manifest, names, verdict)
            check_results(bundle, run_id, manifest, names, verdict)
    differ = backends_differ(manifests)
    if differ:
        verdict.notes.append(differ)
    problems, notes = reader_files.check(reader_files.held_files(bundle), bundle.listing.root, verdict.ok)
    verdict.problems.extend(Problem(file, what) for file, what in problems)
    verdict.notes.extend(notes)
    return verdict


def verify_bundle(path: Path, limits: Limits | None = None) -> Verdict:
    """Check a bundle end to end. Raises BadBundle (UnsafeBundle, NewerBundle) when it cannot be read."""
    limits = limits or DEFAULT
    with safe_tar.unpack(path, keep(limits), limits) as bundle:
        return check(bundle)
