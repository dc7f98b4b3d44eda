"""`kit watch --upstream URL`: the pass-through proxy, its run folder and its live console.

Everything the options say is checked before anything is written: the upstream URL, the listen address
(loopback unless `--allow-remote`), the port (bound before the run folder is made), the calibration, the
output folder. The run folder (kind `watch`, kit.protocols.watch) is made once the proxy can serve; Ctrl-C
or SIGTERM stop the proxy, which writes what is queued and ends the run `finished`, naming the signal.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from urllib.parse import urlsplit

import click

from kit.core.choices import LazyChoice
from kit.core.errors import ConfigError
from kit.core.limits import (
    PORT_MAX, PORT_MIN, WATCH_ALARM_REQUESTS, WATCH_ALARM_REQUESTS_MAX, WATCH_CONNECTIONS, WATCH_CONNECTIONS_MAX,
    WATCH_HEADER_TIMEOUT, WATCH_IDLE_TIMEOUT, WATCH_ROTATE_MAX, WATCH_TIMEOUT_MAX, WATCH_TIMEOUT_MIN,
    WATCH_UPSTREAM_CONNECTIONS)
from kit.core.paths import outputs_dir
from kit.core.secret_urls import redact_url
from kit.engines import registry
from kit.record.cache_state import Calibration

DEFAULT_LISTEN = "127.0.0.1:8089"


def listen_address(text: str, allow_remote: bool) -> tuple[str, int]:
    """(host, port) of `--listen HOST:PORT` (port 0: any free port); a host that is not loopback only with
    `--allow-remote`."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= PORT_MAX:
        raise ConfigError(f"--listen {text!r} is not HOST:PORT", f"give e.g. --listen {DEFAULT_LISTEN} "
                          f"(port {PORT_MIN}-{PORT_MAX}, or 0 for any free one)")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise ConfigError(f"--listen host {host!r} is not an IP address or localhost",
                          "give a numeric address, e.g. 127.0.0.1 or 0.0.0.0") from None
    if not loopback and not allow_remote:
        raise ConfigError(f"--listen {text} would accept calls from other machines (and their traffic would be "
                          "recorded)", "pass --allow-remote to listen beyond this machine, or listen on 127.0.0.1")
    return host, int(port_text)


def upstream_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--upstream {redact_url(url)!r} is not an http(s) URL with a host",
                          "give the engine's base URL, e.g. --upstream http://127.0.0.1:8080")
    return url


def calibration_of(run_dir: Path) -> Calibration:
    """The prefill-time classes a `kit check` (pinning) run fitted, from its manifest."""
    from kit.record.manifest import Manifest  # noqa: PLC0415

    data = Manifest.load(run_dir).run.calibration
    try:
        return Calibration.from_json(data) if data else _none(run_dir)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"--calibration {run_dir}: its manifest's calibration is not one `kit check` writes",
                          "pass the run folder of a finished `kit check`") from None


def _none(run_dir: Path) -> Calibration:
    raise ConfigError(f"--calibration {run_dir}: its manifest holds no calibration",
                      "pass the run folder of a `kit check` run that calibrated (it prints its timing classes)")


def open_files(connections: int) -> None:
    """Room for `--max-connections` open connections, those to the upstream and the run's own files: the
    soft limit on open files raised as far as needed (up to the hard one), else refused."""
    import resource  # noqa: PLC0415 - Unix only, and only here

    need = connections + WATCH_UPSTREAM_CONNECTIONS + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(f"--max-connections {connections} needs {need} open files and this process may open "
                          f"{hard}", f"pass --max-connections {max(1, hard - need + connections)} or less, or "
                          "raise the limit (ulimit -n)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def bind(host: str, port: int) -> socket.socket:
    from kit.watch.serve import listening  # noqa: PLC0415 - loads the proxy's libraries

    try:
        return listening(host, port)
    except OSError as exc:
        raise ConfigError(f"--listen {host}:{port}: cannot listen there ({exc.strerror})",
                          "pick a free port with --listen HOST:PORT") from None


@click.command("watch")
@click.option("--upstream", required=True, metavar="URL", help="The engine's base URL (clients talk to the proxy).")
@click.option("--kind", type=LazyChoice(lambda: ["auto", *registry.ENGINES]), default="auto", show_default=True,
              help="The upstream engine (auto: asked at start; sets how a full reuse is told from a partial one).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where the proxy listens (port 0: any free port, printed at start).")
@click.option("--allow-remote", is_flag=True, help="Allow a --listen address other machines can reach.")
@click.option("--out", type=click.Path(path_type=Path), help="Parent folder of the run folder (default: outputs/).")
@click.option("--store-bodies", is_flag=True, help="Keep request bodies and normalized answers (default: hashes).")
@click.option("--calibration", type=click.Path(path_type=Path, file_okay=False), metavar="CHECK_RUN",
              help="A `kit check` run folder whose prefill-time classes classify calls without cache telemetry.")
@click.option("--pinned", is_flag=True, help="The upstream is one pinned instance: alarm on a state-class jump.")
@click.option("--rotate", type=click.IntRange(1, WATCH_ROTATE_MAX), default=10_000, show_default=True,
              help="Calls per records file.")
@click.option("--quiet", is_flag=True, help="Print alarms and the summary only, not every call.")
@click.option("--idle-timeout", type=click.FloatRange(WATCH_TIMEOUT_MIN, WATCH_TIMEOUT_MAX),
              default=WATCH_IDLE_TIMEOUT, show_default=True, metavar="SECONDS",
              help="Close a client connection that sends nothing (before or between requests, or within a body) "
                   "or reads nothing of its answer for this long.")
@click.option("--header-timeout", type=click.FloatRange(WATCH_TIMEOUT_MIN, WATCH_TIMEOUT_MAX),
              default=WATCH_HEADER_TIMEOUT, show_default=True, metavar="SECONDS",
              help="A request's line and headers must be whole this long after its first byte (else 408, closed).")
@click.option("--max-connections", type=click.IntRange(1, WATCH_CONNECTIONS_MAX), default=WATCH_CONNECTIONS,
              show_default=True, help="Client connections at once; past it every new request is answered 503.")
@click.option("--alarm-requests", type=click.IntRange(1, WATCH_ALARM_REQUESTS_MAX), default=WATCH_ALARM_REQUESTS,
              show_default=True, help="Distinct requests the alarms remember (about 1 KiB each); past it the least "
                                      "recently seen is forgotten (counted; recorded in the run's manifest).")
def watch(upstream: str, kind: str, listen: str, allow_remote: bool, out: Path | None, store_bodies: bool,
          calibration: Path | None, pinned: bool, rotate: int, quiet: bool, idle_timeout: float,
          header_timeout: float, max_connections: int, alarm_requests: int) -> None:
    """Proxy an engine and watch its cache states: every generation call is classified (full_eval, partial,
    full_kv) and recorded as hashes in a run folder; the same greedy or seeded request answered differently
    raises an alarm. `/metrics` on the proxy serves Prometheus metrics. Stop it with Ctrl-C; then
    `kit analyze`, `kit bundle` and `kit show` read the run folder."""
    from kit.run.preflight import check_out  # noqa: PLC0415
    from kit.watch.connections import Bounds  # noqa: PLC0415
    from kit.watch.serve import serve  # noqa: PLC0415

    url = upstream_url(upstream)
    host, port = listen_address(listen, allow_remote)
    fitted = calibration_of(calibration) if calibration is not None else None
    out = out or outputs_dir()
    check_out(out)
    open_files(max_connections)
    sock = bind(host, port)
    serve(url, kind, sock, out, store_bodies=store_bodies, calibration=fitted, pinned=pinned, rotate=rotate,
          quiet=quiet, bounds=Bounds(idle_timeout, header_timeout, max_connections), alarm_requests=alarm_requests)
