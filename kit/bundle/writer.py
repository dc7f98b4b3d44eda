"""Writing a bundle: run folders in, one sealed `.tar.gz` out, with no secret in it.

Files are read, scrubbed and written to the archive one at a time; only the small ones (manifest,
protocol, results, analysis) stay in memory for the report, README and RO-Crate metadata. The bytes
written are exactly those of kit.bundle.archive_format, the only layout `kit verify` accepts. Each
run goes under `runs/<run_id>/`, its id taken from its manifest, so a run folder that was copied or
renamed bundles and verifies as the run it is.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from kit.core.atomic_file import STAGING_SUFFIX, publish, staging_path
from kit.bundle import (
    CHECKSUMS,
    CRATE,
    INDEX,
    README,
    REPORT,
    SCHEMA,
    checksums,
    crate,
    readme,
    report,
)
from kit.bundle import archive_format as fmt
from kit.bundle.content import BundledRun
from kit.bundle.limits import DEFAULT as LIMITS
from kit.bundle.safe_tar import name_problem
from kit.bundle.scrub import Redaction, is_env_dump, scrub, secret_values
from kit.core.errors import ConfigError, KitError
from kit.record.manifest import Manifest, RunManifest, now
from kit.core.paths import RunPaths, shown_path
from kit.record.provenance import kit_source
from kit.record.files import require_whole
from kit.run.lock import LOCK

SUFFIX = ".tar.gz"
NOT_HELD = (f"{RunPaths.RECORDS}/", f"{RunPaths.LOGS}/")
MAX_FOLDER_NAME = 200


@dataclass
class BundleResult:
    """What `write_bundle` did: the file, what went in, what was redacted and what was left out (and why)."""

    path: Path
    files: list[str]
    redactions: list[Redaction] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # "run_id (status ...: reason)", packed by allow_unfinished


def bundle_name(out: Path) -> str:
    name = out.name
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else out.stem


def default_path(run_dirs: list[Path]) -> Path:
    """Where a bundle goes when no -o is given: `bundles/` beside the (first) run folder."""
    first = run_dirs[0]
    stem = first.name if len(run_dirs) == 1 else f"{first.name}-and-{len(run_dirs) - 1}-more"
    return first.parent / "bundles" / f"{stem}{SUFFIX}"


def _protocol_file(manifest: RunManifest) -> tuple[str, bytes] | None:
    protocol = manifest.protocol
    if protocol.content is None:
        return None
    suffix = PurePosixPath(protocol.file or "").suffix or ".yaml"
    return f"protocol/{protocol.name or 'protocol'}{suffix}", protocol.content.encode("utf-8")


def _run_files(run_dir: Path, run_id: str, skipped: list[str]) -> dict[str, Path]:
    """Every regular file of a run folder by relative path, leaving out links, temp files and env dumps."""
    files = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_symlink():
            skipped.append(f"{run_id}/{rel} (a link; bundles hold only regular files)")
        elif not path.is_file() or rel == LOCK:  # the run lock: who holds the folder now, not the run
            continue
        elif path.name.startswith(".") and path.name.endswith((".tmp", STAGING_SUFFIX)):
            skipped.append(f"{run_id}/{rel} (an unfinished temporary file)")
        elif is_env_dump(path.name):
            skipped.append(f"{run_id}/{rel} (looks like an environment dump; never bundled)")
        else:
            files[rel] = path
    return files


def _folder_name(value: Any, what: str, fix: str) -> str:
    """`value` if it can name one folder of a bundle (see safe_tar.name_problem), else ConfigError."""
    problem = name_problem(value, MAX_FOLDER_NAME) if isinstance(value, str) else "is not a string"
    if problem or "/" in value:
        raise ConfigError(f"{what} {value!r} cannot name a folder in a bundle ({problem or 'it has a /'})", fix)
    return value


def check_runs(run_dirs: list[Path], allow_unfinished: bool = False) -> list[RunManifest]:
    """The runs' manifests; refuses a run that did not finish (started, interrupted or failed) unless
    `allow_unfinished`, a run with a pass cut short (kit.record.files), a run id that cannot name a folder,
    and a run given twice (also as a copy under another folder name)."""
    manifests: list[RunManifest] = []
    seen: dict[str, Path] = {}
    for run_dir in run_dirs:
        manifest = Manifest.load(run_dir).run
        problem = manifest.unfinished_problem()
        if problem and not allow_unfinished:
            raise ConfigError(f"{run_dir} is not a finished run ({problem})",
                              f"finish it with `kit resume {run_dir}`, or pack it as it is with `kit bundle "
                              "--allow-unfinished` (the bundle then lists it as unfinished)")
        require_whole(run_dir, manifest.passes)
        run_id = _folder_name(manifest.run_id, f"the run_id in {RunPaths(run_dir).manifest}",
                              "restore the manifest from the run's bundle")
        if run_id in seen:
            raise ConfigError(f"run {run_id} is given twice ({seen[run_id]} and {run_dir} hold the same run)",
                              "pass each run folder once")
        seen[run_id] = run_dir
        manifests.append(manifest)
    return manifests


class _Archive:
    """A .tar.gz being written under one top-level folder (kit.bundle.archive_format); remembers each
    file's size and sha256."""

    def __init__(self, out: gzip.GzipFile, root: str, stamp: int):
        self.out, self.root, self.stamp = out, root, stamp
        self.entries: dict[str, tuple[int, str]] = {}
        self.offset = self.total = 0

    def add(self, name: str, data: bytes) -> None:
        if len(data) > LIMITS.file_bytes:
            raise ConfigError(f"{name} is {len(data)} bytes, over the {LIMITS.file_bytes}-byte limit on one "
                              "bundled file", "leave the file out of the run folder (kit verify would refuse it)")
        for part in (fmt.member_header(f"{self.root}/{name}", len(data), self.stamp), data, fmt.padding(len(data))):
            self.out.write(part)
            self.offset += len(part)
        self.total += len(data)
        self.entries[name] = (len(data), checksums.sha256(data))

    def close(self) -> None:
        self.out.write(fmt.end_of_archive(self.offset))


def _add_run(archive: _Archive, run_dir: Path, manifest: RunManifest, secrets: Mapping[str, bytes],
             redactions: list[Redaction], skipped: list[str]) -> BundledRun:
    run = BundledRun(str(manifest.run_id))  # its manifest (BundledRun.typed): as bundled, secrets scrubbed
    sources: dict[str, Path | bytes] = dict(_run_files(run_dir, run.run_id, skipped))
    protocol = _protocol_file(manifest)
    if protocol and protocol[0] not in sources:
        sources[protocol[0]] = protocol[1]
    for rel, source in sorted(sources.items()):
        problem = name_problem(f"{archive.root}/{run.prefix}{rel}")
        if problem:
            skipped.append(f"{run.run_id}/{rel!r} (its bundle member name {problem}; kit verify would refuse it)")
            continue
        data = source.read_bytes() if isinstance(source, Path) else source
        data, found = scrub(data, run.prefix + rel, secrets)
        redactions.extend(found)
        archive.add(run.prefix + rel, data)
        if rel.startswith(NOT_HELD):
            run.not_held.append(rel)
        else:
            run.files[rel] = data
    return run


def bundle_after_run(run_dir: Path, say: Callable[[str], None]) -> Path | None:
    """The bundle every run ends with (`kit run`, `kit demo`, the launcher), in bundles/ beside its folder;
    failing to write one never fails the run. Says where it is and the `kit verify` to type here."""
    try:
        written = write_bundle([run_dir])
    except (KitError, OSError) as exc:
        say(f"no bundle written: {exc}")
        return None
    say(f"bundle: {written.path}  (check it with `kit verify {shown_path(written.path)}`)")
    for redaction in written.redactions:
        say(f"redacted {redaction.count} secret-looking value(s) ({redaction.what}) in {redaction.file}")
    return written.path


def write_bundle(run_dirs: list[Path], out: Path | None = None, environ: Mapping[str, str] | None = None,
                 allow_unfinished: bool = False) -> BundleResult:
    """Bundle run folders into one `.tar.gz` (default: bundles/<first run>.tar.gz beside the run folders).
    Only finished runs, unless `allow_unfinished`: then the index lists each unfinished run (`unfinished`)."""
    if not run_dirs:
        raise ConfigError("no run folder given", "pass one or more run folders made by `kit run`")
    out = out or default_path(run_dirs)
    if not out.name.endswith(SUFFIX):
        raise ConfigError(f"{out} does not end in {SUFFIX}", f"name the bundle like results{SUFFIX}")
    root = _folder_name(bundle_name(out), "the bundle name", f"name the bundle like results{SUFFIX}")
    manifests = check_runs(run_dirs, allow_unfinished)
    secrets = secret_values(environ)
    skipped: list[str] = []
    redactions: list[Redaction] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_path(out.parent, out.name)  # made anew: a name already there (a link) is never written through
    stamp = int(time.time())
    try:
        with tmp.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=stamp,
                                                  compresslevel=fmt.GZIP_LEVEL) as packed:
            archive = _Archive(packed, root, stamp)
            runs = [_add_run(archive, d, m, secrets, redactions, skipped) for d, m in zip(run_dirs, manifests)]
            index: dict[str, Any] = {
                "schema": SCHEMA, "created": now(), "kit": kit_source(),
                "runs": [{"run_id": r.run_id, "kind": r.typed().protocol.kind, "status": r.typed().status,
                          "results": sorted(r.computed())} for r in runs],
                "unfinished": [{"run_id": r.run_id, "status": r.typed().status, "reason": r.typed().reason}
                               for r in runs if r.typed().unfinished_problem()],
                "redactions": [{"file": r.file, "what": r.what, "count": r.count} for r in redactions],
                "left_out": skipped,
            }
            made = {INDEX: (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode(),
                    README: readme.render(runs, index, archive.root),
                    REPORT: report.render(runs, index).encode("utf-8")}
            for name, data in made.items():  # made from scrubbed inputs; scanned again all the same
                archive.add(name, scrub(data, name, secrets)[0])
            archive.add(CRATE, scrub(crate.build(archive.entries, runs, index), CRATE, secrets)[0])
            archive.add(CHECKSUMS, checksums.render_digests({n: e[1] for n, e in archive.entries.items()}))
            archive.close()
        too_big = LIMITS.too_big(archive.total, tmp.stat().st_size)
        if len(archive.entries) > LIMITS.members:
            too_big = f"it would hold {len(archive.entries)} files, over the limit of {LIMITS.members}"
        if too_big:
            raise ConfigError(f"the bundle is not written: {too_big}, which kit verify refuses",
                              "leave the largest logs out of the run folders and bundle again")
        publish(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    unfinished = [f"{r.run_id} ({problem})" for r in runs if (problem := r.typed().unfinished_problem())]
    return BundleResult(out, sorted(archive.entries), redactions, skipped, unfinished)
