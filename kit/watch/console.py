"""The live console of `kit watch`: one line per generation call (its state, latency and alarms), alarms
in bold, and a summary when the proxy stops."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.text import Text

from kit.core.safe_console import SafeConsole


class Live:
    """Prints each call as it ends (`call`), keeps counts for the summary (`summary`)."""

    def __init__(self, console: SafeConsole | None = None, quiet: bool = False):
        if console is not None and not isinstance(console, SafeConsole):
            raise TypeError("the watch console prints on a SafeConsole (kit.core.safe_console)")
        self.console = console or SafeConsole(stderr=True)
        self.quiet = quiet
        self.states: Counter[str] = Counter()
        self.alarms: Counter[str] = Counter()
        self.errors = 0

    def call(self, fields: dict[str, Any]) -> None:
        state = fields["state"].get("state") or "unknown"
        self.states[state] += 1
        self.alarms.update(fields["alarms"])
        self.errors += fields["error"] is not None and fields["output_sha256"] is None
        if fields["alarms"]:
            self.console.print(Text.assemble((f"ALARM {', '.join(fields['alarms'])}", "bold red"), ": request "
                                             f"{fields['request_sha256'][:12]} answered "
                                             f"{(fields['output_sha256'] or '—')[:12]} in state {state} "
                                             f"({fields['state'].get('detail', '')})"), soft_wrap=True)
        if self.quiet:
            return
        output = (fields["output_sha256"] or "—")[:12]
        error = (f"  {fields['error']}", "yellow") if fields["error"] else ""
        self.console.print(Text.assemble(f"{fields['started'][11:23]}  {fields['endpoint']}  {state:<10} "
                                         f"{fields['wall_seconds'] * 1000:8.1f} ms  req {fields['request_sha256'][:12]}  "
                                         f"out {output}  {fields['decoding'] or 'sampled'}", error), soft_wrap=True)

    def summary(self) -> str:
        calls = sum(self.states.values())
        states = ", ".join(f"{name} {n}" for name, n in self.states.most_common()) or "none"
        alarms = ", ".join(f"{name} {n}" for name, n in self.alarms.most_common()) or "none"
        return f"{calls} generation call(s); states: {states}; alarms: {alarms}; failed: {self.errors}"
