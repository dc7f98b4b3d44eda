"""Provisioning of BFCL: a pinned, dependency-free install of `bfcl-eval` in the kit cache.

`bfcl-eval` resolves ~150 packages (torch among them) when installed normally, and its executor
`eval`s model output, so the kit never installs it into its own environment and never imports it
in its own process. Instead `ensure_bfcl` installs the pinned release with `--no-deps`, plus the
handful of modules the checker, environments and decoders really import, into
`<cache>/bfcl/site`, and verifies the sha256 of the dataset files the workload reads. The worker
process (`kit.workloads.bfcl.worker`) runs with that folder on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kit.core.errors import KitError

BFCL_VERSION = "2026.3.23"

# What the worker imports, checked by importing bfcl_eval with nothing else on the path:
# the environments need mpmath (MathAPI); bfcl_eval.utils needs filelock;
# bfcl_eval.model_handler.utils (decoders, system prompt) needs tenacity and the tree-sitter parsers.
BFCL_PINS: tuple[str, ...] = (
    f"bfcl-eval=={BFCL_VERSION}",
    "mpmath==1.3.0",
    "filelock==4.3.1",
    "tenacity==9.2.1",
    "tree_sitter==0.21.3",
    "tree-sitter-java==0.21.0",
    "tree-sitter-javascript==0.21.4",
)

MARKER_NAME = "kit-bfcl.json"

# sha256 of the dataset files of bfcl-eval 2026.3.23 the workload reads (paths under the site dir).
# Earlier releases differ in episodes 0-79, so a mismatch is an error, not a warning.
DATASET_SHA256: dict[str, str] = {
    "bfcl_eval/data/BFCL_v4_multi_turn_base.json":
        "1a21a995d06fd6f20ba55de7bced30ef953ec35e998f502ec2ecf4d66ef1c43a",
    "bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_base.json":
        "1fee67823b317571649177dd89d63969feaae4e810cc7448ee55ba797fb7c8fc",
    "bfcl_eval/data/multi_turn_func_doc/gorilla_file_system.json":
        "c4c1b741c71e2a17c97a5dc9c4a91d89978c4eaece56494d14272d5df6c650e9",
    "bfcl_eval/data/multi_turn_func_doc/math_api.json":
        "83fa31708c89442bdcf12ac4dfbe3be8663ec9183a1b1524a9fda98164bc7e0b",
    "bfcl_eval/data/multi_turn_func_doc/message_api.json":
        "4d58ea933a5d2b280d7a52366617fb47fecd333d7b0e08e724db6fa12fb5f847",
    "bfcl_eval/data/multi_turn_func_doc/posting_api.json":
        "87f9fc404a06e4107d7c366f1399c596440e84c16cb119faf374b2f532d86e8b",
    "bfcl_eval/data/multi_turn_func_doc/ticket_api.json":
        "31324e0380782664fe82ba05bd23517808ad55692b45a5fe7c3d4d395fe4f0f8",
    "bfcl_eval/data/multi_turn_func_doc/trading_bot.json":
        "1a7933fd8f0cb8fbec38aeae05cb8c24132747cad4904fe1c13ac3d01fc22c2d",
    "bfcl_eval/data/multi_turn_func_doc/travel_booking.json":
        "f17b950c13adddf41d0848077df58788252e4c2e7cad5cfa71c8c4bf04f57b26",
    "bfcl_eval/data/multi_turn_func_doc/vehicle_control.json":
        "0c8a66292844874ef7b168f343bc394d8615d2d9e1f4387999a9ee23011eac78",
}

INSTALL_FIX = "run `kit workloads install bfcl` (needs PyPI access once)"


def kit_cache_dir() -> Path:
    """The kit's cache folder: $KIT_CACHE_DIR, else ~/.cache/kit."""
    env = os.environ.get("KIT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kit"


@dataclass(frozen=True)
class BfclInstall:
    """A verified BFCL install: where it lives and what it is, for the worker and the manifest."""

    site_dir: Path  # goes on the worker's PYTHONPATH
    project_root: Path  # the kit's scratch folder for BFCL (the default worker log; never site-packages);
    # each worker gets a private BFCL_PROJECT_ROOT of its own (client.BfclWorker)
    pins: tuple[str, ...]
    dataset_sha256: dict[str, str] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return BFCL_VERSION

    def path(self, relative: str) -> Path:
        """A file of the installed distribution, e.g. `bfcl_eval/data/...`."""
        return self.site_dir / relative

    def to_manifest(self) -> dict:
        return {
            "bfcl_eval": BFCL_VERSION,
            "pins": list(self.pins),
            "site_dir": str(self.site_dir),
            "dataset_sha256": dict(self.dataset_sha256),
        }


def to_stderr(line: str) -> None:
    """Where install progress goes when the caller names nowhere else: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


def ensure_bfcl(cache_dir: Path | str | None = None, *, install: bool = True,
                python: str | None = None, say: Callable[[str], None] | None = None) -> BfclInstall:
    """Return the pinned BFCL install under `cache_dir` (default `kit_cache_dir()`), installing it
    first if it is missing or was made with other pins (its progress told to `say`, a line per step of
    pip's; None: on stderr), and verify its dataset files by sha256.

    With `install=False` a missing install is an error instead (for commands that must not touch
    the network). Raises `KitError` when pip fails or a dataset file has the wrong hash.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else kit_cache_dir()
    bfcl_root = root / "bfcl"
    site = bfcl_root / "site"
    project_root = bfcl_root / "project"
    if not _marker_matches(site):
        if not install:
            raise KitError(f"BFCL {BFCL_VERSION} is not installed in {site}", INSTALL_FIX)
        _install(site, python or sys.executable, say or to_stderr)
    project_root.mkdir(parents=True, exist_ok=True)
    hashes = verify_dataset(site)
    return BfclInstall(site_dir=site, project_root=project_root, pins=BFCL_PINS,
                       dataset_sha256=hashes)


def verify_dataset(site: Path) -> dict[str, str]:
    """sha256 of every dataset file the workload reads; raises KitError on a missing or changed file."""
    # imported here, not at the top: the BFCL worker imports this package and must stay free of kit.models
    from kit.models.hashing import sha256_file  # noqa: PLC0415

    found: dict[str, str] = {}
    for relative, expected in DATASET_SHA256.items():
        path = site / relative
        if not path.is_file():
            raise KitError(f"BFCL dataset file missing: {path}", INSTALL_FIX)
        digest = sha256_file(path)
        if digest != expected:
            raise KitError(
                f"BFCL dataset file {relative} has sha256 {digest}, expected {expected} "
                f"(bfcl-eval {BFCL_VERSION})",
                f"delete {site} and {INSTALL_FIX}",
            )
        found[relative] = digest
    return found


def _marker_matches(site: Path) -> bool:
    try:
        marker = json.loads((site / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("pins") == list(BFCL_PINS)


PIP_STEPS = ("Collecting ", "Downloading ", "Installing ", "Successfully ")  # pip's lines shown as progress


def _pip(cmd: list[str], say: Callable[[str], None]) -> tuple[int, list[str]]:
    """Run pip, telling `say` each of its steps as it prints them (what it fetches, with sizes, and what
    it installs); (exit status, its output's lines)."""
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.lstrip().startswith(PIP_STEPS):
                say(f"  pip: {' '.join(line.split())}")
    return proc.returncode, lines


def _install(site: Path, python: str, say: Callable[[str], None]) -> None:
    """pip-install the pins into a fresh folder next to `site`, then swap it in."""
    site.parent.mkdir(parents=True, exist_ok=True)
    partial = site.parent / f"site.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    say(f"Installing BFCL {BFCL_VERSION} into {site} once ({len(BFCL_PINS)} pinned packages from PyPI, without "
        "their dependencies; about a minute)…")
    cmd = [python, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
           "--progress-bar", "off", "--only-binary", ":all:", "--target", str(partial), *BFCL_PINS]
    code, lines = _pip(cmd, say)
    if code != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = " ".join(line for line in lines if line.strip())[-400:] or "no output"
        raise KitError(f"installing BFCL failed (pip exit {code}): {tail}",
                       "check network access to PyPI and retry `kit workloads install bfcl`")
    (partial / MARKER_NAME).write_text(json.dumps({"pins": list(BFCL_PINS)}, indent=2) + "\n")
    say(f"BFCL {BFCL_VERSION} installed.")
    if site.exists():
        shutil.rmtree(site)
    try:
        os.replace(partial, site)
    except OSError:
        # Another process finished the same install first; keep its copy if it is complete.
        shutil.rmtree(partial, ignore_errors=True)
        if not _marker_matches(site):
            raise
