"""`kit resume`: continue a run that stopped, in the folder it left, with nothing the folder names trusted.

What a resume reads of the manifest is checked as `kit run` writes it; the server binary, engine URL, build,
fixes and CPU backend are only ever the user's own, passed again and compared with what the run recorded
(docs/security.md, "Run folders and bundles"); finished passes are kept and a pass cut short runs again.
Replay shares the server-binary and stored-protocol rules (`own_server_bin`, `check_stored_protocol`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from kit.core.digests import sha256_text
from kit.core.errors import KitError
from kit.core.events import Emit, ignore
from kit.core.paths import RunPaths
from kit.launch import leftover_servers
from kit.launch.cpu import portable_backend
from kit.protocols import kinds
from kit.protocols.procedure import RunInputs
from kit.record import files as records
from kit.record.manifest import MANIFEST, EngineInfo, Manifest, ProtocolInfo, RunManifest, not_plain, now
from kit.run import executors, execution, preflight, runner, lock as run_lock
from kit.run.engine_build import resumed as resumed_build
from kit.run.execution import RunResult

PATH_OPTIONS = ("gsm8k", "server_bin", "out")


def own_server_bin(recorded: str | None, recorded_sha256: str | None, given: Path | None,
                   where: str) -> tuple[Path | None, str | None]:
    """The server binary a resume or replay of a run starts: only ever one the user gives now (`given`),
    never the path the run folder or bundle names (`recorded`). (binary, problem): problem says why that
    may not be the engine build the run used (None: it is the recorded sha256, or neither used one)."""
    if given is None:
        return None, (f"{where} ran the server binary {recorded}, which is not run again: a run folder or "
                      "bundle never chooses a program to run" if recorded else None)
    preflight.check_binary(Path(given))
    if not recorded:
        return given, f"{where} ran the kit's own engine, not a server binary"
    if recorded_sha256 is None:
        return given, f"{where} did not record the sha256 of its server binary {recorded}"
    digest = runner.server_bin_record(given)["server_bin_sha256"]
    if digest != recorded_sha256:
        return given, (f"--server-bin {given} has sha256 {digest[:12]}…, but {where} ran a server binary with "
                       f"sha256 {str(recorded_sha256)[:12]}… ({recorded}): a different engine build")
    return given, None


# the manifest fields a resume needs (the types of all it reads: RunManifest)
RESUMED_FIELDS = ("status", "protocol")


def _check_layout(run_dir: Path, run: RunManifest) -> None:
    """Each manifest field a resume reads is there as `kit run` writes it (their types: RunManifest);
    refused in one line otherwise."""
    wrong = [key for key in RESUMED_FIELDS if key not in run.model_fields_set or getattr(run, key) is None]
    wrong += [f"protocol.{key}" for key, kinds_ in (("file", (str,)), ("overrides", (dict, type(None))))
              if not isinstance(getattr(run.protocol, key), kinds_)]  # its content: check_stored_protocol
    if wrong:
        raise KitError(f"{run_dir}/manifest.json: {', '.join(wrong)} not laid out as `kit run` writes it",
                       "restore the manifest from its bundle")


# the options a manifest records, by the type each must have; others (of another kit version) are not used
SAVED_OPTIONS: dict[str, type] = {"gsm8k": str, "model": str, "server_bin": str, "engine_build": int, "engine_url": str, "engine_urls": dict, "engine": str,
                 "port": int, "threads": int, "launcher": str, "cpu_backend": str, "provider": str, "image": str,
                 "gpus": str, "fixes": list, "server_args": list, **executors.SAVED_OPTIONS,
                 runner.CREDENTIALS_DROPPED: bool}


def saved_options(run_dir: Path, saved: Any) -> dict[str, Any]:
    """The run options a manifest records, each of the type the kit writes (`out` is not one a resume or replay
    uses: the run folder is where it is); a value of another type is refused in one line."""
    kept = {key: value for key, value in (saved if isinstance(saved, dict) else {}).items()
            if key in SAVED_OPTIONS and value is not None}
    for key, value in kept.items():
        wanted = SAVED_OPTIONS[key]
        if not _recorded_type(value, wanted):
            raise KitError(f"{run_dir}/manifest.json: options.{key} is {type(value).__name__} {str(value)[:80]!r}, "
                           f"not the {wanted.__name__} the kit records", "restore the manifest from its bundle")
    if kept.get("launcher", "native") not in ("native", "docker") or \
            kept.get("cpu_backend", "auto") not in ("auto", "wheel", "portable"):
        raise KitError(f"{run_dir}/manifest.json: options.launcher {kept.get('launcher')!r} or options.cpu_backend "
                       f"{kept.get('cpu_backend')!r} is not one the kit has", "restore the manifest from its bundle")
    return kept


def _recorded_type(value: Any, wanted: type) -> bool:
    """Is `value` of the type the kit records: a bool is no int, a dict or list holds strings only."""
    if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
        return False
    if isinstance(value, dict):
        return all(isinstance(v, str) for v in [*value, *value.values()])
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return True


def _resumed_server_bin(run_dir: Path, saved_options: dict[str, Any], engine: EngineInfo,
                        given: Path | None, say: Callable[[str], None]) -> Path | None:
    """A resume starts the server binary the user passes again (`--server-bin`), never the recorded path;
    it must have the recorded sha256 (a run recorded before the sha256 was: the binary the user passes)."""
    recorded = saved_options.pop("server_bin", None)
    binary, problem = own_server_bin(recorded, engine.server_bin_sha256, given, str(run_dir))
    if problem is None:
        return binary
    if binary is None:
        raise KitError(problem, "to resume it, pass --server-bin with your own build of that binary (its sha256 "
                                f"is compared with the recorded one), e.g. --server-bin {recorded} if that is yours")
    if not recorded:
        raise KitError(f"{problem}; --server-bin would mix engines in one run", "resume without --server-bin")
    if engine.server_bin_sha256 is not None:
        raise KitError(problem, "pass the build the run used; one run never mixes engine builds")
    say(f"note: {problem}; resuming with --server-bin {binary}, as you asked")
    return binary


def _resumed_engine_urls(run_dir: Path, saved_options: dict[str, Any], given: tuple[str | None, dict[str, str]]) -> None:
    """A resume connects only where the user says now: a run against `--engine-url` resumes with the same
    URL(s) passed again, never on the folder's word (docs/security.md: a folder must not choose where the
    kit sends requests)."""
    recorded = (saved_options.get("engine_url"), saved_options.get("engine_urls") or {})
    if recorded == (given[0], given[1] or {}):
        return
    shown = recorded[0] or " ".join(f"{arm}={url}" for arm, url in sorted(recorded[1].items()))
    if not any(recorded):
        raise KitError(f"{run_dir} ran on a server the kit started, not against --engine-url",
                       "resume without --engine-url")
    passed = [f"--engine-url {recorded[0]}"] if recorded[0] else \
        [f"--engine-url {arm}={url}" for arm, url in sorted(recorded[1].items())]
    what = "was not passed" if not any(given) else "differs from the one recorded"
    raise KitError(f"{run_dir} ran against the engine at {shown}; --engine-url {what}, and a resume never "
                   "contacts a URL on the run folder's word", f"to resume it, pass {' '.join(passed)}")


def _resumed_fixes(run_dir: Path, saved_options: dict[str, Any], *, fixes: tuple[str, ...],
                   server_args: tuple[str, ...]) -> None:
    """A resume applies the fixes and server flags the run recorded; asking for others (`fixes`,
    `server_args`: --fix, --server-arg given now) is refused (one run never mixes settings). The recorded
    ones, as lists, become the options' tuples."""
    recorded = (tuple(saved_options.get("fixes") or ()), tuple(saved_options.get("server_args") or ()))
    saved_options["fixes"], saved_options["server_args"] = recorded
    if (fixes or server_args) and (tuple(fixes), tuple(server_args)) != recorded:
        shown = " ".join([*(f"--fix {n}" for n in recorded[0]), *(f"--server-arg={a}" for a in recorded[1])])
        raise KitError(f"{run_dir} ran with {shown or 'no fix and no server flag'}; a resume applies exactly those "
                       "again, and other ones would mix settings in one run",
                       "resume without --fix and --server-arg (the recorded ones are applied)")


def resume(run_dir: Path, emit: Emit = ignore, say: Callable[[str], None] = print,
           stop: threading.Event | None = None, cpu_backend: str = "auto", server_bin: Path | None = None,
           engine_build: int | None = None,
           engine_url: tuple[str | None, dict[str, str]] = (None, {}),
           executor: dict[str, Any] | None = None,
           fixes: tuple[str, ...] = (), server_args: tuple[str, ...] = ()) -> RunResult:
    """Continue a run that stopped: passes that ended OK or VOID are kept; a pass that did not end, or whose
    records file is cut short (torn, or fewer records than the manifest counts: kit.record.files.cut_short,
    also in a finished run), is run again from its start, its earlier records moved to records/superseded/
    (kept, never counted). Servers a killed kit left running are stopped first (kit.launch.leftover_servers).
    Nothing the folder names is run: the server binary only when the user passes it (`server_bin`), with
    the recorded sha256 (docs/security.md, "Run folders and bundles"). The run folder is locked first
    (kit.run.lock): a second kit on it is refused. An engine reached by URL is contacted only when the
    user passes the same `engine_url` again. The recorded fixes and server flags are applied again; `fixes`
    and `server_args` (--fix, --server-arg given now) must be none or the recorded ones; `engine_build`
    (--engine-build given now) the recorded build, its binary of the recorded sha256."""
    Manifest.load(run_dir)  # a folder that is not a run folder is refused before anything is written in it
    with run_lock.locked(run_dir, "resume", run_lock.RESERVE_BYTES) as lock:
        return _resume(run_dir, emit, say, stop, lock, cpu_backend=cpu_backend, server_bin=server_bin,
                       engine_build=engine_build, engine_url=engine_url, executor_options=executor or {},
                       fixes=fixes, server_args=server_args)


def _resume(run_dir: Path, emit: Emit, say: Callable[[str], None], stop: threading.Event | None,
            lock: run_lock.Held | None, *, cpu_backend: str, server_bin: Path | None, engine_build: int | None,
            engine_url: tuple[str | None, dict[str, str]], executor_options: dict[str, Any],
            fixes: tuple[str, ...], server_args: tuple[str, ...]) -> RunResult:
    manifest = Manifest.load(run_dir)
    _check_layout(run_dir, manifest.run)
    odd = not_plain(run_dir)
    if odd:
        what = (f"a link, {odd[0].relative_to(run_dir)} -> {os.readlink(odd[0])}" if odd[0].is_symlink() else
                f"{odd[0].relative_to(run_dir)}, which is not a regular file or folder")
        raise KitError(f"{run_dir} holds {what}: a resume writes into the run folder, and a write through it could "
                       "land outside the folder or block", "replace it by a regular file (cp -rL copies a folder so, "
                       "links followed), then resume")
    if manifest.run.imported:
        raise KitError(f"{run_dir} was imported from {manifest.run.imported.from_}, not run: there is "
                       "nothing to resume", "import the harness's files again (`kit import`) if they changed")
    cut = records.cut_short(run_dir, manifest.run.passes)
    if manifest.run.status == "finished" and not cut:
        raise KitError(f"{run_dir} already finished", "nothing to resume; start a new run with `kit run`")
    saved = manifest.run.protocol
    text = check_stored_protocol(run_dir, saved)
    protocol = kinds.parse_text(text, f"{run_dir}/{MANIFEST} protocol", saved.overrides)
    kind = kinds.of(protocol)
    kept = saved_options(run_dir, manifest.run.options)
    if kept.pop("provider", None):
        raise KitError(f"{run_dir} ran against an engine reached by URL ({manifest.run.engine.kind}); "
                       "the kit cannot rebuild that connection to resume it", "start a new check")
    if kept.pop(runner.CREDENTIALS_DROPPED, None):
        raise KitError(f"{run_dir} ran against --engine-url "
                       f"{kept.get('engine_url') or kept.get('engine_urls')} whose credentials "
                       "were never stored, so the kit cannot reconnect to resume it", "start a new run")
    _resumed_engine_urls(run_dir, kept, engine_url)
    _resumed_fixes(run_dir, kept, fixes=fixes, server_args=server_args)
    engine = manifest.run.engine
    binary = _resumed_server_bin(run_dir, kept, engine, server_bin, say)
    kept["engine_build"] = resumed_build(run_dir, engine.to_json(), engine_build)
    paths = {key: Path(value) for key in PATH_OPTIONS if (value := kept.get(key))}
    recorded = manifest.run.provenance.cpu_backend
    if recorded is not None and not (isinstance(recorded, dict) and recorded.get("name") in ("wheel", *portable_backend.VARIANTS)
                                     and isinstance(recorded.get("library_sha256"), str)):
        raise KitError(f"{run_dir}/manifest.json: provenance.cpu_backend is not laid out as the kit records it",
                       "restore the manifest from its bundle")
    kept = executors.resumed(kept, executor_options)  # where to run: as asked now, never recorded
    options = runner.RunOptions(**{**kept, **paths, "server_bin": binary, "protocol": saved.file,
                            **resumed_cpu_backend(run_dir, recorded, cpu_backend),
                            "container_label": _container_label(engine.to_json()),
                            **_resumed_image(kept, engine.to_json())})
    try:
        preflight.check_run_options(options, kind, protocol)
    except KitError as exc:
        raise KitError(f"{run_dir}/manifest.json: a recorded option does not hold here: {exc.message}",
                       "start a new run") from exc
    prepared = kind.prepare(protocol, RunInputs(gsm8k=options.gsm8k, say=say))
    _same_inputs(run_dir, manifest.run.workload.to_json(), prepared.workload, "workload")
    provider = runner.provider_for(options, protocol, say)
    _same_inputs(run_dir, engine.to_json(), provider.describe(), "model")
    now_cpu = runner.cpu_record(provider)
    if recorded and (now_cpu or {}).get("library_sha256") != recorded["library_sha256"]:
        raise KitError(f"{run_dir} ran on the {recorded['name']} CPU backend with library sha256 "
                       f"{recorded['library_sha256'][:12]}…, but this machine's differs "
                       f"({(now_cpu or {}).get('library_sha256', 'none')[:12]}…): one run never mixes backends",
                       "resume it where it ran, or start a new run")
    executor = executors.make(options, kind, provider)
    stopped = leftover_servers.stop_leftovers(RunPaths(run_dir).logs, say)
    if options.container_label:  # containers a killed kit left: their logs kept, then removed (by the run's label)
        from kit.launch.docker.docker_run import remove_leftovers  # noqa: PLC0415

        stopped += remove_leftovers(options.container_label, RunPaths(run_dir).logs, say)
    redone = []
    for pass_id, info in list(manifest.run.passes.items()):
        if info.status in ("OK", "VOID") and pass_id not in cut:
            continue
        if pass_id in cut:
            say(f"pass {pass_id} ended {info.status} but is cut short ({cut[pass_id]}): running it again")
        manifest.supersede(pass_id)
        redone.append(pass_id)
    history = [*manifest.run.resumed, {"at": now(), "after_status": manifest.run.status, "passes_redone": redone,
                    "kept": list(manifest.run.passes), "fresh_engine": provider.fresh_servers,
                    "leftover_servers": stopped}]
    manifest.update(status="started", reason=None, resumed=history)
    return execution.execute(protocol, kind, prepared, provider, manifest, emit, say,
                    done=set(manifest.run.passes), stop=stop, bounds=options.bounds(),
                    lock=lock, executor=executor)


def _container_label(engine: dict[str, Any]) -> str | None:
    from kit.launch.docker.docker_run import recorded_label  # noqa: PLC0415

    return recorded_label(engine)


def _resumed_image(saved_options: dict[str, Any], engine: dict[str, Any]) -> dict[str, str]:
    """A docker run recorded without --image resumes on the kit image it ran (its default has changed:
    --gpus none now picks the cpu image), never on an image only the run folder names."""
    from kit.launch.docker.docker_run import recorded_kit_image  # noqa: PLC0415

    image = None if saved_options.get("image") else recorded_kit_image(engine)
    return {"image": image} if image else {}


def _same_inputs(run_dir: Path, recorded: dict[str, Any], now_found: dict[str, Any], what: str) -> None:
    """A resumed run reads the same data and serves the same model: found again, they must have the sha256
    the run recorded (a path the folder names is read, never trusted)."""
    key = "model_sha256" if what == "model" else "sha256"
    if recorded.get(key) and now_found.get(key) and recorded[key] != now_found[key]:
        raise KitError(f"{run_dir}: the {what} found at the recorded place has sha256 {str(now_found[key])[:12]}…, "
                       f"but the run recorded {str(recorded[key])[:12]}…: one run never mixes inputs",
                       "start a new run")


def check_stored_protocol(run_dir: Path, saved: ProtocolInfo, doing: str = "resume") -> str:
    """The protocol text the manifest keeps, which resume (and replay) run only if it still has the sha256
    recorded with it. A manifest without one is refused, whatever sha256 it records."""
    content, recorded = saved.content, saved.sha256
    if not isinstance(content, str) or sha256_text(content) != recorded:
        actual = sha256_text(content) if isinstance(content, str) else "none (no protocol text)"
        raise KitError(f"{run_dir}/manifest.json: the stored protocol text has sha256 {actual}, but the manifest "
                       f"records {recorded}; refusing to {doing} a run whose protocol was changed",
                       "restore the manifest from a bundle or start a new run")
    return content


def resumed_cpu_backend(run_dir: Path, recorded: dict[str, Any] | None, asked: str) -> dict[str, str]:
    """A resumed run keeps the CPU backend it ran with; asking for another is refused."""
    if not recorded:
        return {}
    if recorded["name"] not in ("wheel", "portable"):  # a backend only a fix runs on: the recorded fix applies it
        return {}
    if asked not in ("auto", recorded["name"]):
        raise KitError(f"{run_dir} ran on the {recorded['name']} CPU backend; --cpu-backend {asked} would mix "
                       "backends in one run", f"resume without --cpu-backend (or with {recorded['name']})")
    return {"cpu_backend": recorded["name"]}
