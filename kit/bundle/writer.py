"""Writing a bundle: run folders in, one sealed `.tar.gz` out, with no secret in it."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from kit.bundle import CHECKSUMS, CRATE, INDEX, README, REPORT, RUNS, SCHEMA, checksums, crate, readme, report
from kit.bundle.content import BundledRun
from kit.bundle.scrub import Redaction, is_env_dump, scrub, secret_values
from kit.errors import ConfigError
from kit.manifest import Manifest, now
from kit.provenance import kit_source

SUFFIX = ".tar.gz"


@dataclass
class BundleResult:
    """What `write_bundle` did: the file, what went in, what was redacted and what was left out (and why)."""

    path: Path
    files: list[str]
    redactions: list[Redaction] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def bundle_name(out: Path) -> str:
    name = out.name
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else out.stem


def default_path(run_dirs: list[Path]) -> Path:
    """Where a bundle goes when no -o is given: `bundles/` beside the (first) run folder."""
    first = run_dirs[0]
    stem = first.name if len(run_dirs) == 1 else f"{first.name}-and-{len(run_dirs) - 1}-more"
    return first.parent / "bundles" / f"{stem}{SUFFIX}"


def _protocol_file(manifest: dict[str, Any]) -> tuple[str, bytes] | None:
    protocol = manifest.get("protocol", {})
    content = protocol.get("content")
    if content is None:
        return None
    suffix = PurePosixPath(str(protocol.get("file", ""))).suffix or ".yaml"
    return f"protocol/{protocol.get('name') or 'protocol'}{suffix}", content.encode("utf-8")


def _run_files(run_dir: Path, skipped: list[str]) -> dict[str, bytes]:
    """Every regular file of a run folder by relative path, leaving out links, temp files and env dumps."""
    files = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_symlink():
            skipped.append(f"{run_dir.name}/{rel} (a link; bundles hold only regular files)")
        elif not path.is_file():
            continue
        elif path.name.startswith(".") and path.name.endswith(".tmp"):
            skipped.append(f"{run_dir.name}/{rel} (an unfinished temporary file)")
        elif is_env_dump(path.name):
            skipped.append(f"{run_dir.name}/{rel} (looks like an environment dump; never bundled)")
        else:
            files[rel] = path.read_bytes()
    return files


def collect_runs(run_dirs: list[Path], skipped: list[str]) -> list[BundledRun]:
    runs: list[BundledRun] = []
    for run_dir in run_dirs:
        manifest = Manifest.load(run_dir).data
        if manifest.get("status") not in ("finished", "failed", "interrupted"):
            raise ConfigError(f"{run_dir} is still running (status {manifest.get('status')!r})",
                              "bundle it once the run has ended")
        if any(r.run_id == run_dir.name for r in runs):
            raise ConfigError(f"run {run_dir.name} is given twice", "pass each run folder once")
        files = _run_files(run_dir, skipped)
        protocol = _protocol_file(manifest)
        if protocol and protocol[0] not in files:
            files[protocol[0]] = protocol[1]
        runs.append(BundledRun(run_dir.name, manifest, files))
    return runs


def _scrub_all(runs: list[BundledRun], secrets: Mapping[str, bytes], redactions: list[Redaction]) -> None:
    for run in runs:
        for name, data in list(run.files.items()):
            clean, found = scrub(data, run.prefix + name, secrets)
            run.files[name] = clean
            redactions.extend(found)
        run.manifest = json.loads(run.files["manifest.json"])


def _tar(out: Path, root: str, files: dict[str, bytes]) -> None:
    tmp = out.with_name(f".{out.name}.tmp")
    stamp = int(time.time())
    with tarfile.open(tmp, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({"/".join(n.split("/")[:i]) for n in files for i in range(1, n.count("/") + 1)})
        for folder in [""] + folders:
            info = tarfile.TarInfo(f"{root}/{folder}".rstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, stamp
            tar.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, stamp
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)


def write_bundle(run_dirs: list[Path], out: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> BundleResult:
    """Bundle run folders into one `.tar.gz` (default: bundles/<first run>.tar.gz beside the run folders)."""
    if not run_dirs:
        raise ConfigError("no run folder given", "pass one or more run folders made by `kit run`")
    out = out or default_path(run_dirs)
    if not out.name.endswith(SUFFIX):
        raise ConfigError(f"{out} does not end in {SUFFIX}", f"name the bundle like results{SUFFIX}")
    skipped: list[str] = []
    redactions: list[Redaction] = []
    runs = collect_runs(run_dirs, skipped)
    secrets = secret_values(environ)
    _scrub_all(runs, secrets, redactions)
    index: dict[str, Any] = {
        "schema": SCHEMA, "created": now(), "kit": kit_source(),
        "runs": [{"run_id": r.run_id, "kind": r.manifest.get("protocol", {}).get("kind"),
                  "status": r.manifest.get("status"), "results": sorted(r.computed())} for r in runs],
        "redactions": [{"file": r.file, "what": r.what, "count": r.count} for r in redactions],
        "left_out": skipped,
    }
    files = {f"{RUNS}/{r.run_id}/{name}": data for r in runs for name, data in r.files.items()}
    files[INDEX] = (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode()
    files[README] = readme.render(runs, index, bundle_name(out))
    files[REPORT] = report.render(runs, index).encode("utf-8")
    files[CRATE] = crate.build(files, runs, index)
    for name in (INDEX, README, REPORT, CRATE):  # made from scrubbed inputs; scanned again all the same
        files[name], found = scrub(files[name], name, secrets)
        redactions.extend(found)
    files[CHECKSUMS] = checksums.render(files)
    out.parent.mkdir(parents=True, exist_ok=True)
    _tar(out, bundle_name(out), files)
    return BundleResult(out, sorted(files), redactions, skipped)
