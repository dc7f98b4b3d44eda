"""The worker's confinement, observed from outside the real worker process (through /proc and its
network namespace), and as the worker reports it in `hello`."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kit.workloads.bfcl import BfclWorker
from kit.workloads.bfcl.client import BfclWorkerError
from kit.workloads.bfcl import confinement as conf

ROOT = os.geteuid() == 0


def proc_limits(pid: int) -> dict[str, tuple[str, str]]:
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): tuple(row[26:].split()[:2]) for row in rows}


def proc_uids(pid: int) -> list[int]:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    return [int(x) for x in line.split()[1:]]


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that this test process can reach."""
    server = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(server.getsockname(), timeout=5).close()  # reachable from here
    yield server.getsockname()[1]
    server.close()


def test_hello_reports_the_confinement_in_force(bfcl_worker):
    report = bfcl_worker.hello()["confinement"]
    assert report["limits"] == conf.LIMITS
    assert report["home"] == str(bfcl_worker.home)
    if ROOT:
        assert report["user"]["was_root"] and report["user"]["uid"] != 0
        assert report["user"]["name"] == conf.WORKER_USER
        assert report["network_isolated"] and report["not_in_force"] == []
        assert report["no_new_privs"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and namespaces are Linux")
def test_limits_user_and_home_are_in_force_on_the_process(bfcl_worker):
    pid = bfcl_worker.pid
    limits = proc_limits(pid)
    assert limits["Max address space"] == (str(conf.ADDRESS_SPACE_BYTES),) * 2
    assert limits["Max file size"] == (str(conf.FILE_BYTES),) * 2
    assert limits["Max processes"] == ("0", "0")
    assert limits["Max core file size"] == ("0", "0")
    assert limits["Max cpu time"][1] == str(conf.CPU_SECONDS_TOTAL)
    assert int(limits["Max cpu time"][0]) <= conf.CPU_SECONDS_TOTAL
    environ = dict(x.split("=", 1) for x in Path(f"/proc/{pid}/environ").read_text().split("\0") if x)
    home = bfcl_worker.home
    assert environ["HOME"] == environ["TMPDIR"] == environ["BFCL_PROJECT_ROOT"] == str(home)
    assert Path(os.readlink(f"/proc/{pid}/cwd")) == home
    assert home != Path.home() and (home.stat().st_mode & 0o077) == 0  # private: only its owner may enter
    if ROOT:
        assert 0 not in proc_uids(pid)
        assert home.stat().st_uid == pwd.getpwnam(conf.WORKER_USER).pw_uid


@pytest.mark.skipif(not ROOT or not shutil.which("nsenter"), reason="entering its namespace needs root and nsenter")
def test_the_worker_cannot_connect_to_a_port_this_test_listens_on(bfcl_worker, listener):
    pid = bfcl_worker.pid
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {listener}), timeout=5)\n"
             "    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)")
    out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-S", "-c", probe],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.startswith("refused"), out


def test_the_private_home_goes_when_the_worker_stops(bfcl_install, tmp_path):
    worker = BfclWorker(bfcl_install, log_path=tmp_path / "worker.log")
    with worker:
        home = worker.home
        assert home.is_dir() and worker.hello()["project_root"] == str(home)
    assert not home.exists() and worker.home is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux")
def test_an_allocation_past_the_memory_limit_fails_inside_the_worker(bfcl_worker):
    assert proc_limits(bfcl_worker.pid)["Max address space"][0] == str(conf.ADDRESS_SPACE_BYTES)
    # literal arithmetic BFCL's decoder evaluates: 3 GiB of text, past the 2 GiB address-space limit
    decoded = bfcl_worker.decode(f"[ls(a='a' * {3 << 30})]")
    assert decoded.calls is None and decoded.error.startswith("MemoryError")
    assert bfcl_worker.hello()["bfcl_eval"] == "2026.3.23"  # still serving


def test_an_import_that_fails_after_confinement_fails_the_operation():
    watch = conf.Confinement(report={})
    sys.meta_path.append(watch.failed_imports)
    try:
        with pytest.raises(ModuleNotFoundError):
            import kit_no_such_module  # noqa: F401
        with pytest.raises(conf.LateImport, match="kit_no_such_module"):
            watch.after_operation()
        watch.after_operation()  # reported once
    finally:
        sys.meta_path.remove(watch.failed_imports)


def test_without_namespaces_the_worker_says_it_kept_the_network(monkeypatch):
    def refuse(flags):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(conf, "_unshare", refuse)
    reason = conf._isolate_network()
    assert reason and "failed: Operation not permitted" in reason


def test_a_worker_ended_by_its_cpu_limit_says_so(bfcl_install, tmp_path):
    # a stand-in interpreter that dies the way the kernel ends a worker past RLIMIT_CPU
    xcpu = tmp_path / "xcpu-python"
    xcpu.write_text("#!/bin/sh\nkill -XCPU $$\n")
    xcpu.chmod(0o755)
    worker = BfclWorker(bfcl_install, python=str(xcpu), timeout_s=20, log_path=tmp_path / "worker.log")
    with pytest.raises(BfclWorkerError, match="exceeded its CPU time limit during 'hello' .SIGXCPU"):
        worker.hello()
    assert worker.home is None


def test_a_worker_killed_from_outside_names_the_signal_not_a_broken_install(bfcl_install, tmp_path):
    # a stand-in interpreter killed the way the out-of-memory killer or a stray `kill` ends a worker
    killed = tmp_path / "killed-python"
    killed.write_text("#!/bin/sh\nkill -KILL $$\n")
    killed.chmod(0o755)
    worker = BfclWorker(bfcl_install, python=str(killed), timeout_s=20, log_path=tmp_path / "worker.log")
    with pytest.raises(BfclWorkerError, match="was killed by SIGKILL during 'hello'") as refused:
        worker.hello()
    assert "install" not in str(refused.value) and "out-of-memory" in str(refused.value)
