"""`kit doctor`: what this machine can run, one check per line (OK / MISSING / WARN, with the fix).

Each check is a small pure function of a `Probes` object, which holds every way the doctor looks at
the machine (the Docker daemon, commands, disk, ports, the embedded engine, the environment).
`default_probes()` looks at the real machine; tests pass their own probes.

The embedded engine counts as proven only after one real completion (kit.launch.llamacpp.embedded_proof), kept in
the kit cache per machine and reused until something it depends on changes or `--recheck` is given.
Without a start (`--no-start`, or before the first proof) it is installed but not proven: still a
way to run, marked so in the text and in the JSON's `unproven`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kit.launch.llamacpp import embedded_proof
from kit.core.errors import KitError

OK, MISSING, WARN = "OK", "MISSING", "WARN"
PROVE_FIX = "run `kit doctor` (it starts the engine for one short completion, a few seconds)"
RUN_DEMO_FIX = "run `kit demo` to see the full error, or use --server-bin / --engine-url"
UNPROVEN_MARK = "not proven yet: run `kit doctor`"
VLLM_INSTALL_FIX = "install it with `kit engines install vllm` (needs a GPU and network)"

# The ways of running an engine, and what each needs (check names); `runnable()` says which are open.
EMBEDDED_WAY = "embedded CPU engine"
DOCKER_WAY = "Docker GPU engines (llama.cpp, vLLM)"
DOCKER_CPU_WAY = "Docker CPU engine (llama.cpp container, no GPU)"
NATIVE_LLAMACPP_WAY = "native llama.cpp CUDA build"
NATIVE_VLLM_WAY = "native vLLM"
PATHS: dict[str, tuple[str, ...]] = {
    EMBEDDED_WAY: ("embedded engine",),
    DOCKER_WAY: ("docker daemon", "nvidia runtime", "gpu"),
    DOCKER_CPU_WAY: ("docker daemon", "cpu image"),
    NATIVE_LLAMACPP_WAY: ("gpu", "nvcc", "build tools"),
    NATIVE_VLLM_WAY: ("gpu", "vllm executable"),
}


@dataclass(frozen=True)
class Check:
    """One finding: its status, what was seen, and the fix when something is missing."""

    name: str
    status: str
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        text = f"{self.status:<8}{self.name}: {self.detail}"
        return f"{text}  -> {self.fix}" if self.fix and self.status != OK else text

    def sentence(self) -> str:
        """What is wrong and the fix, as one line for another program to show (the launcher)."""
        text = f"{self.name}: {self.detail}"
        return f"{text}; {self.fix}" if self.fix and self.status != OK else text


@dataclass(frozen=True)
class CommandResult:
    """What running a command gave: exit code and combined output."""

    code: int
    output: str


@dataclass
class Probes:
    """Every way the doctor looks at the machine. Each probe may raise; the check turns that into a line."""

    docker_info: Callable[[], dict[str, Any]]  # ping the daemon, then `docker info` as a dict
    docker_image: Callable[[str], dict[str, Any] | None]  # a local image by tag ({"id", "tags"}), None: absent
    run: Callable[[Sequence[str]], CommandResult | None]  # None when the command does not exist
    which: Callable[[str], str | None]
    disk_free: Callable[[Path], int]  # bytes free at a folder
    free_port: Callable[[], int]
    embedded_identity: Callable[[], dict[str, Any]]  # locate the embedded engine: its proof key and CPU backend
    prove_embedded: Callable[[], dict[str, Any]]  # start it, one short completion: what came back
    model_needs: Callable[[Sequence[str]], list[tuple[str, int | None, bool]]]  # (name, size, cached)
    cache_dir: Path
    environ: Mapping[str, str]
    hf_token_file: Path
    vllm_executable: Callable[[], Path]  # where `kit engines install vllm` puts `vllm`
    docker_llamacpp_images: Callable[[], list[dict[str, Any]]] = field(default=lambda: [])  # kit.launch.docker.docker_doctor
    docker_gpu_request: Callable[[str], None] = field(default=lambda image: None)  # raises when refused


# -- the checks -------------------------------------------------------------------------------


def check_docker_daemon(probes: Probes) -> Check:
    try:
        info = probes.docker_info()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"; the reason is shown
        return Check("docker daemon", MISSING, f"not reachable ({_short(exc)})",
                     "install Docker and start it (or set DOCKER_HOST); the native and embedded engines need none")
    return Check("docker daemon", OK, f"reachable, server {info.get('ServerVersion', '?')}",
                 data={"server_version": info.get("ServerVersion"), "runtimes": sorted(info.get("Runtimes") or {})})


def check_nvidia_runtime(probes: Probes, daemon: Check) -> Check:
    if daemon.status != OK:
        return Check("nvidia runtime", MISSING, "cannot tell without a Docker daemon", daemon.fix)
    runtimes = daemon.data.get("runtimes") or []
    if "nvidia" in runtimes:
        return Check("nvidia runtime", OK, f"Docker runtimes: {', '.join(runtimes)}")
    return Check("nvidia runtime", MISSING, f"Docker runtimes: {', '.join(runtimes) or 'none listed'}",
                 "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker`")


def check_vllm_image(probes: Probes, daemon: Check) -> Check:
    """The pinned vLLM image, present locally or not. Never blocks a way: the kit builds it from
    Dockerfile.vllm on the first vLLM container run (as it does the llama.cpp image)."""
    from kit.launch.docker.container_spec import VLLM_IMAGE  # noqa: PLC0415

    if daemon.status != OK:
        return Check("vllm image", WARN, "cannot tell without a Docker daemon", data={"image": VLLM_IMAGE})
    try:
        found = probes.docker_image(VLLM_IMAGE)
    except Exception as exc:  # noqa: BLE001 - shown, never fatal
        return Check("vllm image", WARN, f"cannot look up {VLLM_IMAGE} ({_short(exc)})", "check that Docker is running",
                     data={"image": VLLM_IMAGE})
    if found is None:
        return Check("vllm image", WARN, f"{VLLM_IMAGE} not built yet",
                     f"`docker build -f Dockerfile.vllm -t {VLLM_IMAGE} .` (needs network), or the kit builds it on "
                     "the first vLLM container run", data={"image": VLLM_IMAGE, "present": False})
    image_id = str(found.get("id") or "?")
    return Check("vllm image", OK, f"{VLLM_IMAGE} present ({image_id.removeprefix('sha256:')[:12]})",
                 data={"image": VLLM_IMAGE, "present": True, "id": image_id})


def check_vllm_executable(probes: Probes) -> Check:
    """The `vllm` of the venv `kit engines install vllm` makes (native vLLM runs it)."""
    try:
        path = probes.vllm_executable()
    except Exception as exc:  # noqa: BLE001 - shown, never fatal
        return Check("vllm executable", MISSING, f"cannot locate it: {_short(exc)}", VLLM_INSTALL_FIX)
    if not path.is_file():
        return Check("vllm executable", MISSING, f"not installed (no {path})", VLLM_INSTALL_FIX, {"path": str(path)})
    if not os.access(path, os.X_OK):
        return Check("vllm executable", MISSING, f"{path} is not executable", VLLM_INSTALL_FIX, {"path": str(path)})
    return Check("vllm executable", OK, str(path), data={"path": str(path)})


def check_gpu(probes: Probes) -> Check:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    result = probes.run(query)
    fix = "install the NVIDIA driver (nvidia-smi comes with it); on a CPU-only machine use the embedded engine"
    if result is None:
        return Check("gpu", MISSING, "nvidia-smi not found: no NVIDIA GPU visible", fix)
    if result.code != 0:
        return Check("gpu", MISSING, f"nvidia-smi failed: {_last_line(result.output)}", fix)
    gpus = [[part.strip() for part in line.split(",")] for line in result.output.splitlines() if line.strip()]
    if not gpus:
        return Check("gpu", MISSING, "nvidia-smi lists no GPU", fix)
    shown = "; ".join(f"{g[0]} ({g[2] if len(g) > 2 else '?'})" for g in gpus)
    driver = gpus[0][1] if len(gpus[0]) > 1 else "?"
    return Check("gpu", OK, f"{len(gpus)} GPU(s): {shown}; driver {driver}",
                 data={"gpus": [g[0] for g in gpus], "driver": driver})


NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def nvcc_release(output: str) -> tuple[int, int] | None:
    """(major, minor) from `nvcc --version` output, or None."""
    match = NVCC_RELEASE.search(output)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_nvcc(probes: Probes, gpu: Check | None = None) -> Check:
    """nvcc and its CUDA release. A release other than the pinned build's 12.x is a warning only where a GPU
    could use that build (`gpu` OK, or not given): on a CPU-only machine no CUDA build is made."""
    result = probes.run(["nvcc", "--version"])
    if result is None or result.code != 0:
        return Check("nvcc", MISSING, "nvcc not found",
                     "install the CUDA 12 toolkit (or put /usr/local/cuda/bin on PATH) for a native llama.cpp build")
    release = nvcc_release(result.output)
    if release is None:
        return Check("nvcc", WARN, f"cannot read its version: {_last_line(result.output)}", "check `nvcc --version`")
    shown = f"{release[0]}.{release[1]}"
    if release[0] != 12 and gpu is not None and gpu.status != OK:
        return Check("nvcc", OK, f"CUDA {shown} (no GPU here, so no native CUDA build is made: its CUDA 12.x pin "
                     "does not apply)", data={"release": shown})
    if release[0] != 12:
        return Check("nvcc", WARN, f"CUDA {shown}; the pinned llama.cpp build uses CUDA 12.x",
                     "install a CUDA 12 toolkit and put it first on PATH", data={"release": shown})
    return Check("nvcc", OK, f"CUDA {shown}", data={"release": shown})


def check_build_tools(probes: Probes) -> Check:
    from kit.launch import build_tools  # noqa: PLC0415

    missing = build_tools.missing(probes.which)
    if missing:
        return Check("build tools", MISSING, f"not found: {', '.join(missing)}", build_tools.fix(missing))
    return Check("build tools", OK, f"{', '.join(build_tools.TOOLS)} present")


def check_disk(probes: Probes, models: Sequence[str]) -> Check:
    try:
        needs = probes.model_needs(models)
        free = probes.disk_free(probes.cache_dir)
    except Exception as exc:  # noqa: BLE001 - e.g. an unknown model name; shown, never fatal
        return Check("disk", WARN, f"cannot size the models: {_short(exc)}", "check the model names")
    to_fetch = [(name, size) for name, size, cached in needs if not cached]
    known = sum(size for _, size in to_fetch if size)
    unknown = [name for name, size in to_fetch if not size]
    detail = f"{_gib(free)} free in {probes.cache_dir}; models to fetch need {_gib(known)}"
    if unknown:
        detail += f" plus unknown sizes ({', '.join(unknown)})"
    data = {"free_bytes": free, "needed_bytes": known, "unknown_sizes": unknown}
    if known > free:
        return Check("disk", MISSING, detail, "free space or point KIT_CACHE_DIR at a bigger disk", data)
    if unknown:
        return Check("disk", WARN, detail, "make sure the cache disk has room for them", data)
    return Check("disk", OK, detail, data=data)


def check_port(probes: Probes) -> Check:
    try:
        port = probes.free_port()
    except OSError as exc:
        return Check("loopback port", MISSING, f"cannot bind 127.0.0.1 ({exc})", "check the loopback interface")
    return Check("loopback port", OK, f"127.0.0.1:{port} is free", data={"port": port})


def check_embedded(probes: Probes, start: bool = True, recheck: bool = False) -> Check:
    """Proven (one real completion, now or kept from before), installed but not proven, or missing."""
    try:
        identity = probes.embedded_identity()
    except KitError as exc:
        return Check("embedded engine", MISSING, exc.message, exc.fix)
    except Exception as exc:  # noqa: BLE001 - report, do not crash the doctor
        return Check("embedded engine", MISSING, f"cannot locate it: {_short(exc)}", RUN_DEMO_FIX)
    kept = embedded_proof.load(probes.cache_dir, identity["key"])
    if kept and kept["ok"] and not recheck:
        return _proven(kept, cached=True)
    if not start:
        return _unproven(identity, kept)
    try:
        proof = embedded_proof.record(identity, probes.prove_embedded())
    except KitError as exc:
        proof = embedded_proof.record(identity, None, (exc.message, exc.fix))
    except Exception as exc:  # noqa: BLE001 - report, do not crash the doctor
        proof = embedded_proof.record(identity, None, (f"failed: {_short(exc)}", RUN_DEMO_FIX))
    embedded_proof.save(probes.cache_dir, proof)
    if not proof["ok"]:
        return Check("embedded engine", MISSING, f"its proof failed: {proof['error']}", proof["fix"],
                     {**proof, "installed": True, "proven": False, "cached": False})
    return _proven(proof, cached=False)


def _proven(proof: dict[str, Any], cached: bool) -> Check:
    backend = proof.get("cpu_backend") or {}
    backend_text = f"{backend.get('name')} CPU backend" + (" (rebuilt here)" if backend.get("rebuilt_here") else "")
    when = f"proven {embedded_proof.when(proof)} (cached; --recheck proves it again)" if cached else "proven now"
    return Check("embedded engine", OK,
                 f"{when}: {proof.get('tokens')} tokens in {proof.get('completion_seconds')} s on the {backend_text}, "
                 f"build {proof.get('build_info')}, started in {proof.get('startup_seconds')} s",
                 data={**proof, "installed": True, "proven": True, "cached": cached})


def _unproven(identity: dict[str, Any], kept: dict[str, Any] | None) -> Check:
    """--no-start: installed, with the last failed proof when there is one (then it is not a way to run)."""
    backend = identity["cpu_backend"].get("name")
    data = {**identity, "installed": True, "proven": False, "cached": kept is not None}
    if kept is not None:
        return Check("embedded engine", MISSING, f"its last proof ({embedded_proof.when(kept)}) failed: {kept['error']}",
                     kept.get("fix") or PROVE_FIX, {**kept, **data})
    return Check("embedded engine", WARN, f"installed ({backend} CPU backend) but not proven on this machine",
                 PROVE_FIX, data)


def unproven(check: Check) -> bool:
    """Installed but not yet proven by a completion (only the embedded engine is proven that way)."""
    return check.status == WARN and check.data.get("installed") is True and check.data.get("proven") is False


def check_hf_token(probes: Probes) -> Check:
    present = bool(probes.environ.get("HF_TOKEN") or probes.environ.get("HUGGING_FACE_HUB_TOKEN")
                   or probes.hf_token_file.is_file())
    if present:
        return Check("hf token", OK, "present")
    return Check("hf token", WARN, "absent (only gated Hugging Face models need one)",
                 "export HF_TOKEN=... or run `huggingface-cli login` if you use gated models")


def run_checks(probes: Probes, models: Sequence[str] = (), start_engine: bool = True,
               recheck: bool = False) -> list[Check]:
    """All checks, in the order they are shown; `models` are the registry names to size (none: the default).
    `start_engine` False proves nothing new (a kept proof still counts); `recheck` proves the embedded
    engine again even when a kept proof holds."""
    if not models:
        from kit.models.registry import DEFAULT_MODEL  # noqa: PLC0415 - kit.models is heavy to import

        models = (DEFAULT_MODEL,)
    daemon, gpu = check_docker_daemon(probes), check_gpu(probes)
    from kit.launch.docker import docker_doctor  # noqa: PLC0415

    return [daemon, check_nvidia_runtime(probes, daemon), check_vllm_image(probes, daemon),
            *docker_doctor.checks(probes, daemon, Check, OK, WARN, MISSING), gpu,
            check_nvcc(probes, gpu), check_build_tools(probes), check_vllm_executable(probes),
            check_disk(probes, models), check_port(probes), check_embedded(probes, start=start_engine, recheck=recheck),
            check_hf_token(probes)]


def usable(check: Check) -> bool:
    """Does this check allow the ways that need it? (nvcc 13 still counts as present; an installed embedded
    engine not proven yet counts, and `unproven_ways` names it.)"""
    return check.status == OK or unproven(check) or (check.name == "nvcc" and check.status == WARN)


def runnable(checks: Sequence[Check]) -> list[str]:
    """The ways of running an engine that every needed check allows."""
    allowed = {c.name for c in checks if usable(c)}
    return [path for path, needs in PATHS.items() if all(name in allowed for name in needs)]


def blocking(checks: Sequence[Check], way: str) -> Check | None:
    """The first check this way needs that does not allow it (None: the way is open)."""
    found = {c.name: c for c in checks}
    return next((found[name] for name in PATHS[way] if name in found and not usable(found[name])), None)


def unproven_ways(checks: Sequence[Check]) -> list[str]:
    """The runnable ways that rest on an engine not proven by a completion yet."""
    waiting = {c.name for c in checks if unproven(c)}
    return [path for path in runnable(checks) if waiting & set(PATHS[path])]


def can_run_line(checks: Sequence[Check]) -> str:
    waiting = unproven_ways(checks)
    ways = [f"{way} ({UNPROVEN_MARK})" if way in waiting else way for way in runnable(checks)]
    return f"can run: {', '.join(ways) or 'nothing'}"


# The checks that only the GPU ways need (a GPU engine in Docker, a native CUDA build, native vLLM): on a
# machine with no GPU they do not matter, and the text report names them on one line instead of a line each.
GPU_ONLY = ("nvidia runtime", "vllm image", "gpu request", "gpu", "nvcc", "vllm executable")
NOT_NEEDED = "not needed here (no GPU)"


def not_needed(checks: Sequence[Check]) -> list[Check]:
    """The checks that do not matter on this machine: the GPU-only ones where no GPU is visible (and none of
    them is OK: a machine with a working GPU runtime but no GPU listed still shows them)."""
    gpu = next((c for c in checks if c.name == "gpu"), None)
    if gpu is None or gpu.status == OK:
        return []
    found = [c for c in checks if c.name in GPU_ONLY]
    return [] if any(c.status == OK and c.name != "nvcc" for c in found) else found


def lines(checks: Sequence[Check]) -> list[str]:
    """The text report: a line per check that matters here, one line naming those that do not, and what
    can run."""
    aside = not_needed(checks)
    shown = [check.line() for check in checks if check not in aside]
    if aside:
        shown.append(f"{'-':<8}{NOT_NEEDED}: {', '.join(c.name for c in aside)} (each with its fix: kit doctor --json)")
    return [*shown, can_run_line(checks)]


def report(checks: Sequence[Check]) -> dict[str, Any]:
    """The --json form: every check (those `not_needed` too), the ways open, and which of them are not proven yet."""
    return {"checks": [asdict(c) for c in checks], "can_run": runnable(checks), "unproven": unproven_ways(checks)}


# -- the real machine -------------------------------------------------------------------------


def _docker_info(timeout_s: float = 3.0) -> dict[str, Any]:
    import docker  # noqa: PLC0415 - only when the doctor looks

    client = docker.from_env(timeout=timeout_s)
    try:
        client.ping()
        return client.info()
    finally:
        client.close()


def _docker_image(reference: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    import docker  # noqa: PLC0415 - only when the doctor looks

    client = docker.from_env(timeout=timeout_s)
    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        return None
    finally:
        client.close()
    return {"id": image.id, "tags": list(image.tags)}


def _vllm_executable() -> Path:
    from kit.launch.gpu_setup import default_vllm_venv  # noqa: PLC0415

    return default_vllm_venv() / "bin" / "vllm"


def _run(argv: Sequence[str], timeout_s: float = 10.0) -> CommandResult | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CommandResult(1, str(exc))
    return CommandResult(done.returncode, (done.stdout + done.stderr).strip())


def _free_port() -> int:
    from kit.launch.native import free_port  # noqa: PLC0415

    return free_port()


def _model_needs(names: Sequence[str]) -> list[tuple[str, int | None, bool]]:
    from kit.models import default_cache_dir, load_registry  # noqa: PLC0415

    registry, cache = load_registry(), default_cache_dir()
    needs = []
    for name in names:
        entry = registry.model(name)
        needs.append((name, entry.size, (cache / entry.file).is_file()))
    return needs


def _located(choice: str):
    from kit.launch.llamacpp import embedded  # noqa: PLC0415

    return embedded.locate(choice, build_if_needed=False, say=lambda _line: None)


def _embedded_identity(choice: str) -> dict[str, Any]:
    from kit.launch.cpu import cpu_backend  # noqa: PLC0415

    return embedded_proof.identity(_located(choice), choice, cpu_backend.cpu_flags())


def _prove_embedded(choice: str, cache: Path) -> dict[str, Any]:
    """Start the embedded engine with the default model (if already fetched): one short completion."""
    from kit.models import DEFAULT_MODEL, default_cache_dir, ensure_model, load_registry  # noqa: PLC0415

    found = _located(choice)
    entry = load_registry().model(DEFAULT_MODEL)
    if not (default_cache_dir() / entry.file).is_file():
        raise KitError(f"the default model {DEFAULT_MODEL} is not downloaded yet",
                       f"run `kit models pull {DEFAULT_MODEL}` (about {_gib(entry.size or 0)})")
    return embedded_proof.run(found, ensure_model(DEFAULT_MODEL).path, embedded_proof.server_log(cache))


def default_probes(cpu_backend: str = "auto") -> Probes:
    """The real machine; the embedded engine with this --cpu-backend choice."""
    from kit.launch.docker import docker_doctor  # noqa: PLC0415
    from kit.core.paths import cache_dir  # noqa: PLC0415

    environ = dict(os.environ)
    hf_home = Path(environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    cache = cache_dir()
    return Probes(docker_info=_docker_info, docker_image=_docker_image, run=_run, which=shutil.which,
                  disk_free=lambda path: shutil.disk_usage(path).free, free_port=_free_port,
                  embedded_identity=lambda: _embedded_identity(cpu_backend),
                  prove_embedded=lambda: _prove_embedded(cpu_backend, cache), model_needs=_model_needs,
                  cache_dir=cache, environ=environ, hf_token_file=hf_home / "token", vllm_executable=_vllm_executable,
                  docker_llamacpp_images=docker_doctor.llamacpp_images, docker_gpu_request=docker_doctor.gpu_request)


# -- small helpers ----------------------------------------------------------------------------


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"
