"""The atlas's inputs, each verified before anything is read from it, and read only from what was verified.

A bundle is verified by `kit verify`'s own code (checksums, then every results file recomputed from the
raw records: kit.replay.run.verified_runs); one that does not verify is refused, and what verify
recomputed (the raw copies, their results, the findings of an analysis/ it held) is what the atlas
reads. A run folder is untrusted input too: a link or special file in it is refused, its manifest is
read through the typed model, and its results are never read from the folder: they are recomputed from
its raw records in a copy (as verify does for a bundle), and the atlas reads that copy only (of the
folder's own analysis/findings.json, only the settings, checked as verify checks them). The paper's
measures come from the analysis recomputed on the copy (kit.analysis.findings.compute): a bundle's those
verify recomputed, else computed with the settings the run's own analysis/findings.json records, else
the paper's (a note says so).
"""

from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kit.analysis import findings as analysis
from kit.analysis.findings_model import Findings
from kit.bundle import recompute, recompute_analysis
from kit.bundle.content import load_json
from kit.bundle.limits import DEFAULT
from kit.bundle.verify import VerifiedRun
from kit.core.digests import sha256_json
from kit.core.errors import ConfigError, KitError
from kit.core.paths import RunPaths
from kit.record.files import logprobs_of, read_records
from kit.record.manifest import Manifest, RunManifest, not_plain
from kit.replay.comparison import identity
from kit.replay.run import verified_runs

PAPER_KINDS = ("reset", "grid", "sweep")  # the kinds whose runs feed the paper's Tables III-VII
PAPERS = analysis.Settings()  # the paper's replicate counts and seed


def _described(settings: analysis.Settings) -> str:
    return (f"seed {settings.seed}, {settings.block_bootstrap_replicates:,} block-bootstrap, "
            f"{settings.sweep_replicates:,} sweep and {settings.cluster_replicates:,} cluster replicates")


def folder_settings(run_dir: Path) -> tuple[analysis.Settings, str | None]:
    """The settings a run folder's own analysis/findings.json records (kit.bundle.recompute_analysis.settings_of,
    as verify reads them), else the paper's with a note saying why."""
    file = run_dir / recompute_analysis.FINDINGS
    if not file.is_file():
        return PAPERS, f"its findings were computed here with the paper's settings ({_described(PAPERS)}): " \
                       f"it holds no {recompute_analysis.FINDINGS}"
    try:
        if file.stat().st_size > DEFAULT.read_whole_bytes:
            raise recompute_analysis.NotRecomputed(f"it is over {DEFAULT.read_whole_bytes:,} bytes")
        held = load_json(file.read_bytes())
        if not isinstance(held, dict):
            raise recompute_analysis.NotRecomputed("it is not a JSON object")
        return recompute_analysis.settings_of(held), None
    except (OSError, ValueError, UnicodeDecodeError, recompute_analysis.NotRecomputed) as exc:
        return PAPERS, f"its findings were computed here with the paper's settings ({_described(PAPERS)}): its " \
                       f"{recompute_analysis.FINDINGS} gives none to use ({exc})"


Outputs = dict[tuple[str, int, str], str]  # (pass, seq, request digest) -> a digest of what was answered


@dataclass
class AtlasRun:
    """One verified run: where it came from, its manifest, its recomputed results and analysis, and the
    digest of every output keyed by where and what was asked (pass, seq, request digest): the digest of
    what `kit replay` compares (kit.replay.comparison.identity: the prompt's sha256, tokens and text)."""

    source: str  # the input, or input:run folder for a bundle's run
    run_id: str
    manifest: RunManifest
    results: dict[str, Any]
    findings: Findings | None
    outputs: Outputs = field(default_factory=dict)
    numbers: Outputs = field(default_factory=dict)  # outputs and their log-probabilities
    requests: int = 0
    notes: list[str] = field(default_factory=list)  # verify's on its files, and how its findings were computed


def _outputs(run_dir: Path, manifest: RunManifest) -> tuple[Outputs, Outputs, int]:
    """Per request answered: the digest of its replay identity, and of that with the answer's log-probabilities
    as the engine sent them (the numbers `kit bisect --rung logprobs` compares); and how many records."""
    found: Outputs = {}
    numbers: Outputs = {}
    total = 0
    for pass_id, info in manifest.passes.items():
        file = run_dir / (info.file or "")
        if not info.file or not file.is_file():
            continue
        for record in read_records(file, logprobs="deferred").records:
            total += 1
            completion = record.get("completion") or {}
            if completion.get("outcome", "ok") != "ok":
                continue
            key = (pass_id, int(record["seq"]), sha256_json(record.get("request")))
            answered = identity(record)
            found[key] = sha256_json(answered)
            numbers[key] = sha256_json([*answered, logprobs_of(completion)])
    return found, numbers, total


def _read(copy: Path, source: str, verified: VerifiedRun | None = None,
          settings: tuple[analysis.Settings, str | None] = (PAPERS, None)) -> AtlasRun:
    """An AtlasRun from a raw copy: its results recomputed from its records (by verify when `verified`, else
    here), its findings those verify recomputed, else computed here with `settings` (and the note saying
    which, when they are not the run's own)."""
    loaded = Manifest.load(copy)
    fresh = verified.results if verified is not None else recompute.recompute(copy, loaded.run)
    results = {Path(name).stem: json.loads(data) for name, data in fresh.items()
               if name.startswith(f"{RunPaths.RESULTS}/") and name.endswith(".json")}
    run = AtlasRun(source, loaded.run_id, loaded.run, results, None, notes=list(verified.notes) if verified else [])
    if loaded.run.protocol.kind in PAPER_KINDS:
        if verified is not None and verified.findings is not None:
            run.findings = verified.findings
        else:
            run.findings = analysis.compute([copy], settings[0])
            run.notes += [settings[1]] if settings[1] else []
    run.outputs, run.numbers, run.requests = _outputs(copy, loaded.run)
    return run


def _from_folder(run_dir: Path, scratch: Path, source: str) -> AtlasRun:
    odd = not_plain(run_dir)
    if odd:
        raise ConfigError(f"{source} holds {odd[0].relative_to(run_dir)}, a link or not a regular file or folder",
                          "pass a plain copy of the run folder (cp -rL), or its bundle")
    run_id = Manifest.load(run_dir).run_id
    try:
        return _read(recompute.raw_copy(run_dir, scratch, run_id), source, None, folder_settings(run_dir))
    except (KitError, OSError, ValueError, KeyError, TypeError) as exc:
        message = exc.message if isinstance(exc, KitError) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"{source}: its results could not be recomputed from its records ({message})",
                          "pass a run folder `kit run` wrote, or its bundle (kit verify checks it)") from None


def _bundle_settings(kept: VerifiedRun) -> tuple[analysis.Settings, str | None]:
    """A bundle's run whose findings verify did not compute alone: the settings of the findings that name it
    (computed with other runs), else the paper's."""
    if kept.settings is not None:
        return kept.settings, None
    return PAPERS, f"its findings were computed here with the paper's settings ({_described(PAPERS)}): its bundle " \
                   "holds no analysis of it"


@contextmanager
def verified(inputs: list[Path], say: Callable[[str], None] = lambda line: None) -> Iterator[list[AtlasRun]]:
    """Every input's runs, verified (bundles) or checked and recomputed (run folders); refused in one line
    naming the input when one does not verify. Nothing is read from an input before it is verified."""
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kit-atlas-")))
        runs: list[AtlasRun] = []
        for number, given in enumerate(inputs):
            place = scratch / str(number)
            place.mkdir()
            for run_dir, kept in stack.enter_context(verified_runs(given, say, "reading it")):
                source = str(given) if run_dir == given else f"{given}:{run_dir.name}"
                runs.append(_read(kept.copy, source, kept, _bundle_settings(kept)) if kept is not None else
                            _from_folder(run_dir, place, source))
        yield runs
