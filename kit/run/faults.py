"""How a run that did not finish says why: a stop signal, a full disk, a failed write.

- Stop signals (SIGINT, SIGTERM, SIGHUP) stop a run like Ctrl-C (`on_stop_signals`, installed by the
  command line): KeyboardInterrupt is raised where the kit is, servers the kit started are stopped,
  records are kept, and the run ends `interrupted` naming the signal. A signal sent to the kit's
  process group also kills its helper processes (the BFCL worker); whatever error that causes while
  the run winds down (`BFCL worker exited during 'release'`) is not the cause: `stop_cause` finds the
  stop in the exception's chain, and a stop signal received during the run decides the status.
- A full disk (ENOSPC, EDQUOT) or another failed read or write (`OSError`) ends the run `failed` with
  that cause in one line (`os_failure`), never a traceback; records written so far are intact (each is
  synced as written; a line cut by the full disk makes its pass cut short) and `kit resume` runs the
  pass again once the cause is fixed.
"""

from __future__ import annotations

import errno
import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[signal.Signals] = []
_deferring: list[bool] = []


def _stop(signum: int, frame: object) -> None:
    _received.append(signal.Signals(signum))
    if not _deferring:
        raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """A stop signal received in the block is remembered but does not interrupt it (a run's final
    manifest writes: a second Ctrl-C must not leave the run `started`)."""
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()


def on_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt and are remembered (main thread only)."""
    for number in STOP_SIGNALS:
        signal.signal(number, _stop)


def received() -> signal.Signals | None:
    """The first stop signal this process received, if any."""
    return _received[0] if _received else None


def clear() -> None:
    """Forget received signals (a new run in the same process starts clean)."""
    _received.clear()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def stop_cause(exc: BaseException, stopped: tuple[type[BaseException], ...]) -> str | None:
    """Why the run was stopped when `exc` or an exception it was raised while handling is a stop
    (KeyboardInterrupt, or one of `stopped`) or a stop signal arrived; else None."""
    signum = received()
    if signum is not None:
        name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signum.name
        return f"stopped by {name}; records written so far are kept"
    if any(isinstance(link, (KeyboardInterrupt, *stopped)) for link in _chain(exc)):
        return "stopped by the user; records written so far are kept"
    return None


def os_failure(exc: OSError) -> str:
    """One line for a failed read or write: a full disk named as such, with the file concerned."""
    where = f" writing {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({exc.strerror or 'no space left'}{where}); records written so far are kept"
    return f"a read or write failed ({type(exc).__name__}: {exc.strerror or exc}{where})"
