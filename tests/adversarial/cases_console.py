"""Engine text with Rich markup, terminal escape sequences and C1 controls, on every console path that shows
it: `kit check URL`, `kit run demo --engine-url URL` and `kit watch --upstream URL` (its start line, a call's
line and its error, the summary). The kit prints it as written, without a control character, and never
crashes on it; a run that measured nothing ends with the no-verdict code (4), a failed one with 2.
docs/security.md rule 6."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.adversarial import hostile_engine
from tests.adversarial.corpus import Case, Ending, Scratch

# markup (closing tags, a style, an escaped bracket, an emoji code), OSC title, CSI clear, SGR, 8-bit CSI/OSC
HOSTILE = "b1-fake[/] [bold red]owned[/] \\[x] :smile: \x1b]0;owned title\x07\x1b[2J\x1b[31mred\x9b2J\x9d0;t\x9c end"
SHOWN = "b1-fake[/] [bold red]owned[/] \\[x] :smile: "  # what must appear, as written (controls dropped)
CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]
SMALL_CHECK = ["--kind", "llamacpp", "--cycles", "1", "--per-arm", "1", "--calibration-rounds", "1",
               "--always-fresh", "0", "--steady", "0", "--max-tokens", "4", "--request-deadline", "5"]
SMALL_DEMO = ["--items", "1", "--sessions", "1", "--max-tokens", "4", "--request-deadline", "5"]
NO_VERDICT = 4


class _Handler(hostile_engine._Handler):
    """llama-server whose build string is HOSTILE; how `/completion` answers is the scenario's."""

    scenario = "markup-build"
    completion = "good"  # good | error (HTTP 500 quoting HOSTILE) | void (200 whose `content` is HOSTILE, no tokens)

    def do_GET(self) -> None:
        if not self.path.startswith("/props"):
            return super().do_GET()
        self._send(json.dumps({"build_info": HOSTILE, "model_path": "/models/m.gguf", "total_slots": 1,
                               "chat_template": "{{ messages }}",
                               "default_generation_settings": {"n_ctx": 4096}}).encode())

    def _completion(self, body: dict) -> None:
        good = hostile_engine._good_completion(body)
        if self.completion == "error":
            self._send(json.dumps({"error": {"code": 500, "message": HOSTILE, "type": "server_error"}}).encode(), 500)
        elif self.completion == "void":
            self._send(json.dumps({**good, "content": HOSTILE, "tokens": "not a list"}).encode())
        else:
            self._send(json.dumps(good).encode())


class HostileConsoleEngine(hostile_engine.HostileEngine):
    """A llama-server on 127.0.0.1 whose every text the console may show is hostile."""

    def __init__(self, completion: str = "good"):
        super().__init__("markup-build")
        self.server.RequestHandlerClass = type("Handler", (_Handler,), {"completion": completion})  # before any request


def raw_controls(text: str) -> list[str]:
    """The control characters in `text` that are not the kit's own colouring: none expected at all (the
    corpus runs `kit` with no terminal, so nothing is coloured)."""
    return sorted({repr(c) for c in text if c in CONTROLS})


def shows_as_written(code: int, *needles: str, quoted: bool = True) -> Callable[[Scratch, Ending], str | None]:
    """Exit `code`; no control character; every needle (and, where the path `quoted` the hostile text,
    HOSTILE's printable part) shown as written however Rich wrapped it."""
    def check(scratch: Scratch, ending: Ending) -> str | None:
        if ending.code != code:
            return f"exit {ending.code}, not {code}: {ending.lines[-3:]}"
        if raw_controls(ending.text):
            return f"control characters reached the console: {raw_controls(ending.text)}"
        squashed = "".join(ending.text.split())
        for needle in (SHOWN, *needles) if quoted else needles:
            if "".join(needle.split()) not in squashed:
                return f"{needle!r} was not shown as written"
        return None
    return check


def _engine(completion: str, command: list[str], extra: list[str]) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        engine = HostileConsoleEngine(completion)
        scratch.defer(engine.stop)
        if command[0] == "check":
            return ["check", engine.url, *extra, "--out", str(scratch.outputs)]
        return [*command, "--engine-url", engine.url, *extra, "--out", str(scratch.outputs)]
    return make


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kit_process(marker: str) -> int | None:
    """The pid of the `kit` process whose command line holds `marker` (this case's own child)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kit.cli" in cmdline and marker.encode() in b" ".join(cmdline):
                return int(entry.name)
    return None


def _watch(scratch: Scratch) -> list[str]:
    """`kit watch` of a hostile engine; a client sends one call through it whose answer is HTTP 500 quoting
    HOSTILE on a path carrying markup, then the watch is stopped as Ctrl-C would (SIGINT)."""
    engine = HostileConsoleEngine("error")
    scratch.defer(engine.stop)
    port = _free_port()

    def client() -> None:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                httpx.post(f"http://127.0.0.1:{port}/completion", json={"prompt": "hi", "n_predict": 2,
                                                                        "temperature": 0}, timeout=10)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        time.sleep(0.5)
        pid = _kit_process(str(scratch.outputs))
        if pid is not None:
            os.kill(pid, 2)

    threading.Thread(target=client, daemon=True).start()
    return ["watch", "--upstream", engine.url, "--listen", f"127.0.0.1:{port}", "--out", str(scratch.outputs)]


CASES = [
    Case(cls="engine answer", name="console: check of an engine whose build string is hostile",
         make=_engine("good", ["check"], SMALL_CHECK), expect="handled",
         check=shows_as_written(NO_VERDICT, "kit: error: no verdict: every pass was VOID", quoted=False)),
    Case(cls="engine answer", name="console: check of an engine whose errors quote hostile text",
         make=_engine("error", ["check"], SMALL_CHECK), expect="handled", check=shows_as_written(2)),
    Case(cls="engine answer", name="console: demo on an engine whose build string is hostile",
         make=_engine("good", ["run", "demo"], SMALL_DEMO), expect="handled", check=shows_as_written(0)),
    Case(cls="engine answer", name="console: demo on an engine whose errors quote hostile text",
         make=_engine("error", ["run", "demo"], SMALL_DEMO), expect="handled", check=shows_as_written(2)),
    Case(cls="engine answer", name="console: demo whose every pass is VOID ends with no verdict",
         make=_engine("void", ["run", "demo"], SMALL_DEMO + ["--sessions", "2"]), expect="handled",
         check=shows_as_written(NO_VERDICT, "kit: error: no verdict: every pass was VOID")),
    Case(cls="engine answer", name="console: watch of an engine whose build and errors are hostile",
         make=_watch, expect="handled", check=shows_as_written(0, "kit watch: stopped; 1 generation call(s)"),
         timeout=60, own_process=True),
]
