"""`python -m kit.cli ARGS` without paying for a Python start and the kit's imports each time: a server that has
imported every kit module once forks a child per command, and the child becomes what a fresh `python -m kit.cli`
is (its own session, environment, working folder, argv, stdin from /dev/null, stdout and stderr into one pipe the
caller reads; `kit.cli` run as __main__ by runpy, so an exception out of it is a traceback and an exit status
as Python's own). The caller sees the same exit status (negative: the signal), the same output and the same
process group to kill on a timeout. A case that must find the kit by its command line (/proc) cannot be forked:
it says Case(own_process=True) and runs as a process of its own.

The server: `python -m tests.adversarial.forks SOCKET`; one connection per command: the pipe's write end passed
as SCM_RIGHTS, a JSON line {args, cwd, env}; answered with the child's pid, then its exit status, one line each."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Forks:
    """A client of one forking server (started here, stopped by close)."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.socket_folder = Path(tempfile.mkdtemp(prefix="kit-forks-"))  # short: a socket's path has 107 bytes
        self.socket_path = str(self.socket_folder / "forks.sock")
        self.server = subprocess.Popen([sys.executable, "-m", "tests.adversarial.forks", self.socket_path], cwd=folder,
                                       env={**env, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, start_new_session=True)
        assert self.server.stdout is not None
        ready = self.server.stdout.readline()
        if ready != b"ready\n":
            self.close()
            raise RuntimeError(f"the forking server did not start: {ready!r}")

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str]:
        """(exit status, or None when killed after `timeout`; stdout and stderr together) of `kit ARGS`."""
        read_end, write_end = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket_path)
            socket.send_fds(conn, [b"F"], [write_end])
            os.close(write_end)
            conn.sendall(json.dumps({"args": args, "cwd": str(cwd), "env": env}).encode() + b"\n")
            answers = conn.makefile("rb")
            pid = int(answers.readline())
            deadline = time.monotonic() + timeout
            output, status, killed = bytearray(), None, False
            with selectors.DefaultSelector() as waiting:
                waiting.register(read_end, selectors.EVENT_READ)
                waiting.register(conn, selectors.EVENT_READ)
                while waiting.get_map():
                    ready = waiting.select(None if killed else max(deadline - time.monotonic(), 0))
                    if not ready:  # past the timeout: killed with its whole session, as a hung process is
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                        killed = True
                    for key, _ in ready:
                        if key.fileobj == read_end:
                            chunk = os.read(read_end, 65536)
                            output += chunk
                            if not chunk:
                                waiting.unregister(read_end)
                        else:
                            status = int(answers.readline())
                            waiting.unregister(conn)
            os.close(read_end)
        text = output.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
        return (None if killed else status), text

    def close(self) -> None:
        if self.server.stdin:
            self.server.stdin.close()  # the server's signal to stop
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        if self.server.stdout:
            self.server.stdout.close()
        shutil.rmtree(self.socket_folder, ignore_errors=True)


def _preload() -> None:
    """Every kit module, imported once here instead of in each command's process."""
    import importlib
    import pkgutil

    import kit

    for module in pkgutil.walk_packages(kit.__path__, "kit."):
        importlib.import_module(module.name)


def _serve(socket_path: str) -> dict:
    """Fork one child per connection; return (in the child) the command it is to run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.flush()
    waiting = selectors.DefaultSelector()
    waiting.register(listener, selectors.EVENT_READ)
    waiting.register(sys.stdin.buffer, selectors.EVENT_READ)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, the connection its status goes to)
    while True:
        for key, _ in waiting.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                _, fds, _, _ = socket.recv_fds(conn, 1, 1)
                request = json.loads(conn.makefile("rb").readline())
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the child: nothing of the server's stays open in it
                    for pidfd, (_, other) in children.items():
                        os.close(pidfd)
                        other.close()
                    waiting.close()
                    listener.close()
                    conn.close()
                    os.dup2(fds[0], 1)
                    os.dup2(fds[0], 2)
                    os.close(fds[0])
                    return request
                os.close(fds[0])
                conn.sendall(b"%d\n" % pid)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                waiting.register(pidfd, selectors.EVENT_READ)
            elif key.fileobj is sys.stdin.buffer:
                if not os.read(sys.stdin.fileno(), 4096):
                    sys.exit(0)
            else:
                pidfd = key.fd
                pid, conn = children.pop(pidfd)
                waiting.unregister(pidfd)
                os.close(pidfd)
                _, wait_status = os.waitpid(pid, 0)
                try:
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(wait_status))
                except OSError:
                    pass  # the caller left
                conn.close()


def _become(request: dict) -> None:
    """This child, as `python -m kit.cli ARGS` started fresh with the request's environment and folder."""
    import runpy

    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # `python -m` puts its working folder first on the path
    tempfile.tempdir = None  # found again from this environment's TMPDIR
    sys.argv = ["-m", *request["args"]]
    sys.modules.pop("kit.cli", None)  # run as __main__ only, as `python -m kit.cli` runs it
    runpy.run_module("kit.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _preload()
    _become(_serve(sys.argv[1]))
