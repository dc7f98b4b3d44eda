"""The setup form's rules, without Textual: engine choices, field checks that explain themselves, and
the RunOptions the runner gets. Each check returns None (fine) or one line saying what is wrong."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from kit.core.errors import KitError
from kit.engines import registry as engines
from kit.tui.catalog import CPU_FIGURE, ENGINES, Capabilities, EngineChoice, kind_needs, kind_ways

if TYPE_CHECKING:
    from kit.protocols.kind import Launcher

GGUF_MAGIC = b"GGUF"
HF_ID = re.compile(r"[\w.-]+/[\w.-]+")  # a Hugging Face model id: Org/Name


CPU_BACKENDS = {  # the embedded engine's --cpu-backend choices (kit.launch.cpu.cpu_backend.CHOICES)
    "auto": "auto (the wheel's where this CPU allows, else portable)",
    "wheel": "wheel (prebuilt, Sapphire Rapids-class CPUs)",
    "portable": "portable (AVX2, built here once)",
}
ENDPOINT_KINDS = engines.endpoint_kinds()
EXECUTORS = {  # where the passes run (RunOptions.executor, `kit run --executor`; docs/ray.md)
    "local": "this process (one pass after another)",
    "ray": "Ray (a local cluster, or the address below)",
}
RAY_ADDRESS = re.compile(r"(ray://)?[\w.-]+:\d{1,5}")  # ray://HOST:PORT (Ray Client) or HOST:PORT (a head's GCS)


def choice_of(key: str) -> EngineChoice:
    return next(c for c in ENGINES if c.key == key)


def engine_problem(choice: EngineChoice, caps: Capabilities, kind: str, protocol: str = "") -> str | None:
    """Why this engine cannot be used here for this kind of protocol (`protocol`: its file), or None."""
    engine = engines.named(choice.engine)
    if choice.doctor_way is not None and not engine.runs_written_for(engines.named(written_for(protocol))):
        return written_for_problem(protocol)
    if engine.arm_per_server:
        if problem := serving_problem(engine, protocol):
            return problem
    elif choice.way not in kind_ways(kind):
        return f"{kind} protocols cannot use {choice.label}: they need {kind_needs(kind)}"
    if choice.doctor_way and caps.checked and choice.doctor_way not in caps.ways:
        return caps.why_not.get(choice.doctor_way) or f"{choice.label}: `kit doctor` says this machine cannot run it"
    return None


def written_for(protocol: str) -> str:
    """The engine a protocol file is written for (its engine.kind; llama.cpp for a file that does not load)."""
    try:
        return loaded_protocol(protocol).engine.kind if protocol else engines.DEFAULT
    except KitError:
        return engines.DEFAULT


def written_for_problem(protocol: str) -> str:
    """A file written for an engine with a server per cache arm (vLLM) runs on that engine only: pick one of its ways."""
    engine = engines.named(written_for(protocol))
    ways = [choice.label for choice in ENGINES if choice.engine == engine.name]
    return (f"{Path(protocol).stem} is written for {engine.label} (engine.kind: {engine.name}): pick "
            f"{', '.join(ways)} or your own {engine.label} servers")


def serving_problem(engine: engines.EngineKind, protocol: str) -> str | None:
    """Why `engine` cannot run this protocol file (the runner's rules, kit.protocols.kinds.refuse_unserved), or None."""
    from kit.protocols import kinds  # noqa: PLC0415 - the registry loads once a form opens

    try:
        loaded = loaded_protocol(protocol)
    except KitError as exc:
        return exc.line()
    try:
        kinds.refuse_unserved(loaded, engine, starts_servers=False)
    except KitError as exc:
        if not kinds.serves(kinds.of(loaded), engine):  # its fix names the CLI's --engine
            default = engines.named(engines.DEFAULT).label
            return f"{exc.message}: pick a {default} engine, or a {engine.label} protocol ({protocols_for(engine.name)})"
        return exc.line()
    return None


@functools.cache
def protocols_for(engine: str) -> str:
    """The kit's own protocol files written for `engine` (their `engine.kind`), named as a list in words."""
    import yaml  # noqa: PLC0415

    from kit.core.paths import protocols_dir  # noqa: PLC0415
    from kit.tui.catalog import written_for as file_written_for  # noqa: PLC0415

    names = [path.stem for path in sorted(protocols_dir().glob("*.yaml"), key=lambda path: path.stem)
             if file_written_for(data if isinstance(data := yaml.safe_load(path.read_text()), dict) else {}) == engine]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def reused_server_problem(engine: str, protocol: str) -> str | None:
    """A protocol that starts a fresh server per pass cannot run on servers reached by URL (the runner's rule,
    kit.run.runner.refuse_reused_servers), or None."""
    from kit.protocols.kinds import of  # noqa: PLC0415
    from kit.run.runner import refuse_reused_servers  # noqa: PLC0415

    try:
        loaded = loaded_protocol(protocol)
    except KitError as exc:
        return exc.line()
    try:
        refuse_reused_servers(loaded, of(loaded), SimpleNamespace(fresh_servers=False))
    except KitError as exc:  # its fix names the CLI's --engine-url
        pick = ("grid-vllm (a server per cache arm)" if engines.named(engine).arm_per_server
                else "a protocol with server: shared or per_arm")
        return f"{exc.message}: pick {pick}, or an engine the kit starts"
    return None


def loaded_protocol(protocol: str) -> Any:
    """The protocol file, validated as the runner loads it (kept while the file is unchanged)."""
    try:
        stamp = Path(protocol).stat().st_mtime_ns
    except OSError:
        stamp = None
    return _load(protocol, stamp)


@functools.lru_cache(maxsize=16)
def _load(protocol: str, stamp: int | None) -> Any:
    from kit.protocols.kinds import load  # noqa: PLC0415

    return load(protocol)[0]


def usable_engine(kind: str, caps: Capabilities, protocol: str = "") -> str:
    """The first engine choice this kind of protocol (`protocol`: its file) can use here (the embedded engine
    when none can)."""
    return next((c.key for c in ENGINES if engine_problem(c, caps, kind, protocol) is None), "embedded")


def check_url(text: str) -> str | None:
    text = text.strip()
    if not text:
        return "give the engine's base URL, e.g. http://127.0.0.1:8080"
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https"):
        return f"{text!r} is not an http(s) URL; write it like http://127.0.0.1:8080"
    if not parsed.hostname:
        return "the URL has no host; write it like http://127.0.0.1:8080"
    try:
        parsed.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "the port must be a number from 1 to 65535"
    if parsed.path not in ("", "/"):
        return "give the server's base URL without a path (the kit adds the API path itself)"
    return None


def check_model(text: str, known: set[str]) -> str | None:
    """Empty (the default model), a registry name, or a path to a GGUF file."""
    text = text.strip()
    if not text or text in known:
        return None
    path = Path(text).expanduser()
    if not path.suffix and "/" not in text:
        return f"{text!r} is not a model in the registry (`kit models list`) and not a file path"
    if not path.is_file():
        return f"no file at {path}; give a GGUF file or a registry model name"
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            return f"{path.name} is not a GGUF file (it does not start with 'GGUF')"
    return None


@dataclass(frozen=True)
class RegistryNames:
    models: frozenset[str] = frozenset()  # GGUF models llama.cpp serves
    checkpoints: frozenset[str] = frozenset()  # checkpoints vLLM serves


@functools.cache
def registry_names() -> RegistryNames:
    """The model registry's names (kit/models/registry.yaml), read once."""
    try:
        from kit.models import load_registry  # noqa: PLC0415

        registry = load_registry()
    except Exception:  # noqa: BLE001 - a broken registry only costs the names (paths and Org/Name ids still work)
        return RegistryNames()
    return RegistryNames(frozenset(registry.models), frozenset(registry.checkpoints))


def check_checkpoint(text: str, known: frozenset[str] | set[str]) -> str | None:
    """Empty (the default checkpoint), a registry checkpoint name, a Hugging Face id (Org/Name) or a folder."""
    text = text.strip()
    if not text or text in known:
        return None
    path = Path(text).expanduser()
    if path.is_dir():
        return None
    give = f"give a checkpoint from the registry ({', '.join(sorted(known)) or 'none'}), a Hugging Face id " \
           "(Org/Name) or a checkpoint folder"
    if path.suffix == ".gguf":
        return f"{path.name} is a GGUF file, which runs on llama.cpp, not vLLM: {give}"
    if text.startswith(("/", ".", "~")) or path.exists():
        return f"no checkpoint folder at {path}: {give}"
    if not HF_ID.fullmatch(text):
        return f"{text!r} is not a vLLM checkpoint: {give}"
    return None


def check_arm_urls(on: str, off: str) -> dict[str, str | None]:
    """The vLLM servers of the two cache arms: each a base URL, and two different servers."""
    found = {name: check_url(text) if text.strip() else f"give the base URL of the vLLM server started with {flag}"
             for name, text, flag in (("url_on", on, "--enable-prefix-caching"),
                                      ("url_off", off, "--no-enable-prefix-caching"))}
    if not any(found.values()) and base_url(on).lower() == base_url(off).lower():
        found["url_off"] = ("this is the cache-on server again, but vLLM fixes prefix caching per server process: "
                            "start one server per arm and give each its URL")
    return found


def base_url(text: str) -> str:
    return text.strip().rstrip("/")


def check_binary(text: str) -> str | None:
    path = Path(text.strip()).expanduser()
    if not text.strip():
        return "give the path of the llama-server binary your GPU build made"
    if not path.is_file():
        return f"no file at {path} (build one with `kit engines build llamacpp`)"
    if not path.stat().st_mode & 0o111:
        return f"{path} is not executable"
    return None


def check_count(text: str, low: int = 1, high: int = 100_000) -> str | None:
    try:
        value = int(text.strip())
    except ValueError:
        return f"{text!r} is not a whole number"
    if not low <= value <= high:
        return f"choose a number from {low} to {high}"
    return None


def check_out(text: str) -> str | None:
    path = Path(text.strip()).expanduser()
    if not text.strip():
        return "give a folder for the run folder"
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    parent = next((p for p in (path, *path.parents) if p.exists()), None)
    if parent is None or not parent.is_dir():
        return f"cannot create {path}"
    return None


@dataclass
class Setup:
    """What the form holds: every value as typed."""

    protocol: str
    kind: str
    engine: str = "embedded"
    cpu_backend: str = "auto"  # the embedded engine's CPU backend (CPU_BACKENDS)
    model: str = ""
    url: str = ""  # a llama.cpp endpoint
    url_on: str = ""  # a vLLM endpoint: the cache-on server (--enable-prefix-caching)
    url_off: str = ""  # ... and the cache-off server (--no-enable-prefix-caching)
    endpoint_kind: str = engines.DEFAULT
    server_bin: str = ""
    size: str = ""  # the numbers the kind's launcher entry asks for (kit.protocols.kind.Launcher):
    repeats: str = ""  # e.g. items, sessions and max tokens of a reset; episodes and histories of a sweep
    max_tokens: str = ""
    out: str = ""
    executor: str = "local"  # EXECUTORS; offered for kinds whose units may run on Ray (Kind.units)
    ray_address: str = ""  # executor ray: empty (a local Ray instance), auto, or ray://HOST:PORT
    fixes: tuple[str, ...] = ()  # named fixes picked from the registry (kit.launch.llamacpp.fixes.NAMED), as `--fix NAME`
    more_fixes: str = ""  # fixes of the registry's families typed by name (chunk-16 threads-4), also `--fix`
    server_args: str = ""  # llama-server flags the registry does not name, space-separated: each a `--server-arg`
    engine_build: str = ""  # llama.cpp build N built here (`--engine-build N`); empty: the paper's (embedded)
    passes: int = 4  # the file's passes, not edited (a grid's estimate counts them)
    extra: dict[str, Any] = field(default_factory=dict)
    file_numbers: dict[str, str] = field(default_factory=dict)  # the file's own numbers: left as they are, no override


SETUP_FIELDS = frozenset(f.name for f in dataclasses.fields(Setup))

def problems(setup: Setup, caps: Capabilities, known_models: set[str]) -> dict[str, str]:
    """Field name -> what is wrong with it, for every field the chosen engine uses."""
    found: dict[str, str | None] = {}
    choice = choice_of(setup.engine)
    found["engine"] = engine_problem(choice, caps, setup.kind, setup.protocol)
    if setup.engine == "endpoint":
        found["engine"] = found["engine"] or reused_server_problem(setup.endpoint_kind, setup.protocol)
        endpoint = engines.named(setup.endpoint_kind)
        if endpoint.arm_per_server:
            found["endpoint_kind"] = serving_problem(endpoint, setup.protocol)
            found.update(check_arm_urls(setup.url_on, setup.url_off))
        else:
            if not endpoint.runs_written_for(engines.named(written_for(setup.protocol))):
                found["endpoint_kind"] = written_for_problem(setup.protocol)
            found["url"] = check_url(setup.url)
    elif engines.named(choice.engine).checkpoint:
        found["model"] = check_checkpoint(setup.model, registry_names().checkpoints)
    else:
        found["model"] = check_model(setup.model, known_models)
    if setup.engine == "native":
        found["server_bin"] = check_binary(setup.server_bin)
    for name, number in kind_launcher(setup.kind).numbers().items():
        found[name] = check_count(getattr(setup, name), 1, number.high)
    found["out"] = check_out(setup.out)
    found["engine_build"] = engine_build_problem(setup)
    found["fixes"] = fixes_problem(setup)
    found["executor"] = executor_problem(setup)
    if setup.executor == "ray":
        found["ray_address"] = check_ray_address(setup.ray_address)
    return {name: text for name, text in found.items() if text}


def fix_choices() -> list[tuple[str, str]]:
    """The registry's named fixes, each with what it is meant to close (kit.launch.llamacpp.fixes.NAMED)."""
    from kit.launch.llamacpp import fixes  # noqa: PLC0415

    return [(fix.name, fix.closes) for fix in fixes.NAMED.values()]


def fix_families() -> str:
    """The registry's fix families (chunk-N, threads-N), as the field for them names them."""
    from kit.launch.llamacpp import fixes  # noqa: PLC0415

    return "; ".join(fixes.FAMILIES.values())


def fix_names(setup: Setup) -> tuple[str, ...]:
    """The fixes the form applies, in the order `--fix` would name them: those picked, then those typed."""
    return (*setup.fixes, *setup.more_fixes.split())


def engine_build_number(setup: Setup) -> int | None:
    """The build the engine build field names for the embedded engine's choice (None: the paper's, or a
    field that does not hold a build number: engine_build_problem says so)."""
    text = setup.engine_build.strip()
    return int(text) if setup.engine == "embedded" and text.isascii() and text.isdecimal() else None


def builds_here(setup: Setup) -> list[int]:
    """The llama.cpp builds made here for the CPU backend the form's engine build would run on."""
    return builds_made_here(setup.cpu_backend)


PAPER_BUILD = "llama.cpp build N; empty: the paper's (the embedded engine, 7e4c0a9)"


def build_hint(cpu_backend: str) -> tuple[str, list[str]]:
    """An engine build field's placeholder and suggestions: the builds made here (kit engines build llamacpp)."""
    built = [str(number) for number in builds_made_here(cpu_backend)]
    return PAPER_BUILD + (f"; built here: {', '.join(built)}" if built else
                          "; none other built here (kit engines build llamacpp --build N)"), built


def builds_made_here(cpu_backend: str) -> list[int]:
    """The llama.cpp builds made here for the CPU backend an engine build would run on (none for `wheel`)."""
    from kit.launch.llamacpp import llamacpp_build  # noqa: PLC0415

    try:
        backend = llamacpp_build.check_backend(cpu_backend)
    except KitError:
        return []
    return llamacpp_build.builds_here(backend)


def engine_build_problem(setup: Setup) -> str | None:
    """Why the run cannot use the build the field names, or None."""
    if setup.engine != "embedded" or not setup.engine_build.strip():
        return None
    try:
        build_made_here(setup.engine_build, engine_options(setup))
    except KitError as exc:
        return exc.line()
    return None


def build_made_here(text: str, options: Any) -> int | None:
    """The llama.cpp build an engine build field names for a run of `options` (None: empty, the paper's build),
    refused (KitError) as the runner refuses it (kit.run.engine_build) and where it is not a build made here
    for the run's CPU backend: a form never starts a build. The setup form's field and the replay's ask."""
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdecimal()):
        raise KitError(f"{text[:40]!r} is not a llama.cpp build number (e.g. 11434)",
                       "leave it empty for the paper's build")
    from kit.launch.llamacpp import llamacpp_build  # noqa: PLC0415
    from kit.run import engine_build  # noqa: PLC0415

    options = dataclasses.replace(options, engine_build=int(text))
    engine_build.check(options)
    llamacpp_build.record(int(text), llamacpp_build.check_backend(options.cpu_backend))
    return int(text)


def fixes_problem(setup: Setup) -> str | None:
    """Why the run cannot apply the fixes and server flags the form names with its engine, or the protocol's
    arms theirs (the check `kit run --fix` and `--server-arg` make: kit.run.preflight.check_fixes), or None. A file that does not load is left
    to the engine field, which names what is wrong with it."""
    from kit.protocols.kinds import of  # noqa: PLC0415
    from kit.run import preflight  # noqa: PLC0415

    try:
        loaded = loaded_protocol(setup.protocol)
    except KitError:
        return None
    try:
        preflight.check_fixes(engine_options(setup), of(loaded), loaded)
    except KitError as exc:
        return exc.line()
    return None


def offers_executors(kind: str) -> bool:
    """Whether the form offers where the passes run: for kinds whose procedure hands its units to the
    executor (Kind.units); the others run their passes in this process only."""
    from kit.protocols.kinds import KINDS  # noqa: PLC0415 - the registry loads once a form opens

    return KINDS[kind].units


def executor_problem(setup: Setup) -> str | None:
    """Why the passes cannot run where the form says (the runner's rules, kit.run.executors), or None."""
    if setup.executor == "local":
        return None
    from kit.protocols.kinds import KINDS  # noqa: PLC0415
    from kit.run import executors  # noqa: PLC0415 - never imports Ray itself

    try:
        executors.check(SimpleNamespace(executor=setup.executor), KINDS[setup.kind])
    except KitError as exc:
        return exc.line()
    choice = choice_of(setup.engine)
    # executors.make: a Ray task starts its unit's llama.cpp engine on its node (the embedded engine or a binary)
    if setup.engine == "endpoint" or choice.launcher != "native" or engines.named(choice.engine).checkpoint:
        return (f"Ray runs each unit's engine on the node that runs it: the embedded engine or a native GPU build, "
                f"not {choice.label}; pick one of those, or run in this process")
    return None


def check_ray_address(text: str) -> str | None:
    text = text.strip()
    if not text or text == "auto" or RAY_ADDRESS.fullmatch(text):
        return None
    return (f"{text!r} is not a Ray address: leave it empty (a local Ray on this machine), write auto (the cluster "
            "`ray start` runs here) or ray://HOST:PORT")


def kind_launcher(kind: str) -> Launcher:
    """The kind's launcher entry (which numbers the form asks for), from the registry."""
    from kit.protocols.kinds import KINDS  # noqa: PLC0415 - the registry loads once a form opens

    return KINDS[kind].launcher


def overrides(setup: Setup, every: bool = False) -> dict[str, Any]:
    """The protocol overrides the form's numbers stand for: those changed from the file's own (as `kit run`
    records only the options given), or with `every` all of them (an estimate needs every number)."""
    from kit.protocols.spec import merge  # noqa: PLC0415

    found: dict[str, Any] = {}
    for name, number in kind_launcher(setup.kind).numbers().items():
        value = int(getattr(setup, name))
        unchanged = name in setup.file_numbers and value == int(setup.file_numbers[name])
        if number.key is not None and (every or not unchanged):
            found = merge(found, number.override(value))
    return {**found, **setup.extra}


def engine_options(setup: Setup):
    """The RunOptions of the form's engine: where it comes from, its build and its fixes (what the runner's
    engine and fix checks read), with the protocol's own numbers."""
    from kit.run.runner import RunOptions  # noqa: PLC0415 - the run machinery loads only when a form checks it

    choice = choice_of(setup.engine)
    endpoint = setup.engine == "endpoint"
    engine = setup.endpoint_kind if endpoint else choice.engine
    by_arm = endpoint and engines.named(engine).arm_per_server
    return RunOptions(protocol=setup.protocol, engine=engine,
                      server_bin=Path(setup.server_bin).expanduser() if setup.engine == "native" else None,
                      engine_build=engine_build_number(setup),
                      engine_url=base_url(setup.url) if endpoint and not by_arm else None,
                      engine_urls={"on": base_url(setup.url_on), "off": base_url(setup.url_off)} if by_arm else {},
                      launcher=choice.launcher, image=choice.image, gpus=choice.gpus,
                      cpu_backend=setup.cpu_backend if setup.engine == "embedded" else "auto",
                      fixes=fix_names(setup), server_args=tuple(setup.server_args.split()))


def run_options(setup: Setup):
    """RunOptions for a form without problems."""
    from kit.run.executor_cli import chosen  # noqa: PLC0415

    options = engine_options(setup)
    model = setup.model.strip()
    if engines.named(options.engine).checkpoint and model and Path(model).expanduser().is_dir():
        model = str(Path(model).expanduser())  # a checkpoint folder, as vLLM is given it
    return dataclasses.replace(options, overrides=overrides(setup),
                               model=None if setup.engine == "endpoint" or not model else model,
                               out=Path(setup.out).expanduser(),
                               # as `--executor ray --ray-address ...` gives them (the CLI's defaults per task)
                               **chosen(setup.executor, setup.ray_address.strip() or None, 1.0, 0.0))


def long_run(options: Any):
    """What makes these RunOptions ask first (kit.run.long_runs: past an hour on the CPU engine here), or None;
    a protocol that does not load is left to the run, which names what is wrong with it."""
    from kit.protocols import kinds  # noqa: PLC0415
    from kit.run import long_runs  # noqa: PLC0415

    try:
        protocol, path, _ = kinds.load(options.protocol, options.overrides)
    except KitError:
        return None
    return long_runs.asking(options, protocol, path)


def defaults(protocol: str, kind: str, data: dict[str, Any], out: Path) -> Setup:
    """A form that runs as it is: the protocol file's own numbers, the embedded engine, outputs/."""
    numbers = {name: str(number.value(data)) for name, number in kind_launcher(kind).numbers().items()}
    written = written_for(protocol)
    endpoint_kind = written if written in ENDPOINT_KINDS else engines.DEFAULT
    setup = Setup(protocol, kind, out=str(out), passes=len(data.get("passes") or ()) or 4, endpoint_kind=endpoint_kind,
                  file_numbers=dict(numbers))
    for name, value in numbers.items():  # the kind's numbers are the form's own fields (kit.protocols.kind.Launcher)
        if name not in SETUP_FIELDS:
            raise ValueError(f"the {kind} launcher's number {name!r} is no field of the setup form")
        setattr(setup, name, value)
    return setup


def estimate_line(setup: Setup) -> str:
    """The duration this setup would take on a CPU, as the picker estimates it (before any measurement),
    from the form's numbers and the file's passes."""
    try:
        numbers = overrides(setup, every=True)
    except ValueError:
        return "fix the numbers to see an estimate"
    estimate = kind_launcher(setup.kind).estimate
    if estimate is None:
        return "this setup: duration unknown"
    engine = setup.endpoint_kind if setup.engine == "endpoint" else choice_of(setup.engine).engine
    on_gpu = engines.named(engine).needs_gpu
    return f"this setup: {estimate({**numbers, 'passes': [None] * setup.passes})}{CPU_FIGURE if on_gpu else ''}"
