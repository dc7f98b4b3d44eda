"""Confinement of the BFCL worker process: no network, a private home, resource limits, not root.

The call policy (`call_policy.py`) keeps model output from being run; confinement is the second wall,
for whatever the policy might miss and for honest calls that run away. The worker confines itself
(`confine`) once it has imported BFCL and read its data, before it reads its first request. It is not
done by the kit in a `preexec_fn` between fork and exec because preexec functions can deadlock a
multi-threaded parent (the launcher runs the grid in a thread), and because a process that drops root
before exec cannot start where the interpreter and the kit cache live under a home only root may enter
(/root is 0700). Loading first also means the unprivileged worker needs no access to the provisioned
BFCL files at all: it holds them in memory, and the kit cache stays out of its reach.

In force after `confine` (the worker's `hello` reports each item, and says which could not be had):

- network: a new network namespace (`unshare(CLONE_NEWNET)`; for a non-root user inside a new user
  namespace) whose only interface, loopback, is down, so no connection goes anywhere, 127.0.0.1
  included. Where the OS refuses namespaces the worker keeps the network and says so.
- home: HOME, TMPDIR, BFCL_PROJECT_ROOT and the working directory are a fresh folder (mode 0700) that
  the client makes for this worker alone and deletes when the worker stops.
- user: a worker started as root becomes `WORKER_USER` (no supplementary groups) and cannot regain root
  (checked); `no_new_privs` keeps set-user-ID programs from raising it again.
- limits (`resource.setrlimit`): the constants below.
- imports: everything the worker needs is loaded before confinement; an import that fails afterwards
  (a module that was not preloaded and cannot be read now) fails the operation instead of quietly
  turning into a different tool result.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

WORKER_USER = "nobody"  # who a worker started as root runs as
WORKER_FALLBACK_ID = 65534  # uid and gid used where WORKER_USER does not exist

# Limits. The worker peaks near 60 MB, and BFCL's checker needs about 1 s of CPU for all 200 episodes.
CPU_SECONDS_PER_OPERATION = 60  # soft RLIMIT_CPU, re-armed before every request: SIGXCPU ends the worker
CPU_SECONDS_TOTAL = 6 * 3600  # hard RLIMIT_CPU over the worker's life (a paper-scale run uses seconds)
ADDRESS_SPACE_BYTES = 2 << 30  # RLIMIT_AS: a larger allocation raises MemoryError in the operation
FILE_BYTES = 256 << 20  # RLIMIT_FSIZE: the largest file it may write (its log on stderr included)
PROCESSES = 0  # RLIMIT_NPROC: it may start no process (and no thread); root ignores it, so set after the drop
CORE_BYTES = 0  # RLIMIT_CORE: no core file when a limit ends it

LIMITS = {
    "cpu_seconds_per_operation": CPU_SECONDS_PER_OPERATION,
    "cpu_seconds_total": CPU_SECONDS_TOTAL,
    "address_space_bytes": ADDRESS_SPACE_BYTES,
    "file_bytes": FILE_BYTES,
    "processes": PROCESSES,
    "core_bytes": CORE_BYTES,
}

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS = 38


class LateImport(RuntimeError):
    """A module was imported after confinement and could not be found."""


class _FailedImports:
    """Last on sys.meta_path: consulted only when every real finder came up empty, i.e. for an import
    that is about to fail. Notes the name and lets it fail."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name, path=None, target=None):
        self.names.append(name)
        return None


@dataclass
class Confinement:
    """What `confine` put in force (`report`, for hello and the manifest) and the per-request hooks."""

    report: dict
    failed_imports: _FailedImports = field(default_factory=_FailedImports)

    def before_operation(self) -> None:
        """Give the next request its own CPU allowance under the worker's total."""
        self.failed_imports.names.clear()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = min(int(usage.ru_utime + usage.ru_stime) + CPU_SECONDS_PER_OPERATION, CPU_SECONDS_TOTAL)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, CPU_SECONDS_TOTAL))
        except (ValueError, OSError):
            pass  # reported at confine time when the limit could not be set at all

    def after_operation(self) -> None:
        """Fail the request that just ran if an import failed during it."""
        names = sorted(set(self.failed_imports.names))
        self.failed_imports.names.clear()
        if names:
            raise LateImport(f"the confined worker could not import {', '.join(names)}; "
                             "load it before confinement (worker.PRELOADED_MODULES)")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    if hasattr(os, "unshare"):  # Python 3.12+
        os.unshare(flags)
        return
    if _libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _isolate_network() -> str | None:
    """Enter a new network namespace; None on success, else why not."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces do not exist on {sys.platform}"
    try:
        _unshare(_CLONE_NEWNET)
        return None
    except OSError as e:
        if os.geteuid() == 0:
            return f"unshare(CLONE_NEWNET) failed: {e.strerror}"
    uid, gid = os.getuid(), os.getgid()
    try:  # an unprivileged user may own a network namespace inside a user namespace of its own
        _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as e:
        return f"unshare(CLONE_NEWUSER | CLONE_NEWNET) failed: {e.strerror}"
    return None


def _drop_root(home: Path) -> dict:
    """Become WORKER_USER when running as root (handing it `home`); what the worker runs as."""
    if os.geteuid() != 0:
        return {"name": _user_name(os.getuid()), "uid": os.getuid(), "gid": os.getgid(), "was_root": False}
    try:
        entry = pwd.getpwnam(WORKER_USER)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        uid = gid = WORKER_FALLBACK_ID
    for path in [home, *home.rglob("*")]:
        os.lchown(path, uid, gid)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise RuntimeError(f"the BFCL worker regained root after becoming uid {uid}; refusing to serve")
    return {"name": _user_name(uid), "uid": uid, "gid": gid, "was_root": True}


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _no_new_privs() -> bool:
    try:
        return sys.platform.startswith("linux") and _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _set_limits() -> list[str]:
    """Apply LIMITS; the ones the OS refused."""
    wanted = [(resource.RLIMIT_AS, ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES),
              (resource.RLIMIT_FSIZE, FILE_BYTES, FILE_BYTES),
              (resource.RLIMIT_NPROC, PROCESSES, PROCESSES),
              (resource.RLIMIT_CORE, CORE_BYTES, CORE_BYTES),
              (resource.RLIMIT_CPU, CPU_SECONDS_PER_OPERATION, CPU_SECONDS_TOTAL)]
    refused = []
    for limit, soft, hard in wanted:
        try:
            resource.setrlimit(limit, (soft, hard))
        except (ValueError, OSError) as e:
            refused.append(f"setrlimit({limit}) failed: {e}")
    return refused


def confine(home: Path) -> Confinement:
    """Confine this process (see the module docstring); `home` is its private folder, already its cwd."""
    os.chdir(home)
    network = _isolate_network()
    user = _drop_root(home)
    no_new_privs = _no_new_privs()
    refused = _set_limits()
    confinement = Confinement(report={
        "network_isolated": network is None,
        "network": "none: a network namespace of its own, loopback down" if network is None
                   else f"NOT isolated: {network}",
        "user": user,
        "home": str(home),
        "no_new_privs": no_new_privs,
        "limits": dict(LIMITS),
        "not_in_force": ([] if network is None else [network]) + refused
                        + ([] if no_new_privs else ["prctl(PR_SET_NO_NEW_PRIVS) failed"]),
    })
    sys.meta_path.append(confinement.failed_imports)
    return confinement
