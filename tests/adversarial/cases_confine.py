"""Nothing named inside a bundle or run folder is executed, written or moved outside the kit's folders, or
killed (issue #23; docs/security.md, "Run folders and bundles"): a recorded server binary that is the canary
program, protocol names and pass files that lead out of the folder, a pid note naming another process."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial.corpus import Case, Ending, Scratch

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "demo-20261201-070851"


def _run_folder(scratch: Scratch, change: Callable[[dict[str, Any]], None] | None = None,
                resumable: bool = False) -> Path:
    """The demo fixture run copied into the inbox, its manifest changed by `change`; `resumable`: its pass
    s2 did not end, as after a kill, so `kit resume` has work to do."""
    run_dir = shutil.copytree(DEMO, scratch.inbox / "demo-run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if resumable:
        manifest["status"] = "interrupted"
        manifest["passes"]["s2"]["status"] = "interrupted"
    if change:
        change(manifest)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def _bundle(scratch: Scratch, change: Callable[[dict[str, Any]], None]) -> Path:
    from kit.bundle.writer import write_bundle  # noqa: PLC0415

    run_dir = _run_folder(scratch, change)
    bundle = write_bundle([run_dir], scratch.inbox / "results.tar.gz", environ={}).path
    shutil.rmtree(run_dir)
    return bundle


def _canary_binary(scratch: Scratch) -> Callable[[dict[str, Any]], None]:
    return lambda manifest: manifest["options"].update(server_bin=str(scratch.canary_program))


def _replay_bundle_naming_the_canary(scratch: Scratch) -> list[str]:
    return ["replay", str(_bundle(scratch, _canary_binary(scratch))), "--out", str(scratch.outputs)]


def _replay_bundle_naming_the_canary_anyway(scratch: Scratch) -> list[str]:
    """--different-engine-ok: the replay goes ahead, on the kit's own engine, never on the named binary."""
    return _replay_bundle_naming_the_canary(scratch) + ["--different-engine-ok"]


def _replay_run_naming_the_canary(scratch: Scratch) -> list[str]:
    return ["replay", str(_run_folder(scratch, _canary_binary(scratch))), "--out", str(scratch.outputs)]


def _resume_run_naming_the_canary(scratch: Scratch) -> list[str]:
    return ["resume", str(_run_folder(scratch, _canary_binary(scratch), resumable=True))]


def _show_bundle_naming_the_canary(scratch: Scratch) -> list[str]:
    return ["show", str(_bundle(scratch, _canary_binary(scratch)))]


def _shows_not_run(scratch: Scratch, ending: Ending) -> str | None:
    wanted = f"recorded server binary {scratch.canary_program}: not run"
    return None if ending.code == 0 and any(wanted in line for line in ending.lines) else \
        f"`kit show` did not list {wanted!r}"


def _protocol_named(name: Callable[[Scratch], str]) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        folder = _run_folder(scratch, lambda m: m["protocol"].update(name=name(scratch)))
        return ["replay", str(folder), "--out", str(scratch.outputs)]
    return make


def _pass_file(name: Callable[[Scratch], str], command: str) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        folder = _run_folder(scratch, lambda m: m["passes"]["s1"].update(file=name(scratch)), resumable=True)
        return {"resume": ["resume", str(folder)],
                "analyze": ["analyze", str(folder), "--out", str(scratch.outputs / "analysis")],
                "bundle": ["bundle", str(folder), "-o", str(scratch.outputs / "b.tar.gz")]}[command]
    return make


def _linked_pass_file(command: str) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        folder = _run_folder(scratch, resumable=True)
        (folder / "records" / "s1.jsonl").unlink()
        (folder / "records" / "s1.jsonl").symlink_to(scratch.home / ".ssh" / "id_ed25519")
        return {"resume": ["resume", str(folder)],
                "analyze": ["analyze", str(folder), "--out", str(scratch.outputs / "analysis")],
                "bundle": ["bundle", str(folder), "-o", str(scratch.outputs / "b.tar.gz")]}[command]
    return make


def _resume_through_a_linked_logs_folder(scratch: Scratch) -> list[str]:
    folder = _run_folder(scratch, resumable=True)
    shutil.rmtree(folder / "logs")
    (folder / "logs").symlink_to(scratch.home / ".ssh")
    return ["resume", str(folder)]


def _resume_with_a_pipe_for_records(scratch: Scratch) -> list[str]:
    import os  # noqa: PLC0415

    folder = _run_folder(scratch, resumable=True)
    (folder / "records" / "s2.jsonl").unlink()
    os.mkfifo(folder / "records" / "s2.jsonl")  # a resume that appended to it would block
    return ["resume", str(folder)]


def _mistyped(command: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        folder = _run_folder(scratch, change, resumable=True)
        return [command, str(folder)] + (["--out", str(scratch.outputs)] if command == "replay" else [])
    return make


def _pid_note_naming_the_victim(scratch: Scratch) -> list[str]:
    """A note naming a live process of this user by its pid, real command line, start time and boot id; the
    run resumes against a URL where nothing listens, so it fails after the notes are read."""
    from kit.launch import leftover_servers  # noqa: PLC0415

    def change(manifest: dict[str, Any]) -> None:
        manifest["options"].update(engine_url="http://127.0.0.1:9", cpu_backend="auto")
        manifest["provenance"].pop("cpu_backend")

    folder = _run_folder(scratch, change, resumable=True)
    pid = scratch.victim()
    note = {"pid": pid, "argv": ["sleep", "300"], "started": "2026-12-01T07:08:51", "token": "ab" * 16,
            "boot_id": leftover_servers._boot_id(), "start_ticks": leftover_servers._start_ticks(pid)}
    (folder / "logs" / "server-s2.pid.json").write_text(json.dumps(note))
    return ["resume", str(folder), "--engine-url", "http://127.0.0.1:9"]  # the URL passed again, as a user would


def _resume_run_naming_a_listening_url(scratch: Scratch) -> list[str]:
    """A run folder that names an engine URL where something listens: a resume must not connect to it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    scratch.defer(listener.close)
    port = listener.getsockname()[1]
    (scratch.root / "listener-port").write_text(str(port))
    scratch.listener = listener  # type: ignore[attr-defined]
    return ["resume", str(_run_folder(scratch, lambda m: m["options"].update(engine_url=f"http://127.0.0.1:{port}"),
                                      resumable=True))]


def _never_contacted(scratch: Scratch, ending: Ending) -> str | None:
    try:
        scratch.listener.accept()[0].close()  # type: ignore[attr-defined]
    except BlockingIOError:
        return None
    return "the resume connected to the URL the run folder named"


def _note_read_and_left(scratch: Scratch, ending: Ending) -> str | None:
    if "not started by this kit on this boot; left running" not in " ".join(ending.text.split()):  # lines wrap
        return "the pid note was never examined (the case proves nothing)"
    return None if ending.code != 0 and ending.lines[-1].startswith("kit: error: ") else \
        f"the resume against a dead URL did not end in one error line (exit {ending.code})"


def _replay_whose_server_fails(scratch: Scratch) -> list[str]:
    failing = scratch.inbox / "llama-server"
    failing.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n")
    failing.chmod(0o755)
    return ["replay", str(_run_folder(scratch)), "--out", str(scratch.outputs), "--server-bin", str(failing),
            "--different-engine-ok"]


def _failed_in_one_error_line(scratch: Scratch, ending: Ending) -> str | None:
    last = ending.lines[-1] if ending.lines else ""
    return None if ending.code != 0 and last.startswith("kit: error: the replay of demo-20261201-070851 failed") \
        and "exited during start-up" in last else f"exit {ending.code}, last line {last!r}"


def _ran_on_the_kits_engine(scratch: Scratch, ending: Ending) -> str | None:
    wanted = f"different server binary: {scratch.canary_program} (sha256 not recorded) -> the kit's own engine"
    return None if any(wanted in line for line in ending.lines) else f"no line {wanted!r}"


def _refused(name: str, make: Callable[[Scratch], list[str]], command: str, needle: str) -> Case:
    """`kit analyze` leaves out (and names) an input folder it cannot read, analysing the rest; the others refuse."""
    if command != "analyze":
        return Case(cls="run folder", name=name, make=make, needle=needle)

    def left_out(scratch: Scratch, ending: Ending) -> str | None:
        if not any(needle in line for line in ending.lines):
            return f"no line naming {needle!r}"
        if ending.code == 0 and "runs: 0 (none)" not in ending.lines:
            return "the folder was analysed anyway"
        return None

    return Case(cls="run folder", name=name, make=make, expect="handled", check=left_out)


_ABSOLUTE = lambda s: str(s.home / ".ssh" / "id_ed25519")  # noqa: E731
REPLAY_PROGRESS = ("verifying ", "verified: ")  # kit replay says what it does while it verifies a bundle
_DOTS = lambda s: "../../outside/keep.txt"  # noqa: E731 - from inbox/demo-run up to the scratch folder

CASES = [
    Case(cls="bundle", name="replay of a bundle naming the canary as its server binary",
         make=_replay_bundle_naming_the_canary, needle="never chooses a program to run",
         progress=REPLAY_PROGRESS),
    Case(cls="bundle", name="replay --different-engine-ok of a bundle naming the canary", expect="handled",
         make=_replay_bundle_naming_the_canary_anyway, check=_ran_on_the_kits_engine, timeout=300,
         engine=True),
    Case(cls="bundle", name="show lists the recorded server binary as not run", expect="handled",
         make=_show_bundle_naming_the_canary, check=_shows_not_run),
    Case(cls="run folder", name="replay of a run folder naming the canary as its server binary",
         make=_replay_run_naming_the_canary, needle="never chooses a program to run"),
    Case(cls="run folder", name="resume of a run folder naming the canary as its server binary",
         make=_resume_run_naming_the_canary, needle="pass --server-bin"),
    Case(cls="run folder", name="replay of a protocol named by an absolute path",
         make=_protocol_named(lambda s: str(s.outside / "keep")), needle="is not a plain file name"),
    Case(cls="run folder", name="replay of a protocol named with ..",
         make=_protocol_named(lambda s: "../../../kit/models/registry"), needle="is not a plain file name"),
    *[_refused(f"{command} of a pass file {how}", _pass_file(name, command), command, needle)
      for command in ("resume", "analyze", "bundle") for how, name, needle in (
          ("named by an absolute path", _ABSOLUTE, "passes.s1.file '/"),
          ("named with ..", _DOTS, "passes.s1.file '../../outside/keep.txt' contains '..'"))],
    *[_refused(f"{command} of a pass file linked outside", _linked_pass_file(command), command,
               "passes.s1.file 'records/s1.jsonl' leads out of the run folder through a link")
      for command in ("resume", "analyze", "bundle")],
    Case(cls="run folder", name="resume of a run folder naming an engine URL", make=_resume_run_naming_a_listening_url,
         needle="a resume never contacts a URL on the run folder's word", check=_never_contacted),
    Case(cls="run folder", name="resume through a logs folder linked outside",
         make=_resume_through_a_linked_logs_folder, needle="holds a link, logs"),
    Case(cls="run folder", name="resume with a pipe where a records file goes", make=_resume_with_a_pipe_for_records,
         needle="holds records/s2.jsonl, which is not a regular file or folder"),
    Case(cls="run folder", name="resume of a manifest whose options are a string",
         make=_mistyped("resume", lambda m: m.update(options="x")), needle="options: Input should be a valid dictionary"),
    Case(cls="run folder", name="resume of a manifest whose thread count is text",
         make=_mistyped("resume", lambda m: m["options"].update(threads="all")), needle="options.threads is str"),
    Case(cls="run folder", name="replay of a manifest whose model sha256 is a number",
         make=_mistyped("replay", lambda m: m["engine"].update(model_sha256=5)), needle="engine.model_sha256: Input should be a valid string"),
    Case(cls="run folder", name="resume with a pid note naming another process", expect="handled",
         make=_pid_note_naming_the_victim, check=_note_read_and_left, timeout=120),
    Case(cls="concurrency and faults", name="replay whose server fails to start", expect="handled",
         make=_replay_whose_server_fails, check=_failed_in_one_error_line, timeout=240),
]
