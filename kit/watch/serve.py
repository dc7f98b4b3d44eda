"""One watch from start to stop: ask the upstream what it is, make the run folder, serve the proxy with
uvicorn on a bound socket (on uvloop's event loop where it is installed, a dependency but on Windows: uvicorn's
`loop="auto"`), and end the run when it stops. `serve` runs in the main thread until a signal
(Ctrl-C, SIGTERM) stops it; `in_thread` runs one in a thread of this process (tests, the benchmark)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.core.errors import ConfigError
from kit.core.secret_urls import redact_url
from kit.engines import registry
from kit.engines.identify import identify
from kit.record.cache_state import Calibration
from kit.record.provenance import collect
from kit.run import faults
from kit.core.limits import WATCH_ALARM_REQUESTS, WATCH_REQUEST_BYTES_MAX
from kit.watch.connections import Bounds, protocol, server_settings
from kit.watch.console import Live
from kit.watch.proxy import Proxy, Settings
from kit.watch.recorder import PROTOCOL, ROTATE_DEFAULT, Recorder


def settings_json(settings: Settings, kind: str, rotate: int, bounds: Bounds) -> dict[str, Any]:
    """What the run's manifest keeps of the proxy's settings (`protocol.resolved`): no credentials. `bounds`
    holds every bound the proxy ran with; `bounds.alarm_requests` is part of how its alarms are computed
    (the watch kind's results recompute them with it)."""
    return {"protocol": PROTOCOL, "upstream": redact_url(settings.upstream), "engine_kind": kind,
            "store_bodies": settings.store_bodies, "pinned": settings.pinned, "rotate": rotate,
            "reuse_tolerance": settings.reuse_tolerance,
            "calibration": settings.calibration.to_json() if settings.calibration else None,
            "bounds": {**bounds.to_json(), "alarm_requests": settings.alarm_requests,
                       "request_bytes": WATCH_REQUEST_BYTES_MAX, "answer_bytes_observed": settings.answer_bytes,
                       "upstream_silence_s": settings.read_timeout}}


@dataclass
class Watch:
    """A started watch: the proxy, its recorder, its uvicorn server and its console."""

    proxy: Proxy
    recorder: Recorder
    server: Any  # uvicorn.Server
    sock: socket.socket
    live: Live

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def stop(self, status: str = "finished", reason: str | None = None, stopped_by: str | None = None) -> None:
        """Write what is queued and end the run (its manifest says why, the console sums it up); a call the
        proxy could not observe ends it failed."""
        if self.proxy.unobserved and status == "finished":
            status, reason = "failed", self.proxy.unobserved
        self.recorder.close(status, reason, watch={"stopped_by": stopped_by, "calls": self.proxy.calls,
                                                   "alarms": dict(self.proxy.tracker.counts),
                                                   "alarm_requests_forgotten": self.proxy.tracker.forgotten})
        self.sock.close()
        lost = f"; {self.proxy.unobserved}" if self.proxy.unobserved else ""
        self.live.console.print(f"kit watch: stopped; {self.live.summary()}{lost}; run folder "
                                f"{self.recorder.run_dir}", soft_wrap=True)


def start(url: str, kind: str, sock: socket.socket, out: Path, *, store_bodies: bool = False,
          calibration: Calibration | None = None, pinned: bool = False, rotate: int = ROTATE_DEFAULT,
          quiet: bool = False, live: Live | None = None, bounds: Bounds = Bounds(),
          alarm_requests: int = WATCH_ALARM_REQUESTS, observer: bool = True) -> Watch:
    """Probe the upstream, make the run folder and the proxy's server (not yet serving); `observer`: calls are
    read in a process of the proxy's own (kit.watch.observer), not on its event loop."""
    import uvicorn  # noqa: PLC0415

    found = identify(url, kind)
    engine_kind, build = found.kind, found.build
    if not found.reached:
        sock.close()
        raise ConfigError(f"--upstream {redact_url(url)} does not answer", "start the engine first, or fix the URL")
    engine = registry.ENGINES[engine_kind]
    settings = Settings(url, store_bodies=store_bodies, calibration=calibration, pinned=pinned, engine_build=build,
                        reuse_tolerance=int(engine.check_overrides.get("reuse_tolerance", 8)),
                        counters=engine.arm_per_server, alarm_requests=alarm_requests, observer=observer)
    recorder = Recorder.open(out, rotate, protocol={"name": PROTOCOL, "kind": PROTOCOL,
                                                    "resolved": settings_json(settings, engine_kind, rotate, bounds)},
                             engine={"kind": "url", "engine_kind": engine.label, "url": redact_url(url),
                                     "engine": build},
                             options={"listen": "%s:%d" % sock.getsockname()[:2]}, provenance=collect())
    live = live or Live(quiet=quiet)
    proxy = Proxy(settings, record=recorder.add, report=live.call)
    config = uvicorn.Config(proxy.app, interface="asgi3", loop="auto", log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=10, **server_settings(bounds),
                            http=protocol(bounds, lambda reason: proxy.metrics.refused.labels(reason).inc()))
    watch = Watch(proxy, recorder, uvicorn.Server(config), sock, live)
    live.console.print(f"kit watch: {redact_url(url)}, {found.line()}, proxied at {watch.url}; recording into "
                       f"{recorder.run_dir}; Ctrl-C stops", soft_wrap=True)
    return watch


def serve(url: str, kind: str, sock: socket.socket, out: Path, **options: Any) -> Path:
    """Serve in this (main) thread until a signal stops it; returns the run folder."""
    watch = start(url, kind, sock, out, **options)
    status, reason = "finished", None
    try:
        watch.server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shut down gracefully, then raised the signal again
    except BaseException as exc:  # noqa: BLE001 - the run records why it ended, then the error goes on
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        signal = faults.received()
        watch.stop(status, reason, signal.name if signal else None)
    return watch.recorder.run_dir


def listening(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port (OSError if it cannot). Made with IPPROTO_TCP so that asyncio sets
    TCP_NODELAY on every connection it accepts (it does so only for sockets of that protocol): an answer's
    headers and body then go out at once, never held back for the client's delayed ACK."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


@contextmanager
def in_thread(url: str, out: Path, kind: str = "auto", **options: Any) -> Iterator[Watch]:
    """A watch on 127.0.0.1 (a free port) served by a thread of this process, stopped on leaving."""
    sock = listening("127.0.0.1", 0)
    watch = start(url, kind, sock, out, **options)
    thread = threading.Thread(target=watch.server.run, kwargs={"sockets": [sock]}, name="kit-watch", daemon=True)
    thread.start()
    try:
        while not watch.server.started and thread.is_alive():
            thread.join(0.01)
        yield watch
    finally:
        watch.server.should_exit = True
        thread.join(30)
        watch.stop(stopped_by="the process that started it")
