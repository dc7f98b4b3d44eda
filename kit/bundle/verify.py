"""`kit verify`: check every checksum, recompute every result from the raw records, compare every number.

What is recomputed: each run's `results/` (its kind's results, kit.bundle.recompute) and its `analysis/`
(findings, tables, figure data, the comparison with the paper: kit.bundle.recompute_analysis), and an
imported run's records from the calls they came from (kit.bundle.imported); the verdict counts files and
values per kind. Every member of the bundle is in one class of kit.bundle.coverage: recomputed, pinned by
a digest a checked file holds, or not checked, with the reason (`Verdict.coverage`; the notes list the
not-checked ones).

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
    coverage,
    imported,
    reader_files,
    recompute,
    recompute_analysis,
    rendered,
    safe_tar,
)
from kit.analysis.findings_model import Findings
from kit.bundle.value_diff import Mismatch, compare_file
from kit.bundle.content import COMPUTED_FOLDERS, load_json, runs_in
from kit.bundle.coverage import NOT_CHECKED, PINNED, RECOMPUTED, Cover
from kit.bundle.errors import BadBundle
from kit.bundle.limits import DEFAULT, Limits
from kit.record.manifest import ManifestError, RunManifest, read
from kit.core.paths import RunPaths
from kit.protocols import kinds
from kit.record.provenance import backends_differ
from kit.core.terminal_text import one_line

RESULTS_FOLDER, ANALYSIS_FOLDER = COMPUTED_FOLDERS


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
class VerifiedRun:
    """What verifying one run recomputed, kept for a caller that reads on while the bundle is unpacked (kit
    atlas): the copy of its raw inputs, its results files recomputed from them (name within the run ->
    bytes), and the findings recomputed from its records alone where its analysis/findings.json was computed
    from this run only, with the settings that file records (`settings` also where the findings that name it
    are of several runs), and the notes verify made on its files."""

    copy: Path
    results: dict[str, bytes] = field(default_factory=dict)
    findings: Findings | None = None
    settings: Any = None
    notes: list[str] = field(default_factory=list)  # the verdict's notes on this run's files


@dataclass
class Verdict:
    """The outcome of `verify_bundle`: problems and mismatches make it fail; notes do not."""

    files_checked: int = 0
    results_compared: list[str] = field(default_factory=list)  # every recomputed file compared, all kinds
    values_compared: int = 0
    problems: list[Problem] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0  # record lines in the runs' records/ files
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [files, values] recomputed
    images: list[int] = field(default_factory=lambda: [0, 0])  # figure images without, with their data beside
    not_recomputed: list[str] = field(default_factory=list)  # computed files only their checksum vouches for
    covered: dict[str, Cover] = field(default_factory=dict)  # what the checks vouched for each member they read
    noted: set[str] = field(default_factory=set)  # members a note already names as not checked
    coverage: dict[str, Cover] = field(default_factory=dict)  # every member's one cover (kit.bundle.coverage)
    renderings: dict[str, bytes] = field(default_factory=dict)  # documents rendered here from recomputed data
    not_shown: list[str] = field(default_factory=list)  # documents that are not this kit's rendering
    runs: dict[str, VerifiedRun] = field(default_factory=dict, repr=False)  # run id -> what was recomputed
    manifests: dict[str, tuple[bytes, RunManifest]] = field(default_factory=dict, repr=False)  # run id -> as read

    @property
    def ok(self) -> bool:
        return not self.problems and not self.mismatches

    def named_files(self) -> set[str]:
        return {p.file for p in self.problems} | {m.file for m in self.mismatches}

    def cover(self, file: str, how: str, by: str, noted: bool = False) -> None:
        """Say what vouches for a member (kit.bundle.coverage); `noted`: a note already says it is not checked."""
        self.covered[file] = coverage.strongest(self.covered.get(file), Cover(how, by))
        if noted:
            self.noted.add(file)

    def compared(self, kind: str, file: str, values: int) -> None:
        """Count one recomputed file of `kind` compared, with the values compared in it."""
        tally = self.by_kind.setdefault(kind, [0, 0])
        tally[0] += 1
        tally[1] += values
        self.results_compared.append(file)
        self.values_compared += values

    def recomputed(self) -> tuple[str, list[str]]:
        """What was recomputed, in numbers (files and values per kind, from how many records), and what was
        not (figure images, files this kit could not recompute)."""
        kinds = [k for k in recompute_analysis.ARTIFACT_KINDS if k in self.by_kind]
        files = sum(self.by_kind[k][0] for k in kinds)
        parts = [f"{k}: {_count(self.by_kind[k][0], 'file')}, {self.by_kind[k][1]:,} values" for k in kinds]
        head = f"recomputed {_count(files, 'file')}, {self.values_compared:,} values from " \
               f"{_count(self.records, 'record')}" + (f" ({'; '.join(parts)})" if parts else "")
        without, with_data = self.images
        tail = []
        if with_data:
            tail.append(f"{_count(with_data, 'figure image')} checked by checksum only (images differ between "
                        "matplotlib versions; the data each draws is among the recomputed files)")
        if without:
            tail.append(f"{_count(without, 'figure image')} with no data beside {'it' if without == 1 else 'them'} "
                        "to recompute, checked by checksum only")
        if self.not_recomputed:
            tail.append(f"NOT recomputed: {len(self.not_recomputed)} (computed files, or values taken as the "
                        "bundle gives them; listed in the notes), checked by checksum only")
        if self.not_shown:
            tail.append(f"NOT shown: {_count(len(self.not_shown), 'document')} not what this kit renders "
                        f"({', '.join(self.not_shown[:3])}{', ...' if len(self.not_shown) > 3 else ''}; do not open "
                        "them; `kit show --report` renders the report from the verified data)")
        if self.coverage:
            held = coverage.counts(self.coverage)
            tail.append(f"of all {_count(len(self.coverage), 'file')}: {held[RECOMPUTED]:,} recomputed, "
                        f"{held[PINNED]:,} pinned by a checked file's digest, {held[NOT_CHECKED]:,} not checked "
                        "beyond the checksum list (the notes say why)")
        return head, tail

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED: {len(self.problems)} problems, {len(self.mismatches)} mismatches"
        head, tail = self.recomputed()
        return "; ".join([f"OK: {self.files_checked} files match their checksums", f"{head}: all equal", *tail])

    def lines(self) -> list[str]:
        """What `kit verify` prints, one line each, without terminal control characters."""
        out = [p.line() for p in self.problems] + [m.line() for m in self.mismatches]
        out += [f"note: {n}" for n in self.notes]
        return [one_line(line) for line in out + [self.summary()]]


def _count(number: int, what: str) -> str:
    return f"{number:,} {what}{'' if number == 1 else 's'}"


def schema_version(schema: Any) -> int | None:
    if isinstance(schema, str) and schema.startswith("kit.bundle/"):
        tail = schema.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    return None


def check_schema(index_bytes: bytes | None, trusted: bool, verdict: Verdict) -> dict[str, Any] | None:
    """A bundle from a newer kit stops here with a clear message; an unreadable index is a problem. The
    index parsed (None: missing, unreadable or not an object), for the checks after this one."""
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
    return index if isinstance(index, dict) else None


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


def load_manifest(bundle: safe_tar.Unpacked, run_id: str, names: list[str], verdict: Verdict) -> RunManifest | None:
    """The run's manifest when it can drive recomputation: a kit manifest (kit.record.manifest.read, which
    also holds each record file it names to the files of this run's records/ folder in the bundle) naming
    this run. Otherwise a problem and None. The one parse of it: every check after this one reads the model."""
    file = f"{RUNS}/{run_id}/{RunPaths.MANIFEST}"
    raw = bundle.read(file)
    if raw is None:
        verdict.problems.append(Problem(file, "missing"))
        return None
    try:
        manifest = read(raw, file, bundle.folder / RUNS / run_id, held=set(names))
    except ManifestError as exc:
        verdict.problems.append(Problem(exc.origin, exc.what))
        return None
    if manifest.run_id != run_id:
        verdict.problems.append(Problem(file, f"its run_id {manifest.run_id!r} is not the name of its folder "
                                        f"{run_id!r} (`kit bundle` names each run folder after its run_id)"))
        return None
    verdict.manifests[run_id] = (raw, manifest)
    return manifest


def check_protocol(bundle: safe_tar.Unpacked, run_id: str, manifest: RunManifest, names: list[str],
                   verdict: Verdict) -> None:
    expected = manifest.protocol.sha256
    found = [name for name in names if name.startswith("protocol/")]
    if found and not expected:
        verdict.cover(f"{RUNS}/{run_id}/{found[0]}", NOT_CHECKED, "a protocol file whose manifest records no "
                      "protocol.sha256")
    if not (expected and found):
        return
    file = f"{RUNS}/{run_id}/{found[0]}"
    text = bundle.read(file) or b""
    if expected not in (checksums.sha256(text), checksums.sha256(text.replace(b"\n", b"\r\n"))):
        verdict.problems.append(Problem(file, "differs from the protocol sha256 in the manifest"))
    else:
        verdict.cover(file, PINNED, f"its sha256 is protocol.sha256 in {RUNS}/{run_id}/{RunPaths.MANIFEST}")


def check_results(bundle: safe_tar.Unpacked, run_id: str, manifest: RunManifest, names: list[str],
                  verdict: Verdict) -> Path | None:
    """Recompute the run's results/ from a copy holding only its raw inputs and compare them; the copy
    (which analysis recomputes from) or None when the run's kind is not one this kit knows."""
    prefix = f"{RUNS}/{run_id}/"
    kind = manifest.protocol.kind
    if kind not in kinds.KINDS:
        verdict.problems.append(Problem(prefix + RunPaths.MANIFEST, f"protocol kind {kind!r} cannot be "
                                        "recomputed by this kit (upgrade the kit, or install the package that "
                                        "registers the kind: its pyproject's kit.kinds entry point)"))
        return None
    copy = recompute.raw_copy(bundle.folder / RUNS / run_id, bundle.scratch, run_id)
    verdict.runs[run_id] = kept = VerifiedRun(copy)
    verdict.records += recompute.count_records(copy)
    try:
        fresh = recompute.recompute(copy, manifest)
    except Exception as exc:  # noqa: BLE001 - any failure to recompute is reported against the run
        verdict.problems.append(Problem(f"{prefix}{RunPaths.RECORDS}/",
                                        f"recomputing failed: {type(exc).__name__}: {exc}"))
        return copy
    kept.results = {name: data for name, data in fresh.items() if name.startswith(RESULTS_FOLDER)}
    bundled = [name for name in names if name.startswith(RESULTS_FOLDER)]
    made = sorted(n for n in fresh if n.startswith(RESULTS_FOLDER))
    if not bundled and made:  # a run stopped before it wrote them (killed; a watch run of an earlier kit)
        verdict.notes.append(f"{prefix}{RESULTS_FOLDER} is not in the bundle: the run (status "
                             f"{manifest.status!r}) ended before it wrote its results; the {len(made)} "
                             "results files recomputed from its records have nothing to be compared with")
        return copy
    for name in sorted(set(bundled) | {n for n in fresh if n.startswith(RESULTS_FOLDER)}):
        file = prefix + name
        if name not in fresh:
            verdict.notes.append(f"{file} is not recomputed by this kit; only its checksum was checked")
            verdict.not_recomputed.append(file)
            verdict.cover(file, NOT_CHECKED, "a results file this kit does not recompute", noted=True)
        elif name not in bundled:
            verdict.mismatches.append(Mismatch(file, "", "<absent>", "<recomputed>"))
        else:
            data = bundle.read(file) or b""
            found = compare_file(file, data, fresh[name])
            verdict.mismatches.extend(found)
            verdict.compared(recompute_analysis.RESULTS, file, _leaves(data, name) if not found else 0)
            verdict.cover(file, RECOMPUTED, f"from the records of {run_id}")
    return copy


def check_analysis(bundle: safe_tar.Unpacked, run_id: str, names: list[str], copies: dict[str, Path],
                   cache: dict, verdict: Verdict) -> None:
    """Recompute the run's analysis/ (findings, tables, figure data, comparison with the paper) from the raw
    copies of the runs its findings name, and compare each file by its rule (kit.bundle.recompute_analysis);
    every file that cannot be recomputed is a note, counted in the summary as checked by checksum only."""
    prefix = f"{RUNS}/{run_id}/"
    held = {name: bundle.read(prefix + name) or b"" for name in names if name.startswith(ANALYSIS_FOLDER)}
    if not held:
        return
    try:
        fresh = recompute_analysis.recompute(held, copies, cache)
    except Exception as exc:  # noqa: BLE001 - any failure to recompute is reported against the findings
        verdict.problems.append(Problem(prefix + recompute_analysis.FINDINGS,
                                        f"recomputing the analysis failed: {type(exc).__name__}: {exc}"))
        return
    keep_findings(fresh, verdict)
    for why in fresh.carried:
        verdict.notes.append(f"{prefix}{ANALYSIS_FOLDER}: {why} is NOT recomputed on this machine; the bundled "
                             "values stand in the recomputed findings")
        verdict.not_recomputed.append(f"{prefix}{recompute_analysis.FINDINGS}: {why}")
    by_rule: dict[str, list[str]] = {}
    unchecked: dict[str, list[str]] = {}  # why not recomputed -> files
    for name, data in sorted(held.items()):
        file = prefix + name
        if name in fresh.not_recomputed:
            unchecked.setdefault(fresh.not_recomputed[name], []).append(name)
            verdict.not_recomputed.append(file)
            verdict.cover(file, NOT_CHECKED, f"not recomputed ({fresh.not_recomputed[name]})", noted=True)
        elif recompute_analysis.is_image(name):
            with_data = f"{name.rsplit('.', 1)[0]}.json" in held  # compared (or said not recomputed) on its own
            verdict.images[with_data] += 1
            if not with_data:
                by_rule.setdefault(NO_FIGURE_DATA, []).append(name)
            verdict.cover(file, NOT_CHECKED, "a figure image (images differ between matplotlib versions)"
                          + ("; the data it draws is checked beside it" if with_data else ""), noted=True)
        elif name not in fresh.files:
            verdict.notes.append(f"{file} is not recomputed by this kit; only its checksum was checked")
            verdict.not_recomputed.append(file)
            verdict.cover(file, NOT_CHECKED, "an analysis file this kit does not recompute", noted=True)
        else:
            if reader_files.is_document(name):
                verdict.renderings[file] = fresh.files[name].data
            outcome = recompute_analysis.compare(file, name, data, fresh.files[name])
            verdict.mismatches.extend(outcome.mismatches)
            if outcome.rule != rendered.EXACT and not outcome.mismatches:
                by_rule.setdefault(outcome.rule, []).append(name)
            verdict.compared(fresh.files[name].kind, file, outcome.values if not outcome.mismatches else 0)
            verdict.cover(file, RECOMPUTED, "from the records of the runs its findings name")
    for why, names_ in unchecked.items():
        verdict.notes.append(f"{prefix}{ANALYSIS_FOLDER}: {_count(len(names_), 'file')} NOT recomputed ({why}); only "
                             "their checksums were checked: " + ", ".join(n[len(ANALYSIS_FOLDER):] for n in names_))
    for rule, names_ in by_rule.items():
        verdict.notes.append(f"{prefix}{ANALYSIS_FOLDER}: {_count(len(names_), 'file')} {RULE_NOTES[rule]}: "
                             + ", ".join(n[len(ANALYSIS_FOLDER):] for n in names_))


def keep_findings(fresh: recompute_analysis.Recomputed, verdict: Verdict) -> None:
    """Keep recomputed findings with the runs they were computed from (VerifiedRun)."""
    if fresh.findings is None:
        return
    for run_id in fresh.runs:
        if run_id in verdict.runs:
            verdict.runs[run_id].settings = verdict.runs[run_id].settings or fresh.settings
    alone = verdict.runs.get(fresh.runs[0]) if len(fresh.runs) == 1 else None
    if alone is not None and alone.findings is None:
        alone.findings, alone.settings = fresh.findings, fresh.settings


NO_FIGURE_DATA = "no figure data"
RULE_NOTES = {
    rendered.IN_ORDER: "worded otherwise than this kit writes them (another kit version); every number in them, in "
                       "order, and every word of their rows are the recomputed ones (captions and notes were not "
                       "compared word for word)",
    rendered.FOUND: "in an older layout of their table (kit.analysis.tables.RELAID); each number in them is one of "
                    "the recomputed values of that table, each word of their rows one of its words (their order and "
                    "captions were not compared)",
    NO_FIGURE_DATA: "are figure images with no data beside them (written by a kit that kept none), so what they "
                    "draw is not recomputed; only their checksums were checked",
}


def _leaves(data: bytes, name: str) -> int:
    if not name.endswith(".json"):
        return len(data.decode("utf-8", "replace").replace("\n", ",").split(","))
    return sum(1 for _ in rendered.leaves(load_json(data)))


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
        if inner.startswith(f"{RunPaths.RECORDS}/"):
            return limits.file_bytes if records else None
        if inner == RunPaths.MANIFEST or inner.startswith(("protocol/", *COMPUTED_FOLDERS)):
            return limits.read_whole_bytes
        return None
    return cap


def check(bundle: safe_tar.Unpacked) -> Verdict:
    """Every check on a bundle already streamed and unpacked by safe_tar.unpack."""
    verdict = Verdict()
    check_checksums(bundle, verdict)
    index_ok = INDEX in bundle.listing.files and not any(p.file in (INDEX, CHECKSUMS) for p in verdict.problems)
    index = check_schema(bundle.read(INDEX), index_ok, verdict)
    runs = runs_in(bundle.listing.files)
    for run_id, names in runs.items():
        manifest = load_manifest(bundle, run_id, names, verdict)
        if manifest is not None:
            check_protocol(bundle, run_id, manifest, names, verdict)
            if imported_kind(manifest):
                check_imported(bundle, run_id, manifest, verdict)
            check_results(bundle, run_id, manifest, names, verdict)
    copies = {run_id: kept.copy for run_id, kept in verdict.runs.items()}
    cache: dict = {}
    for run_id, names in runs.items():
        if run_id in copies:
            check_analysis(bundle, run_id, names, copies, cache, verdict)
    differ = backends_differ([manifest for _, manifest in verdict.manifests.values()])
    if differ:
        verdict.notes.append(differ)
    shown = reader_files.check(reader_files.held_files(bundle), bundle.listing.files, bundle.listing.root,
                               verdict.ok, verdict.renderings, index, verdict.manifests)
    verdict.problems.extend(Problem(file, what) for file, what in shown.problems)
    verdict.notes.extend(shown.notes)
    verdict.not_shown = shown.not_shown
    cover_reader_files(shown, verdict)
    verdict.coverage = coverage.classify(bundle.listing.files, verdict.covered)
    verdict.notes.extend(coverage.notes(verdict.coverage, verdict.noted))
    for run_id, kept in verdict.runs.items():
        kept.notes = [note for note in verdict.notes if note.startswith(f"{RUNS}/{run_id}/")]
    return verdict


def imported_kind(manifest: RunManifest) -> bool:
    """Whether the run is of a kind whose run folders are imported (`Kind.imported_from`: `harness`), which
    keep the files they were imported from."""
    kind = manifest.protocol.kind
    return kind is not None and kind in kinds.KINDS and kinds.KINDS[kind].imported_from is not None


def check_imported(bundle: safe_tar.Unpacked, run_id: str, manifest: RunManifest, verdict: Verdict) -> None:
    """An imported run's kept files against its manifest, and its records made again from them."""
    found = imported.check(bundle.folder / RUNS / run_id, f"{RUNS}/{run_id}/", manifest,
                           imported.digests_of(bundle.listing.files, run_id), bundle.scratch)
    verdict.problems.extend(Problem(file, what) for file, what in found.problems)
    verdict.mismatches.extend(found.mismatches)
    for file, cover in found.covers.items():
        verdict.cover(file, cover.how, cover.by)


def cover_reader_files(shown: reader_files.Shown, verdict: Verdict) -> None:
    """The report and README are recomputed when they are exactly what this kit renders from the verified
    files; otherwise a note of reader_files already says why not."""
    for name in (REPORT, README):
        if name in shown.equal:
            verdict.cover(name, RECOMPUTED, "rendered again from the verified files, byte for byte")
        else:
            verdict.noted.add(name)


def verify_bundle(path: Path, limits: Limits | None = None) -> Verdict:
    """Check a bundle end to end. Raises BadBundle (UnsafeBundle, NewerBundle) when it cannot be read."""
    limits = limits or DEFAULT
    with safe_tar.unpack(path, keep(limits), limits) as bundle:
        return check(bundle)
