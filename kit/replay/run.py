"""`kit replay`: run a recorded run again, on this machine, and hold the new run against it.

The source is a run folder or a bundle (verified first: a bundle that does not verify is not replayed).
Each run is re-executed with its recorded protocol text (checked against its sha256), overrides and
seeds, the engine's recorded thread count and CPU backend. Inputs are found by their sha256: the model
in the registry or cache (or `--model PATH`), a GSM8K file at its recorded path (or `--gsm8k PATH`);
anything not found is a one-line refusal saying what to pass. A CPU backend whose library differs from
the recorded one is a different engine build: refused unless asked for (`--cpu-backend` naming another
backend, or `--different-engine-ok`), and then listed beside the result. Every check runs before the
first new run folder is written; the new run goes under `--out` as `kit run` writes it, with
`replay/comparison.json` and `replay/comparison.md` (kit.replay.comparison) and `replay_of` in its manifest.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.run import engine_build
from kit.run import resume, runner
from kit.launch.llamacpp import fixes as fix_registry
from kit.core.atomic_file import write_json_atomic, write_text_atomic
from kit.engines import registry
from kit.core.errors import ConfigError, KitError
from kit.core.events import Emit, ignore
from kit.record.manifest import FINAL_STATES, PLAIN_NAME, EngineInfo, Manifest, RunManifest, WorkloadInfo
from kit.core.paths import RunPaths
from kit.replay.comparison import Comparison, compare_runs
from kit.core.terminal_text import one_line

if TYPE_CHECKING:
    from kit.bundle.verify import VerifiedRun

FIX_MODEL = "pass --model PATH of that file (its sha256 is checked), or `kit models pull NAME` if it has a name"


@dataclass(frozen=True)
class ReplayOptions:
    source: Path
    out: Path | None = None
    cpu_backend: str | None = None  # None: the recorded backend
    model: Path | None = None
    gsm8k: Path | None = None
    different_engine_ok: bool = False
    server_bin: Path | None = None  # the reviewer's own llama-server (the one a run recorded is never run)
    engine_build: int | None = None  # llama.cpp build N built here (--engine-build); the run's is never implied


@dataclass(frozen=True)
class Planned:
    run_dir: Path  # the recorded run (unpacked from the bundle, or the folder given)
    options: runner.RunOptions
    protocol_text: str
    protocol_name: str
    notes: list[str]


@dataclass(frozen=True)
class Replayed:
    original: str
    result: runner.RunResult
    comparison: Comparison


def _model(engine: EngineInfo, given: Path | None, where: str) -> str:
    from kit.models import ensure_model, load_registry  # noqa: PLC0415

    recorded = engine.model_sha256
    if not recorded:
        raise ConfigError(f"{where}: the run recorded no model sha256, so its model cannot be found again",
                          "replay only runs of an engine the kit started")
    if given is not None:
        found = ensure_model(given)
        if found.sha256 != recorded:
            raise ConfigError(f"--model {given} has sha256 {found.sha256[:12]}…, the run served {recorded[:12]}…",
                              FIX_MODEL)
        return str(given)
    entry = load_registry().find_by_sha256(recorded)
    if entry is None:
        raise ConfigError(f"{where}: the model the run served (sha256 {recorded[:12]}…, "
                          f"{engine.model_name or 'no registry name'}) is not in the registry", FIX_MODEL)
    return entry.name


def _gsm8k(workload: WorkloadInfo, given: Path | None, where: str) -> Path | None:
    from kit.models.hashing import sha256_file  # noqa: PLC0415

    if workload.source != "gsm8k":
        return None
    recorded = str(workload.sha256)
    if given is not None:
        if sha256_file(given) != recorded:
            raise ConfigError(f"--gsm8k {given} is not the GSM8K file the run served (sha256 {recorded[:12]}…)",
                              "pass the file the run served")
        return given
    at = Path(workload.file) if workload.file else None
    if at is not None and at.is_file() and sha256_file(at) == recorded:
        return at
    raise ConfigError(f"{where}: the GSM8K file the run served (sha256 {recorded[:12]}…) is not at "
                      f"{workload.file}", "pass it with --gsm8k PATH")


def _backend(manifest: RunManifest, options: ReplayOptions, where: str, say: Callable[[str], None]) -> str:
    from kit.launch.llamacpp import embedded  # noqa: PLC0415

    recorded = manifest.provenance.cpu_backend
    if recorded is None or (options.server_bin is not None and options.cpu_backend is None):
        return options.cpu_backend or "auto"  # a binary given by --server-bin runs its own backend unless asked
    chosen = options.cpu_backend or recorded["name"]
    here = embedded.locate(chosen, say=say).backend
    asked = options.different_engine_ok or (options.cpu_backend not in (None, recorded["name"]))
    if here.library_sha256 != recorded["library_sha256"] and not asked:
        raise KitError(f"{where}: different engine build: the run's {recorded['name']} CPU backend has library "
                       f"sha256 {recorded['library_sha256'][:12]}…, this machine's {here.name} "
                       f"{here.library_sha256[:12]}…",
                       "pass --different-engine-ok to replay it anyway (the difference is listed beside the result)")
    return chosen


def plan(run_dir: Path, options: ReplayOptions, say: Callable[[str], None]) -> Planned:
    """What re-running `run_dir` takes, every input found and checked; nothing is written. A manifest whose
    fields are not of the types `kit run` writes is refused in one line."""
    loaded = Manifest.load(run_dir)
    manifest, where = loaded.run, f"run {loaded.run_id}"
    try:
        return _plan(run_dir, manifest, where, options, say)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise ConfigError(f"{where}: {run_dir}/manifest.json is not laid out as `kit run` writes it "
                          f"({type(exc).__name__}: {exc})", "restore it from its bundle") from exc


def _plan(run_dir: Path, manifest: RunManifest, where: str, options: ReplayOptions,
          say: Callable[[str], None]) -> Planned:
    if manifest.status not in FINAL_STATES:
        raise ConfigError(f"{where} is still running (status {manifest.status!r})",
                          "replay it once it has ended (`kit resume` continues a run that was killed)")
    if manifest.imported:
        raise ConfigError(f"{where} was imported from {manifest.imported.from_}; nothing ran here to replay",
                          "replay runs made by `kit run`")
    saved = resume.saved_options(run_dir, manifest.options)  # each of the type `kit run` writes
    if saved.get("provider") or saved.get("engine_url") or saved.get("engine_urls") \
            or saved.get(runner.CREDENTIALS_DROPPED):
        raise ConfigError(f"{where} ran against an engine reached by URL, which the kit cannot start again",
                          "replay it against that engine with `kit run` and the same protocol file")
    engine = registry.named(saved.get("engine") or registry.DEFAULT, f"{where}: its engine")
    if not engine.replayable:
        raise ConfigError(f"{where} ran on {engine.label}, whose checkpoint has no single-file sha256 to find it "
                          "again by", f"run its protocol again with `kit run PROTOCOL --engine {engine.name}`"
                          + (f" ({engine.docs})" if engine.docs else ""))
    server_bin, problem = resume.own_server_bin(saved.get("server_bin"), manifest.engine.server_bin_sha256,
                                                options.server_bin, where)
    if problem and not options.different_engine_ok:
        raise ConfigError(problem, ("pass --server-bin PATH of your own build of that binary (its sha256 is compared), "
                                    "or " if options.server_bin is None else "pass ") +
                          "--different-engine-ok to replay on the engine given here (the difference is listed "
                          "beside the result)")
    build_problem = engine_build.own_build(manifest.engine.to_json(), options.engine_build)
    recorded_build = engine_build.recorded_build(manifest.engine.to_json())
    build_line = (f"{where} was made on {engine_build.identity_line(manifest.engine.to_json())}; the replay runs on "
                  + (f"llama.cpp build {options.engine_build}" if options.engine_build is not None else
                     "the embedded engine (the paper's build)") + (": the same build" if build_problem is None else
                                                                   ": a different build"))  # said once all is checked
    if build_problem and not options.different_engine_ok:
        raise ConfigError(f"{where}: {build_problem}", (f"pass --engine-build {recorded_build} (built here by `kit "
                                                        f"engines build llamacpp --build {recorded_build}`), or "
                                                        if recorded_build not in (None, options.engine_build)
                                                        else "") +
                          "pass --different-engine-ok to replay on the build given here (the difference is listed "
                          "beside the result)")
    problem = "; ".join(p for p in (problem, build_problem) if p) or None
    protocol = manifest.protocol
    text = resume.check_stored_protocol(run_dir, protocol, "replay")
    name = protocol.name or "replay"
    if not isinstance(name, str) or not PLAIN_NAME.fullmatch(name):
        raise ConfigError(f"{where}: protocol name {name!r} is not a plain file name (it has a /, a leading dot or a "
                          "control character, or is over 50 characters)",
                          "a replay names its protocol file after it; restore the manifest from its bundle")
    recorded = manifest.engine
    fixes, server_args = _fixes(saved, where)
    run_options = runner.RunOptions(
        protocol="", overrides=protocol.overrides or {}, model=_model(recorded, options.model, where),
        gsm8k=_gsm8k(manifest.workload, options.gsm8k, where),
        server_bin=server_bin, engine_build=options.engine_build, threads=recorded.threads, out=options.out,
        launcher=saved.get("launcher") or "native", cpu_backend=_backend(manifest, options, where, say),
        fixes=fixes, server_args=server_args)
    return Planned(run_dir, run_options, text, name, [build_line, *([problem] if problem else [])])


def _fixes(saved: dict[str, Any], where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The recorded fixes and server flags (lists of strings: resume.saved_options), checked as typed ones are
    (kit.launch.llamacpp.fixes) before anything is replayed: a run folder never adds a flag the allow-list refuses."""
    fixes, server_args = (tuple(saved.get(key) or ()) for key in ("fixes", "server_args"))
    try:
        fix_registry.parse(fixes, server_args)
    except ConfigError as exc:
        raise ConfigError(f"{where}: a recorded fix or server flag is refused: {exc.message}",
                          "replay only runs that the kit's own checks accept") from exc
    return fixes, server_args


@contextmanager
def verified_runs(source: Path, say: Callable[[str], None] = lambda line: None,
                  purpose: str = "replaying it") -> Iterator[list[tuple[Path, VerifiedRun | None]]]:
    """The run folders of `source`: itself, or those of a bundle that verifies (unpacked while in use), each
    with what verifying it recomputed (kit.bundle.verify.VerifiedRun; None for a run folder given as is)."""
    if RunPaths(source).manifest.is_file():
        yield [(source, None)]
        return
    if source.is_dir():
        raise ConfigError(f"{source} has no manifest.json", "pass a run folder or a bundle (.tar.gz)")
    from kit.bundle import RUNS, safe_tar  # noqa: PLC0415
    from kit.bundle.limits import DEFAULT  # noqa: PLC0415
    from kit.bundle.verify import check, keep  # noqa: PLC0415

    with safe_tar.unpack(source, keep(DEFAULT), DEFAULT) as bundle:  # a file that is no bundle: refused first
        say(f"verifying {source} (checksums, then its results recomputed from its records) before {purpose}")
        verdict = check(bundle)
        if not verdict.ok:
            raise ConfigError(f"{source} does not verify ({verdict.summary()}); a replay starts only from a "
                              "bundle that does", f"see `kit verify {source}`")
        say(one_line(f"verified: {verdict.summary()}"))
        folders = sorted(p for p in (bundle.folder / RUNS).iterdir() if RunPaths(p).manifest.is_file())
        yield [(folder, verdict.runs.get(folder.name)) for folder in folders]


@contextmanager
def recorded_runs(source: Path, say: Callable[[str], None] = lambda line: None,
                  purpose: str = "replaying it") -> Iterator[list[Path]]:
    """The run folders of `source`: itself, or those of a bundle that verifies (unpacked while in use)."""
    with verified_runs(source, say, purpose) as runs:
        yield [folder for folder, _ in runs]


def _write(comparison: Comparison, run_dir: Path) -> None:
    folder = RunPaths(run_dir).replay
    folder.mkdir(exist_ok=True)
    write_json_atomic(folder / "comparison.json", comparison.to_json())
    lines = [f"# Replay of {comparison.original}", "", comparison.summary(), "",
             "| pass | status (original -> replay) | requests | byte-identical | first difference |",
             "|---|---|---|---|---|"]
    for p in comparison.passes:
        first = p.first_difference
        where = f"seq {first['seq']} ({first['unit']}), token {first['token']}" if first else "none"
        lines.append(f"| {p.pass_id} | {p.status[0]} -> {p.status[1]} | {p.requests[0]} -> {p.requests[1]} | "
                     f"{p.identical} | {where} |")
    lines += ["", "What differs in the engine and machine:", ""] + [f"- {d}" for d in comparison.differences or
                                                                      ["nothing recorded differs"]]
    lines += ["", f"Result values compared: {comparison.values_compared}; differing: {len(comparison.values_differ)}"]
    lines += [f"- {d}" for d in comparison.values_differ[:50]]
    write_text_atomic(folder / "comparison.md", "\n".join(lines) + "\n")


def replay(options: ReplayOptions, say: Callable[[str], None] = print,
           watch: Callable[[Path], Emit] | None = None) -> list[Replayed]:
    """Replay every run of `options.source`; the new runs and their comparisons. `watch(original run
    folder)` gives the events' receiver for that run's replay (the launcher's live comparison)."""
    done = []
    with recorded_runs(options.source, say) as runs, tempfile.TemporaryDirectory(prefix="kit-replay-") as tmp:
        planned = [plan(run_dir, options, say) for run_dir in runs]  # every check before anything is written
        for number, item in enumerate(planned):
            folder = Path(tmp) / str(number)  # runs of one bundle may share a protocol name
            folder.mkdir()
            protocol_file = folder / f"{item.protocol_name}.yaml"  # a plain name (plan): stays in `folder`
            write_text_atomic(protocol_file, item.protocol_text)
            for note in item.notes:
                say(one_line(f"note: {note}"))
            say(one_line(f"replaying {item.run_dir.name} ({number + 1} of {len(planned)}): protocol "
                         f"{item.protocol_name}"))
            result = runner.run(replace(item.options, protocol=str(protocol_file)), say=say,
                                emit=watch(item.run_dir) if watch else ignore)
            comparison = compare_runs(item.run_dir, result.run_dir)
            original = Manifest.load(item.run_dir).run_id
            Manifest.load(result.run_dir).update(replay_of={
                "run_id": original, "source": str(options.source), "summary": comparison.summary(),
                "differences": comparison.differences})
            _write(comparison, result.run_dir)
            done.append(Replayed(original, result, comparison))
    return done
