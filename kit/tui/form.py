"""The setup form's rules, without Textual: engine choices, field checks that explain themselves, and
the RunOptions the runner gets. Each check returns None (fine) or one line saying what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from kit.doctor import DOCKER_WAY, NATIVE_LLAMACPP_WAY
from kit.tui.catalog import EMBEDDED, ENDPOINT, Capabilities, kind_needs, kind_ways

if TYPE_CHECKING:
    from kit.protocols.kind import Launcher

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class EngineChoice:
    """One way to get an engine, what the doctor must allow for it, and whether the runner drives it yet."""

    key: str
    label: str
    doctor_way: str | None  # the doctor's way that must be open; None: nothing local needed
    wired: bool  # can the runner drive it now?

    @property
    def way(self) -> str:
        """The engine way a protocol kind must accept (kit.tui.catalog.kind_ways)."""
        return self.doctor_way or ENDPOINT


ENGINES = (
    EngineChoice("embedded", "embedded CPU engine (llama.cpp 7e4c0a9)", EMBEDDED, True),
    EngineChoice("native", "native GPU build (llama-server binary)", NATIVE_LLAMACPP_WAY, True),
    EngineChoice("llamacpp-container", "llama.cpp container", DOCKER_WAY, True),
    EngineChoice("vllm-container", "vLLM container", DOCKER_WAY, False),
    EngineChoice("endpoint", "my own endpoint (URL + kind)", None, True),
)
CPU_BACKENDS = {  # the embedded engine's --cpu-backend choices (kit.launch.cpu_backend.CHOICES)
    "auto": "auto (the wheel's where this CPU allows, else portable)",
    "wheel": "wheel (prebuilt, Sapphire Rapids-class CPUs)",
    "portable": "portable (AVX2, built here once)",
}
ENDPOINT_KINDS = {"llamacpp": "llama.cpp server", "vllm": "vLLM (OpenAI API)"}
WIRED_ENDPOINT_KINDS = {"llamacpp"}


def engine_problem(choice: EngineChoice, caps: Capabilities, kind: str) -> str | None:
    """Why this engine cannot be used here for this kind of protocol, or None."""
    if not choice.wired:
        return f"{choice.label}: the runner cannot start it yet; use the CLI's engine commands or an endpoint URL"
    if choice.way not in kind_ways(kind):
        return f"{kind} protocols cannot use {choice.label}: they need {kind_needs(kind)}"
    if choice.doctor_way and caps.checked and choice.doctor_way not in caps.ways:
        return caps.why_not.get(choice.doctor_way) or f"{choice.label}: `kit doctor` says this machine cannot run it"
    return None


def usable_engine(kind: str, caps: Capabilities) -> str:
    """The first engine choice this kind can use here (the embedded engine when none can)."""
    return next((c.key for c in ENGINES if engine_problem(c, caps, kind) is None), "embedded")


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
        return "give the server's base URL without a path (the kit adds /completion itself)"
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
    url: str = ""
    endpoint_kind: str = "llamacpp"
    server_bin: str = ""
    size: str = ""  # the numbers the kind's launcher entry asks for (kit.protocols.kind.Launcher):
    repeats: str = ""  # e.g. items, sessions and max tokens of a reset; episodes and histories of a sweep
    max_tokens: str = ""
    out: str = ""
    passes: int = 4  # the file's passes, not edited (a grid's estimate counts them)
    extra: dict[str, Any] = field(default_factory=dict)


def problems(setup: Setup, caps: Capabilities, known_models: set[str]) -> dict[str, str]:
    """Field name -> what is wrong with it, for every field the chosen engine uses."""
    found: dict[str, str | None] = {}
    choice = next(c for c in ENGINES if c.key == setup.engine)
    found["engine"] = engine_problem(choice, caps, setup.kind)
    if setup.engine == "endpoint":
        found["url"] = check_url(setup.url)
        if setup.endpoint_kind not in WIRED_ENDPOINT_KINDS:
            found["endpoint_kind"] = f"{ENDPOINT_KINDS[setup.endpoint_kind]}: the runner drives llama.cpp endpoints only so far"
    else:
        found["model"] = check_model(setup.model, known_models)
    if setup.engine == "native":
        found["server_bin"] = check_binary(setup.server_bin)
    for name, number in kind_launcher(setup.kind).numbers().items():
        found[name] = check_count(getattr(setup, name), 1, number.high)
    found["out"] = check_out(setup.out)
    return {name: text for name, text in found.items() if text}


def kind_launcher(kind: str) -> Launcher:
    """The kind's launcher entry (which numbers the form asks for), from the registry."""
    from kit.protocols.kinds import KINDS  # noqa: PLC0415 - the registry loads once a form opens

    return KINDS[kind].launcher


def overrides(setup: Setup) -> dict[str, Any]:
    """The protocol overrides the form's numbers stand for."""
    from kit.protocols.spec import merge  # noqa: PLC0415

    found: dict[str, Any] = {}
    for name, number in kind_launcher(setup.kind).numbers().items():
        if number.key is not None:
            found = merge(found, number.override(int(getattr(setup, name))))
    return {**found, **setup.extra}


def run_options(setup: Setup):
    """RunOptions for a form without problems."""
    from kit.runner import RunOptions

    endpoint = setup.engine == "endpoint"
    return RunOptions(protocol=setup.protocol, overrides=overrides(setup),
                      model=None if endpoint or not setup.model.strip() else setup.model.strip(),
                      server_bin=Path(setup.server_bin).expanduser() if setup.engine == "native" else None,
                      engine_url=setup.url.strip().rstrip("/") if endpoint else None,
                      launcher="docker" if setup.engine == "llamacpp-container" else "native",
                      cpu_backend=setup.cpu_backend if setup.engine == "embedded" else "auto",
                      out=Path(setup.out).expanduser())


def defaults(protocol: str, kind: str, data: dict[str, Any], out: Path) -> Setup:
    """A form that runs as it is: the protocol file's own numbers, the embedded engine, outputs/."""
    numbers = {name: str(number.value(data)) for name, number in kind_launcher(kind).numbers().items()}
    return Setup(protocol, kind, out=str(out), passes=len(data.get("passes") or ()) or 4, **numbers)


def estimate_line(setup: Setup) -> str:
    """The duration this setup would take on a CPU, as the picker estimates it (before any measurement),
    from the form's numbers and the file's passes."""
    try:
        numbers = overrides(setup)
    except ValueError:
        return "fix the numbers to see an estimate"
    estimate = kind_launcher(setup.kind).estimate
    if estimate is None:
        return "this setup: duration unknown"
    return f"this setup: {estimate({**numbers, 'passes': [None] * setup.passes})}"
