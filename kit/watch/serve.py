"""One watch from start to stop: ask the upstream what it is, make the run folder, serve the proxy with
uvicorn on the socket the command line bound, and end the run when a signal stops it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from kit.core.errors import ConfigError
from kit.core.secret_urls import redact_url
from kit.engines import registry
from kit.record.cache_state import Calibration
from kit.record.provenance import collect
from kit.run import faults
from kit.watch.console import Live
from kit.watch.proxy import Proxy, Settings
from kit.watch.recorder import PROTOCOL, Recorder
from kit.watch.upstream import probe


def settings_json(settings: Settings, kind: str, rotate: int) -> dict[str, Any]:
    """What the run's manifest keeps of the proxy's settings (`protocol.resolved`): no credentials."""
    return {"protocol": PROTOCOL, "upstream": redact_url(settings.upstream), "engine_kind": kind,
            "store_bodies": settings.store_bodies, "pinned": settings.pinned, "rotate": rotate,
            "reuse_tolerance": settings.reuse_tolerance,
            "calibration": settings.calibration.to_json() if settings.calibration else None}


def serve(url: str, kind: str, sock: socket.socket, out: Path, *, store_bodies: bool = False,
          calibration: Calibration | None = None, pinned: bool = False, rotate: int = 10_000, quiet: bool = False,
          shown_out: str | None = None) -> Path:
    """Serve until stopped; returns the run folder."""
    import uvicorn  # noqa: PLC0415

    engine_kind, build, reached = probe(url, kind)
    if not reached:
        sock.close()
        raise ConfigError(f"--upstream {redact_url(url)} does not answer", "start the engine first, or fix the URL")
    tolerance = int(registry.ENGINES[engine_kind].check_overrides.get("reuse_tolerance", 8))
    settings = Settings(url, store_bodies=store_bodies, calibration=calibration, pinned=pinned, engine_build=build,
                        reuse_tolerance=tolerance)
    resolved = settings_json(settings, engine_kind, rotate)
    recorder = Recorder.open(out, rotate, protocol={"name": PROTOCOL, "kind": PROTOCOL, "resolved": resolved},
                             engine={"kind": "url", "engine_kind": registry.ENGINES[engine_kind].label,
                                     "url": redact_url(url), "engine": build},
                             options={"listen": "%s:%d" % sock.getsockname()[:2]}, provenance=collect())
    live = Live(quiet=quiet)

    def report(fields: dict[str, Any]) -> None:
        live.call(fields)

    proxy = Proxy(settings, record=recorder.add, report=report)
    host, port = sock.getsockname()[:2]
    live.console.print(f"kit watch: {redact_url(url)} ({engine_kind}{f', {build}' if build else ''}) proxied at "
                       f"http://{host}:{port}; recording into {recorder.run_dir}; Ctrl-C stops", soft_wrap=True)
    config = uvicorn.Config(proxy.app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    status, reason = "finished", None
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # noqa: BLE001 - the run records why it ended, then the error goes on
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        signal = faults.received()
        recorder.manifest.update(watch={"stopped_by": signal.name if signal else None, "calls": proxy.calls,
                                        "alarms": dict(proxy.tracker.counts)})
        recorder.close(status, reason)
        sock.close()
        live.console.print(f"kit watch: stopped; {live.summary()}; run folder {recorder.run_dir}", soft_wrap=True)
    return recorder.run_dir
