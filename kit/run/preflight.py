"""Checks of the run options that need the machine (a URL, a port, a binary, a folder), made before a run
folder exists. Each error names the option and says how to fix it."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kit.engines import registry
from kit.core.errors import ConfigError
from kit.core.limits import PORT_MAX, PORT_MIN, THREADS_MAX
from kit.protocols import speed_cache
from kit.run.engine_source import engine_source


def check_url(url: str, option: str = "--engine-url") -> None:
    """An http(s) URL with a host and, if given, a port in range."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{option} {url!r} does not parse as a URL ({exc})",
                          "give e.g. http://127.0.0.1:8080") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{option} {url!r} is not an http(s) URL with a host", "give e.g. http://127.0.0.1:8080")
    if port is not None and not PORT_MIN <= port <= PORT_MAX:
        raise ConfigError(f"{option} {url!r}: port {port} is outside {PORT_MIN}..{PORT_MAX}",
                          "give the port the server listens on")


LISTENING_PROBE_S = 5.0  # seconds a TCP connection to an engine URL may take before a run is refused


def check_listening(url: str, option: str = "URL") -> None:
    """Something accepts TCP connections at `url`'s host and port (checked with check_url first): a URL where
    nothing listens is refused before a run folder is written, not found out as a failed run."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=LISTENING_PROBE_S):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConfigError(f"{option} {url}: nothing answers at {parts.hostname}:{port} ({why})",
                          "start the engine first, or give the URL it listens on") from None


def check_port(port: int, option: str = "--port") -> None:
    """In range and free on this machine's loopback interface."""
    if isinstance(port, bool) or not isinstance(port, int) or not PORT_MIN <= port <= PORT_MAX:
        raise ConfigError(f"{option} {port!r} is outside {PORT_MIN}..{PORT_MAX}",
                          f"give a port from 1024 to {PORT_MAX}, or leave {option} out for a free one")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror or exc})"
            raise ConfigError(f"{option} {port}: port {port} {why}",
                              f"pass another {option}, stop what listens there, or leave {option} out") from None


def check_threads(threads: int, option: str = "--threads") -> None:
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= THREADS_MAX:
        raise ConfigError(f"{option} {threads!r} is outside 1..{THREADS_MAX}",
                          f"give 1 to {os.cpu_count() or 1} (this machine's cores), or leave {option} out")


def check_binary(path: Path, option: str = "--server-bin") -> None:
    if not path.exists():
        raise ConfigError(f"{option} {path}: llama-server binary not found", "give the path of a llama-server binary")
    if not path.is_file():
        raise ConfigError(f"{option} {path} is not a file", "give the path of a llama-server binary")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{option} {path} is not executable", f"chmod +x {path}, or give another binary")


def check_input_file(path: Path, option: str, what: str = "file") -> None:
    if not path.is_file():
        raise ConfigError(f"{option} {path}: {what} not found", f"give {option} the path of an existing {what}")


def check_out(path: Path, option: str = "--out") -> None:
    """A folder that exists or can be made: nothing on its path is a file, and the nearest existing
    folder is writable."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            if not candidate.is_dir():
                where = "is a file" if candidate == path else f"is under {candidate}, which is a file"
                raise ConfigError(f"{option} {path} {where}", f"give {option} a folder (it is made if missing)")
            if not os.access(candidate, os.W_OK | os.X_OK):
                raise ConfigError(f"{option} {path}: {candidate} is not writable",
                                  f"give {option} a folder you can write to")
            return


def check_engine_choice(options: Any) -> None:
    """`--engine` and `--engine-url` agree: vLLM needs a URL per cache arm (or none), llama.cpp at most one."""
    runs = registry.run_choices()
    if options.engine not in runs:
        raise ConfigError(f"--engine {options.engine!r} is not an engine the kit runs", f"give {' or '.join(runs)}")
    engine = registry.named(options.engine)
    if engine.arm_per_server and options.engine_url:
        raise ConfigError(f"--engine-url {options.engine_url} names one server, but {engine.label} fixes prefix "
                          "caching per server process",
                          "give one per cache arm: --engine-url on=URL --engine-url off=URL")
    if options.engine_urls and not engine.arm_per_server:
        per_arm = [registry.named(n) for n in runs if registry.named(n).arm_per_server]
        raise ConfigError(f"--engine-url ARM=URL gives a server per cache arm, which only "
                          f"{' or '.join(e.label for e in per_arm)} runs",
                          f"add --engine {' or '.join(e.name for e in per_arm)}, or give {engine.label} one "
                          "--engine-url URL")
    if options.engine_urls and options.launcher == "docker":
        raise ConfigError("--engine-url and --launcher docker both say where the engine comes from",
                          "drop one of them")
    given = [name for name in ("image", "gpus") if getattr(options, name, None)]
    if given and options.launcher != "docker":
        raise ConfigError(f"--{' and --'.join(given)} only apply to --launcher docker, but this run uses "
                          f"--launcher {options.launcher}", "add --launcher docker, or drop them")
    if getattr(options, "gpus", None):
        from kit.launch.docker.container_spec import parse_gpus  # noqa: PLC0415

        parse_gpus(options.gpus)


def check_fixes(options: Any, kind: Any = None, protocol: Any = None) -> None:
    """`--fix` and `--server-arg`, or the fixes of the arms of a `kind` that applies them per arm (the
    protocol's `arms`): known, well-shaped, and applicable where this run's engine is started."""
    from kit.launch.llamacpp import fixes  # noqa: PLC0415

    applied = options.applied
    arms = kind.arm_fixes(protocol) if kind is not None and kind.arm_fixes is not None else None
    if arms is not None:
        if not applied.empty:
            raise ConfigError(f"{kind.name} protocols apply their fixes per arm (the protocol's `arms`), so --fix and "
                              "--server-arg would change every arm alike", "name the fixes in the protocol's arms")
        for arm in arms:  # where this run's engine is started as its arms need
            fixes.refuse(arm, source=engine_source(options), engine=options.engine)
        return
    if applied.reuse_off:
        raise ConfigError("--fix reuse-off leaves no cache hit, and every kind measures cache hits against "
                          "recomputes, so its cache-on requests would only fail their gates",
                          "hold it against the unfixed engine as an arm of a remedy protocol (docs/remedy.md)")
    fixes.refuse(applied, source=engine_source(options), engine=options.engine)


def check_run_options(options: Any, kind: Any = None, protocol: Any = None) -> None:
    """Every run option `kit run` takes from the machine (and the fixes of the `kind` of `protocol`, where
    its arms name them); raises ConfigError before anything is written."""
    if options.threads is not None:
        check_threads(options.threads)
    if options.out is not None:
        check_out(Path(options.out))
    if options.gsm8k is not None:
        check_input_file(Path(options.gsm8k), "--gsm8k", "GSM8K file")
    check_fixes(options, kind, protocol)
    speed_cache.fresh_asked()  # KIT_FRESH_ESTIMATE: 1, 0 or unset
    from kit.run import engine_build  # noqa: PLC0415 - the build machinery (httpx): `kit run` only, not `check_out`

    engine_build.check(options)
    if options.provider is not None:
        return
    check_engine_choice(options)
    for arm, url in options.engine_urls.items():
        check_url(url, f"--engine-url {arm}=")
    if options.engine_url:
        check_url(options.engine_url)
    if options.engine_url or options.engine_urls:
        return
    if options.port is not None:
        check_port(options.port)
    if options.server_bin is not None:
        check_binary(Path(options.server_bin))
