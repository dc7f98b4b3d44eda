"""`kit verify`: check every checksum, recompute every result from the raw records, compare every number.

Everything happens in a temporary folder; the bundle is unpacked only after every member has been
checked (kit.bundle.safe_tar).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.bundle import (
    CHECKSUMS,
    INDEX,
    SCHEMA,
    SCHEMA_VERSION,
    checksums,
    recompute,
    safe_tar,
)
from kit.bundle.compare import Mismatch, compare_file
from kit.bundle.content import BundledRun, runs_from_files
from kit.errors import KitError
from kit.models.hashing import sha256_file
from kit.protocols import kinds
from kit.provenance import backends_differ


class NewerBundle(KitError):
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

    def lines(self) -> list[str]:
        out = [p.line() for p in self.problems] + [m.line() for m in self.mismatches]
        out += [f"note: {n}" for n in self.notes]
        if self.ok:
            out.append(f"OK: {self.files_checked} files match their checksums; {len(self.results_compared)} "
                       f"results files recomputed from the raw records, {self.values_compared} values equal")
        else:
            out.append(f"FAILED: {len(self.problems)} problems, {len(self.mismatches)} mismatches")
        return out


def schema_version(schema: Any) -> int | None:
    if isinstance(schema, str) and schema.startswith("kit.bundle/"):
        tail = schema.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    return None


def check_schema(index_bytes: bytes | None, trusted: bool, verdict: Verdict) -> None:
    """A bundle from a newer kit stops here with a clear message; an unreadable index is a problem."""
    try:
        index = json.loads(index_bytes) if index_bytes is not None else None
    except ValueError:
        index = None
    schema = index.get("schema") if isinstance(index, dict) else None
    version = schema_version(schema)
    if trusted and version is not None and version > SCHEMA_VERSION:
        raise NewerBundle(f"this bundle was written by a newer kit (schema {schema}; this kit reads {SCHEMA})",
                          "upgrade the kit (pip install -U cache-divergence-kit) and verify again")
    if version != SCHEMA_VERSION:
        verdict.problems.append(Problem(INDEX, f"missing, unreadable or unknown schema {schema!r}"))


def check_checksums(root: Path, files: list[str], verdict: Verdict) -> None:
    """Each file hashed from disk, so records of any size are never held in memory."""
    if CHECKSUMS not in files:
        verdict.problems.append(Problem(CHECKSUMS, "missing; nothing can be checked"))
        return
    sums = checksums.parse((root / CHECKSUMS).read_bytes())
    present = set(files)
    if not sums.sealed:
        verdict.problems.append(Problem(CHECKSUMS, "the checksum list itself was altered (its seal does not match)"))
    for number in sums.bad_lines:
        verdict.problems.append(Problem(CHECKSUMS, f"line {number} is not `sha256  path`"))
    for name, digest in sorted(sums.digests.items()):
        if name not in present:
            verdict.problems.append(Problem(name, "listed in the checksums but missing"))
        elif sha256_file(root / name) != digest:
            verdict.problems.append(Problem(name, "content differs from its checksum"))
        else:
            verdict.files_checked += 1
    for name in sorted(present - set(sums.digests) - {CHECKSUMS}):
        verdict.problems.append(Problem(name, "not in the checksum list"))


def check_protocol(run: BundledRun, verdict: Verdict) -> None:
    expected = run.manifest.get("protocol", {}).get("sha256")
    found = [name for name in run.files if name.startswith("protocol/")]
    if not (expected and found):
        return
    text = run.files[found[0]]
    if expected not in (checksums.sha256(text), checksums.sha256(text.replace(b"\n", b"\r\n"))):
        verdict.problems.append(Problem(run.prefix + found[0], "differs from the protocol sha256 in the manifest"))


def check_results(run: BundledRun, run_dir: Path, work: Path, verdict: Verdict) -> None:
    """Recompute the run's results from a copy holding only its raw inputs and compare them."""
    kind = run.manifest.get("protocol", {}).get("kind")
    if kind not in kinds.KINDS:
        verdict.problems.append(Problem(run.prefix + "manifest.json", f"protocol kind {kind!r} cannot be "
                                        "recomputed by this kit (upgrade the kit)"))
        return
    copy = recompute.raw_copy(run_dir, work)
    try:
        fresh = recompute.recompute(copy)
    except Exception as exc:  # noqa: BLE001 - any failure to recompute is reported against the run
        verdict.problems.append(Problem(run.prefix + "records/", f"recomputing failed: {type(exc).__name__}: {exc}"))
        return
    bundled = run.computed()
    for name in sorted(set(bundled) | set(fresh)):
        file = run.prefix + name
        if name not in fresh:
            verdict.notes.append(f"{file} is not recomputed by this kit; only its checksum was checked")
        elif name not in bundled:
            verdict.mismatches.append(Mismatch(file, "", "<absent>", "<recomputed>"))
        else:
            found = compare_file(file, bundled[name], fresh[name])
            verdict.mismatches.extend(found)
            verdict.results_compared.append(file)
            verdict.values_compared += _leaves(bundled[name], name) if not found else 0


def _leaves(data: bytes, name: str) -> int:
    if not name.endswith(".json"):
        return len(data.decode("utf-8", "replace").replace("\n", ",").split(","))
    def count(value: Any) -> int:
        if isinstance(value, dict):
            return sum(count(v) for v in value.values())
        if isinstance(value, list):
            return sum(count(v) for v in value)
        return 1
    return count(json.loads(data))


def _small_files(root: Path, names: list[str]) -> dict[str, bytes]:
    """The files verify reads whole: everything but records and logs (which only the steps read)."""
    return {n: (root / n).read_bytes() for n in names if n.split("/")[2:3] not in (["records"], ["logs"])}


def verify_bundle(path: Path) -> Verdict:
    """Check a bundle end to end. Raises UnsafeBundle / NewerBundle / KitError when it cannot be read."""
    verdict = Verdict()
    with tempfile.TemporaryDirectory(prefix="kit-verify-") as tmp:
        root = safe_tar.extract(path, Path(tmp) / "bundle")
        names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        check_checksums(root, names, verdict)
        files = _small_files(root, names)
        index_ok = INDEX in files and not any(p.file == INDEX for p in verdict.problems) \
            and not any(p.file == CHECKSUMS for p in verdict.problems)
        check_schema(files.get(INDEX), index_ok, verdict)
        work = Path(tmp) / "recompute"
        runs = runs_from_files(files)
        for run in runs:
            check_protocol(run, verdict)
            check_results(run, root / run.prefix, work, verdict)
        differ = backends_differ([run.manifest for run in runs])
        if differ:
            verdict.notes.append(differ)
    return verdict
