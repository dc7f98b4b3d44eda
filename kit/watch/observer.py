"""Where the proxy's calls are read: a process of the proxy's own, so that reading them (parsing the request and
the answer, hashing, classifying: kit.watch.observe.seen) costs the proxy's event loop, and so its next clients,
only the handing over.

The proxy hands each finished call (kit.watch.observe.Finished) to `Observer.submit`; the process reads it and
sends back what it saw (kit.watch.observe.Seen, or the one line saying why it could not), and `deliver` gets
each call with that, in the order the calls were handed over (the alarms and the records keep that order). What
depends on earlier calls (the alarm tracker, the metrics, the records) stays with the proxy: the process keeps
no state, so losing it loses nothing. If it ends before it is told to, falls behind by more than
WATCH_OBSERVER_BEHIND_BYTES, or does not finish within CLOSE_SECONDS of being told to: it is stopped, the proxy's
log says so in one line, and every call it had not sent back, then every later call, is delivered with no
reading (None) for the proxy to read on its own loop, as it does without an observer.

Frames both ways are a 4-byte little-endian length, then a pickle: between the proxy and the process it
started, on that process's standard input and output (the bytes the clients and the upstream sent are inside
as bytes, never unpickled from anywhere else). The process runs in a session of its own and ignores SIGINT (a
Ctrl-C in the terminal is the proxy's: it ends the process by closing its input once the calls in flight are
done), and ends at the end of its input, however the proxy ended.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import signal
import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, BinaryIO

from kit.core.limits import WATCH_OBSERVER_BEHIND_BYTES
from kit.watch import observe

LOG = logging.getLogger("uvicorn.error")  # the proxy's log (kit.watch.proxy's)
CLOSE_SECONDS = 30.0  # how long a close waits for the calls handed over to come back
_LENGTH = struct.Struct("<I")

Result = observe.Seen | str | None  # what came back for a call: None where the proxy must read it itself
Deliver = Callable[[observe.Finished, Result], None]


def frame(value: Any) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


class Observer:
    """A process reading the proxy's calls, started when the first is handed over (`submit`; a proxy that sees
    none starts none); each comes back (`deliver`) in the order handed over; `close` waits for those not back
    yet. Once the process has stopped, calls are delivered at once, with no reading."""

    command: tuple[str, ...] = (sys.executable, "-m", __name__)  # the process (`main`)

    def __init__(self, reading: observe.Reading, deliver: Deliver):
        self.reading, self.deliver = reading, deliver
        self.pending: deque[observe.Finished] = deque()  # handed over, not yet back: in order
        self.behind = 0  # bytes of the calls pending
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: asyncio.WriteTransport | None = None
        self.ended = asyncio.Event()  # its output ended
        self.exited = asyncio.Event()  # it exited (and was waited for: no defunct process is left behind)
        self._buffer = bytearray()
        self._waiting: list[bytes] = []  # frames handed over while the process starts
        self._starting: asyncio.Task[None] | None = None
        self._closing = False  # `close` asked it to end
        self._gone = False  # given up (said once in the log)

    async def _start(self) -> None:
        """Start the process (in a session of its own: a Ctrl-C in the terminal stops the proxy, which then ends
        it) and send it what waited; if it cannot be started, the proxy's log says why and the calls are read
        on the loop."""
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.subprocess_exec(lambda: _Protocol(self), *self.command,
                                                      stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                      stderr=None, start_new_session=True)
        except OSError as exc:
            self._give_up(f"it could not start: {exc.strerror or exc}")
            return
        self.transport = transport
        self.stdin = transport.get_pipe_transport(0)  # type: ignore[assignment]
        assert self.stdin is not None
        self.stdin.writelines([frame(self.reading), *self._waiting])
        self._waiting.clear()

    @property
    def pid(self) -> int | None:
        return self.transport.get_pid() if self.transport is not None else None

    def submit(self, finished: observe.Finished) -> None:
        """Hand a call over (delivered later, in order), or deliver it at once to be read on the loop if the
        process has stopped or is being closed."""
        if self._gone or self._closing:
            self.deliver(finished, None)
            return
        self.pending.append(finished)
        self.behind += len(finished.body) + len(finished.data)
        if self.stdin is not None:
            self.stdin.write(frame(finished))
        else:
            self._waiting.append(frame(finished))
            if self._starting is None:
                self._starting = asyncio.get_running_loop().create_task(self._start())
        if self.behind > WATCH_OBSERVER_BEHIND_BYTES:
            self._give_up(f"it fell behind by more than {WATCH_OBSERVER_BEHIND_BYTES >> 20} MiB of calls")

    def received(self, data: bytes) -> None:
        """Bytes from the process: each whole frame is the reading of the call handed over first."""
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 4 and self.pending:
            (length,) = _LENGTH.unpack_from(buffer, start)
            if len(buffer) - start - 4 < length:
                break
            try:
                reading = pickle.loads(buffer[start + 4:start + 4 + length])
            except Exception:  # noqa: BLE001 - not a frame it wrote: the stream cannot be trusted from here
                reading = None
            if not isinstance(reading, (observe.Seen, str)):
                del buffer[:]
                self._give_up("it sent back what is not a reading")
                return
            start += 4 + length
            finished = self.pending.popleft()
            self.behind -= len(finished.body) + len(finished.data)
            self.deliver(finished, reading)
        del buffer[:start]

    def output_ended(self) -> None:
        """The process's output ended: whatever it did not send back is read on the loop."""
        if not self._closing:
            self._give_up("its output ended")
        self._flush()
        self.ended.set()

    def _give_up(self, why: str) -> None:
        if not self._gone:
            self._gone = True
            LOG.warning("kit watch: the observer process stopped (%s); calls are read on the proxy's loop from now "
                        "on", why)
        self._waiting.clear()
        self._stop()
        self._flush()

    def _stop(self) -> None:
        if self.stdin is not None:
            self.stdin.close()
            self.stdin = None
        if self.transport is not None and self.transport.get_returncode() is None:
            self.transport.kill()

    def _flush(self) -> None:
        while self.pending:
            finished = self.pending.popleft()
            self.deliver(finished, None)
        self.behind = 0

    async def close(self) -> None:
        """Deliver every call handed over: the process's input closed, what it sends back before it ends (or,
        past CLOSE_SECONDS, what is left read on the loop). A process with nothing left to send back is ended
        at once (it holds nothing)."""
        self._closing = True
        if self._starting is not None:
            await self._starting
        if self.transport is None:
            return
        if self.pending and self.stdin is not None:
            self.stdin.close()
            self.stdin = None
            try:
                await asyncio.wait_for(self.ended.wait(), CLOSE_SECONDS)
            except asyncio.TimeoutError:
                self._give_up(f"it did not end within {CLOSE_SECONDS:g} s of its last call")
        self._gone = True
        self._stop()
        try:
            await asyncio.wait_for(self.exited.wait(), CLOSE_SECONDS)
        except asyncio.TimeoutError:
            LOG.warning("kit watch: the observer process %s did not exit when killed", self.pid)
        self.transport.close()


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, observer: Observer):
        self.observer = observer

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.observer.received(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.observer.output_ended()

    def process_exited(self) -> None:
        self.observer.exited.set()


def _read(source: BinaryIO) -> Any:
    head = source.read(4)
    if len(head) < 4:
        return None
    (length,) = _LENGTH.unpack(head)
    data = source.read(length)
    return pickle.loads(data) if len(data) == length else None


def main() -> None:
    """The process: read calls from standard input, write their readings to standard output, until its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever else would print goes to the proxy's log, never into the frames
    reading = _read(source)
    while (finished := _read(source)) is not None:
        try:
            result: Any = observe.seen(finished, reading)
        except Exception as exc:  # noqa: BLE001 - sent back: the proxy says it and counts the call unobserved
            result = f"a call could not be observed ({type(exc).__name__}: {exc}); it may be unrecorded"
        sink.write(frame(result))
        sink.flush()


if __name__ == "__main__":
    main()
