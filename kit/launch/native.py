"""Start and stop an engine server process on this machine (llama-server, or `vllm serve` through
kit.launch.vllm_launch), with a health wait and a captured log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from kit.core.errors import EngineError, IllegalInstruction
from kit.core.owned_file import open_append
from kit.launch import leftover_servers


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


@dataclass(frozen=True)
class ServerSpec:
    """How to launch one llama-server. `cache_ram` None keeps the engine default (8192 MiB)."""

    binary: Path
    model: Path
    ctx_size: int = 4096
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    seed: int = 42
    parallel: int = 1
    cache_ram: int | None = None
    gpu_layers: int | None = None
    extra_args: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int | None = None
    env: dict[str, str] | None = None

    label = "llama-server"

    def check(self) -> None:
        """Refuse, in one line, what cannot start: a missing binary or model file."""
        if not self.binary.is_file():
            raise EngineError(f"llama-server binary not found: {self.binary}",
                              "pass --server-bin with the path of a llama-server executable")
        if not self.model.is_file():
            raise EngineError(f"model file not found: {self.model}", "pass --model with the path of a GGUF file")

    def argv(self, port: int) -> list[str]:
        args = [str(self.binary), "--host", self.host, "--port", str(port), "-m", str(self.model),
                "-np", str(self.parallel), "-c", str(self.ctx_size), "--seed", str(self.seed),
                "-t", str(self.threads), "--slots", "--metrics"]
        if self.cache_ram is not None:
            args += ["--cache-ram", str(self.cache_ram)]
        if self.gpu_layers is not None:
            args += ["-ngl", str(self.gpu_layers)]
        return args + list(self.extra_args)


class LaunchSpec(Protocol):
    """What NativeServer starts: a `ServerSpec`, or any spec with the same `label`, `check()`, `argv(port)`,
    `host`, `port` and `env` (kit.launch.vllm_launch.VllmServeSpec)."""

    @property
    def label(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int | None: ...
    @property
    def env(self) -> dict[str, str] | None: ...

    def check(self) -> None: ...

    def argv(self, port: int) -> list[str]: ...


class NativeServer:
    """One server process of a `LaunchSpec`. Use as a context manager, or call start() and stop()."""

    def __init__(self, spec: LaunchSpec, log_path: Path, startup_timeout: float = 180.0):
        self.spec = spec
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self.argv: list[str] = []

    @property
    def url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    def start(self) -> "NativeServer":
        spec = self.spec
        spec.check()
        if spec.port is not None and port_in_use(spec.port, spec.host):
            raise EngineError(f"port {spec.port} is already in use",
                              "pass another --port, leave it out to pick a free one, or stop the other server")
        self.port = spec.port or free_port(spec.host)
        self.argv = spec.argv(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open_append(self.log_path)  # a log a stranger's run folder holds is never written through
        started = time.monotonic()
        env, token = leftover_servers.launch_env(spec.env)  # the token proves to a later resume the kit started it
        try:
            process = self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as exc:  # e.g. not executable, or a file that is no program
            raise EngineError(f"{self.spec.label} could not be started ({exc.strerror or exc}): {self.argv[0]}",
                              "pass --server-bin with the path of an executable server") from exc
        finally:
            log.close()
        leftover_servers.note_started(self.log_path, process.pid, self.argv, token)  # for a resume after a kill
        try:
            self._wait_healthy(process, started)
        finally:
            if process.poll() is not None:
                leftover_servers.note_stopped(self.log_path)
        self.startup_seconds = round(time.monotonic() - started, 3)
        return self

    def _wait_healthy(self, process: subprocess.Popen, started: float) -> None:
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() - started < self.startup_timeout:
                code = process.poll()
                if code is not None:
                    error = IllegalInstruction if code == -signal.SIGILL else EngineError
                    raise error(f"{self.spec.label} exited during start-up ({self._exit_reason(code)})",
                                f"see its log: {self.log_path}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        self.stop()
        raise EngineError(f"{self.spec.label} did not become healthy within {self.startup_timeout:.0f} s",
                          f"see its log: {self.log_path}")

    def _exit_reason(self, code: int) -> str:
        tail = self.log_tail(40)
        if "address already in use" in tail.lower() or "couldn't bind" in tail.lower():
            return f"port {self.port} in use; pass --port or stop the other server"
        if code < 0 and -code == signal.SIGILL:
            return "illegal instruction: the binary was built for a newer CPU"
        lines = [line for line in tail.splitlines() if line.strip()]
        return f"exit code {code}: {lines[-1].strip() if lines else 'no output'}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        """The server process's id once started, else None."""
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_exit(self, settle: float) -> bool:
        """Wait up to `settle` seconds for the process to exit; True once it has (or never started)."""
        if self.process is None:
            return True
        try:
            self.process.wait(settle)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_location(self) -> str:
        return str(self.log_path)

    def died_of_sigill(self, settle: float = 2.0) -> bool:
        """Did the process end by SIGILL? Waits up to `settle` seconds for a dying process to exit."""
        return self.process is not None and self.wait_exit(settle) and self.process.returncode == -signal.SIGILL

    def stop(self, grace: float = 10.0) -> int | None:
        """Terminate, then kill after `grace` seconds. Returns the exit code (None if never started)."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(grace)
        leftover_servers.note_stopped(self.log_path)
        return proc.returncode

    def __enter__(self) -> "NativeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
