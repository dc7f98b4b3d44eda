"""The engines the kit knows, one registered plug each, listed once here (like kit.protocols.kinds for
protocol kinds; the way inspect_ai's @modelapi registers a provider, what a plug names is imported on first use).
A package outside the kit adds its own engines under the entry-point group `kit.engines` (`ENTRY_POINTS`), each
naming the module that holds its `ENGINE` (an `EngineKind`): `toy = "toy_engine"` in its pyproject.toml's
`[project.entry-points."kit.engines"]` (kit.core.plugs.Registry, as for kinds; docs/architecture.md, "How to add").

An `EngineKind` is everything the kit knows about one engine that its call sites ask: how it gets one (the
embedded llama-server, a native binary, a container, or only a server someone else started and gives by URL),
whether each cache arm needs its own server (vLLM fixes prefix caching per server process), what its answers
report (reused prompt tokens, log-probabilities), whether `kit run` runs protocols on it (and whether only the
kinds that name it: whether a kind runs on an engine is one question, kit.protocols.kinds.serves), what `kit
check` changes in the pinning protocol for it, how a server of it at a URL is brought back to a cold cache, its
default port, whether the kit's fixes, server flags and builds apply to it, its launcher text, and what its
adapter module holds: its client (`client()`), what proves a server at a URL is this engine (`prove()`,
kit.engines.identify) and the generation endpoints `kit watch` reads (`watched`, kit.engines.watched). The CLI's
`--engine` and `--kind` choices, the launcher, preflight, `kit check`, `kit watch`, `kit replay`, the runner,
analysis and the paper comparison look engines up here and ask these fields; none compares engine names.

What one running server can do is its adapter's `Capabilities` (kit.engines.base), declared when the
client is made: a vLLM server started without dev mode has no reset endpoint. What is declared here
holds for every server of the kind; a fact said at both levels has one name at both
(`cached_token_telemetry`, `arm_per_server`: the names each session's engine info stores).

This module imports nothing heavy (no HTTP client): `kit --help` reads the choices from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from kit.core.errors import ConfigError
from kit.core.plugs import Plug, Registry

EMBEDDED, NATIVE, CONTAINER = "embedded", "native", "container"  # ways the kit starts an engine itself
# how a server at a URL (`kit check URL`) is brought back to a cold cache between sessions (kit.launch.instance):
# its model unloaded and reloaded (Ollama), vLLM's dev-mode prefix-cache reset, the adapter's own reset_cache()
# (llama.cpp's slot erase, SGLang's flush), or not at all (a plain OpenAI-compatible URL)
UNLOAD, PREFIX_RESET, OWN_RESET, NO_RELOAD = "unload", "prefix-reset", "own-reset", "none"


@dataclass(frozen=True)
class EngineKind:
    """One engine the kit knows (see the module's documentation)."""

    name: str  # protocol files' engine.kind, `kit run --engine`, `kit check --kind`, the run's saved options
    label: str  # how the console, findings and the comparison with the paper name it
    client_class: str  # "module:Class" of its adapter in kit.engines, imported when a client is made
    launch: frozenset[str] = frozenset()  # ways the kit starts it itself; empty: only reached by URL
    arm_per_server: bool = False  # prefix caching is fixed per server process: a server per cache arm
    cached_token_telemetry: bool = False  # do its answers report how many prompt tokens came from the cache?
    logprobs: bool = False  # do its answers carry log-probabilities of the emitted tokens?
    runs: bool = False  # `kit run --engine NAME` runs protocols on it
    kinds_opt_in: bool = False  # it runs only the kinds naming it (Kind.engine_rules; kinds.serves)
    check_overrides: dict[str, Any] = field(default_factory=dict)  # pinning settings `kit check` applies for it
    endpoint_label: str | None = None  # the launcher's label for "my own endpoint" of this kind; None: not offered
    replayable: bool = False  # `kit replay` can start the same engine again (its model pinned by one file's sha256)
    checkpoint: bool = False  # serves a checkpoint (a folder or a Hugging Face id), not one GGUF file
    needs_gpu: bool = False  # runs on a GPU only (a CPU estimate of its run says far more than it takes)
    docs: str | None = None  # the page of docs/ on running it, where it has one
    launcher_needs: str | None = None  # the launcher's "needs" of a file written for it; None: its kind's own
    proof: str | None = None  # "module:function" proving a server at a URL is this engine (kit.engines.identify)
    url_reload: str = NO_RELOAD  # how a server of it at a URL gets a cold cache: UNLOAD, PREFIX_RESET, OWN_RESET
    takes_model: bool = True  # its client takes the served model's name (llama-server serves the one it loaded)
    port: int | None = None  # its own default port: `kit check URL` takes a silent server there for this engine
    server_flags: bool = False  # the kit's named fixes and --server-arg apply to it (llama-server flags: kit.launch.llamacpp.fixes)
    builds: bool = False  # the kit builds it from source (`kit engines build`, `--engine-build`)
    server_prompt_cache: bool = False  # a server-level prompt cache beside its slots (llama-server's --cache-ram)
    watched: str | None = None  # "module:WATCHED" of the generation endpoints of its API `kit watch` reads
    # "module:function" making the provider of a run on a server the kit starts itself (kit.run.providers: native,
    # in a container, as `launch` says); None: reached only by URL
    starts: str | None = None

    def runs_written_for(self, written: EngineKind) -> bool:
        """Whether this engine runs a protocol file written for `written` (its engine.kind): a file written for
        an engine with a server per cache arm runs on that engine only; any engine may try the others' (what
        it cannot serve is refused by its own rules, kit.protocols.kinds.refuse_unserved)."""
        return self is written or not written.arm_per_server

    def client(self, base_url: str, **options: Any) -> Any:
        """A client (kit.engines adapter) for this engine's server at `base_url`."""
        return resolve_target(self.client_class)(base_url, **options)

    def prove(self, probe: Any) -> Any:
        """What proves the server `probe` asks is this engine (a kit.engines.identify.Proof), or None."""
        return resolve_target(self.proof)(probe) if self.proof else None


def resolve_target(target: str) -> Any:
    """The function or class "module:name" names, its module imported on first use."""
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


VLLM_BLOCK = 16  # vLLM caches whole blocks: a full reuse can leave up to a block's tokens to evaluate

LLAMACPP = EngineKind(
    "llamacpp", "llama.cpp", "kit.engines.llamacpp:LlamaCppEngine", launch=frozenset({EMBEDDED, NATIVE, CONTAINER}),
    cached_token_telemetry=True, logprobs=True, runs=True, endpoint_label="llama.cpp server", replayable=True,
    proof="kit.engines.llamacpp:proof", url_reload=OWN_RESET, takes_model=False, server_flags=True, builds=True,
    server_prompt_cache=True, watched="kit.engines.llamacpp:WATCHED", starts="kit.run.providers:llamacpp")
VLLM = EngineKind(
    "vllm", "vLLM", "kit.engines.vllm:VllmEngine", launch=frozenset({NATIVE, CONTAINER}), arm_per_server=True,
    cached_token_telemetry=True, logprobs=True, runs=True, kinds_opt_in=True,
    check_overrides={"reuse_tolerance": VLLM_BLOCK}, endpoint_label="vLLM (OpenAI API, a server per cache arm)",
    checkpoint=True, needs_gpu=True, docs="docs/vllm.md",
    launcher_needs="a vLLM server (the vLLM container on a GPU, native vLLM, or your own servers by URL)",
    proof="kit.engines.vllm:proof", url_reload=PREFIX_RESET, watched="kit.engines.vllm:WATCHED",
    starts="kit.run.providers:vllm")
OLLAMA = EngineKind("ollama", "Ollama", "kit.engines.ollama:OllamaEngine", logprobs=True, proof="kit.engines.ollama:proof",
                    url_reload=UNLOAD, port=11434, watched="kit.engines.ollama:WATCHED")
SGLANG = EngineKind("sglang", "SGLang", "kit.engines.sglang:SglangEngine", logprobs=True, proof="kit.engines.sglang:proof",
                    url_reload=OWN_RESET)
OPENAI = EngineKind("openai", "OpenAI-compatible", "kit.engines.openai_compat:OpenAICompatEngine", logprobs=True,
                    watched="kit.engines.openai_compat:WATCHED")

ENTRY_POINTS = "kit.engines"  # the entry-point group of the engines a package outside the kit registers
ENGINE_PLUG = Plug(EngineKind, "engine", ENTRY_POINTS, "ENGINE", "EngineKind({name!r}, ...)` (kit.engines.registry)")
# the kit's own engines, then those installed packages register (each module's `ENGINE`, read on first use)
ENGINES: Registry[EngineKind] = Registry(
    ENGINE_PLUG, {engine.name: engine for engine in (LLAMACPP, OLLAMA, VLLM, SGLANG, OPENAI)})
DEFAULT = LLAMACPP.name  # what `kit run` and a protocol file without engine.kind use


def named(name: Any, where: str = "--engine") -> EngineKind:
    """The engine called `name`; a ConfigError naming `where` (an option, a run folder) when the kit has none."""
    if name not in ENGINES:
        raise ConfigError(f"{where} {name!r} is not an engine this kit knows", f"give one of {', '.join(ENGINES)}")
    return ENGINES[name]


def watched_endpoints() -> dict[str, Any]:
    """Every engine's generation endpoints `kit watch` reads: path -> its kit.engines.watched.Dialect."""
    found: dict[str, Any] = {}
    for engine in ENGINES.values():
        for path, dialect in (resolve_target(engine.watched) if engine.watched else {}).items():
            if found.setdefault(path, dialect) is not dialect:
                raise ValueError(f"{path} is listed by two engines' WATCHED: one engine's API lists it")
    return found


def said_in(text: Any) -> EngineKind | None:
    """The engine a recorded description names (a manifest's engine entry, a findings row's engine, a published
    row's): the first in registry order whose name or label it holds, any case; None where it names none."""
    said = str(text or "").lower()
    return next((engine for engine in ENGINES.values() if engine.name in said or engine.label.lower() in said), None)


def by_port(port: int | None) -> EngineKind | None:
    """The engine whose own default port `port` is (`EngineKind.port`), or None."""
    return next((engine for engine in ENGINES.values() if port is not None and engine.port == port), None)


def run_choices() -> list[str]:
    """`kit run --engine` choices: the engines `kit run` runs protocols on."""
    return [name for name, engine in ENGINES.items() if engine.runs]


def check_choices() -> list[str]:
    """`kit check --kind` choices after "auto": every engine (a server at a URL is checked whatever serves it)."""
    return list(ENGINES)


def started_by_kit() -> list[str]:
    """Engines the kit can start itself (without a URL): `kit check` without URL uses the embedded one."""
    return [name for name, engine in ENGINES.items() if engine.launch]


def endpoint_kinds() -> dict[str, str]:
    """The launcher's kinds of "my own endpoint": name -> label."""
    return {name: engine.endpoint_label for name, engine in ENGINES.items() if engine.endpoint_label}
