"""What the live screen shows, folded from the runner's events. No Textual here, so it is testable
on recorded event sequences; the screen only renders it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core.events import (
    EpisodeDone,
    EpisodeVerdict,
    Event,
    Notice,
    ItemVerdict,
    PlanEstimate,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    UnitProgress,
    units_eta,
)


def cache_state(cached_tokens: int | None) -> str:
    """cold / hit / unknown from the cached-token count the engine reported (None: it did not say)."""
    if cached_tokens is None:
        return "unknown"
    return "hit" if cached_tokens > 0 else "cold"


@dataclass(frozen=True)
class RequestCell:
    session: str
    unit: str
    phase: str
    state: str  # cold, hit, checkpoint or unknown
    cached_tokens: int | None
    prefill_ms: float | None
    gate_ok: bool


@dataclass(frozen=True)
class VerdictRow:
    """One line of the divergence table."""

    where: str  # session or comparison
    unit: str
    compares: str  # "path" / "run-to-run ..." / "paths & repeats"
    verdict: str
    diverged: bool


@dataclass
class PassGate:
    name: str
    status: str = "running"  # running, OK, VOID, failed, interrupted
    reason: str | None = None
    violations: int = 0
    requests: int = 0


@dataclass
class LiveState:
    """Everything the live screen shows. Feed it events with `apply`."""

    clock: Callable[[], float] = time.monotonic
    protocol: str = ""
    run_dir: Path | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    unit_name: str = "requests"
    total: int | None = None
    done: int = 0
    started_at: float | None = None
    stopped_at: float | None = None  # when the run ended: elapsed time counts no further
    estimate: PlanEstimate | None = None
    stage: str = "preparing"
    verdicts: list[VerdictRow] = field(default_factory=list)
    requests: list[RequestCell] = field(default_factory=list)
    gates: dict[str, PassGate] = field(default_factory=dict)
    ended: RunEnded | None = None
    messages: list[str] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)  # a Ray run's running units -> the node running each
    units: tuple[int, int] | None = None  # a Ray run's units: (done, total)
    units_since: float | None = None  # when its units were handed out (this clock)

    def apply(self, event: Event) -> None:
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        if handler:
            handler(event)

    def _on_RunStarted(self, event: RunStarted) -> None:
        self.protocol, self.run_dir, self.plan = event.protocol, event.run_dir, event.plan
        self.started_at = self.clock()
        if "requests" in event.plan:
            self.unit_name, self.total = "requests", event.plan["requests"]
        else:
            self.unit_name = "episodes"
            self.total = event.plan.get("episodes", 0) * len(event.plan.get("passes", [])) or None
        self.stage = "starting the engine"

    def _on_SessionStarted(self, event: SessionStarted) -> None:
        if self.unit_name == "requests":  # reset: a session is a pass; a grid's shared server is not
            self.gates[event.session] = PassGate(event.session)
        self.stage = f"session {event.session} ({event.index}/{event.total})"

    def _on_RequestDone(self, event: RequestDone) -> None:
        self.requests.append(RequestCell(event.session, event.unit, event.phase, cache_state(event.cached_tokens),
                                         event.cached_tokens, event.prefill_ms, event.gate_ok))
        gate = self.gates.setdefault(event.session, PassGate(event.session))
        gate.requests += 1
        gate.violations += not event.gate_ok
        if self.unit_name == "requests":
            self.done += 1
        self.stage = f"{event.session} {event.unit} {event.phase}"

    def _on_ItemVerdict(self, event: ItemVerdict) -> None:
        mark = {True: "✓", False: "✗"}
        paths = f"paths differ at token {event.first_difference}" if event.paths_differ else "paths identical"
        text = f"recompute {mark[event.recompute_reproduces]}  hit {mark[event.hit_reproduces]}  {paths}"
        diverged = event.paths_differ or not (event.recompute_reproduces and event.hit_reproduces)
        self.verdicts.append(VerdictRow(event.session, event.unit, "path+repeat", text, diverged))

    def _on_EpisodeDone(self, event: EpisodeDone) -> None:
        if self.unit_name == "episodes":
            self.done += 1
        # per-pass gates are keyed by pass id; a shared server's session is "grid"
        self.gates.setdefault(event.pass_id, PassGate(event.pass_id))

    def _on_EpisodeVerdict(self, event: EpisodeVerdict) -> None:
        if not event.diverged:
            text = "identical"
        elif event.token_index is not None:
            text = f"diverged at request {event.request_index}, token {event.token_index}"
        else:
            text = f"diverged at request {event.request_index} ({event.kind})"
        a, b = event.passes
        self.verdicts.append(VerdictRow(f"{a} vs {b}", event.unit, event.comparison, f"{event.comparison}: {text}",
                                        event.diverged))

    def _on_Notice(self, event: Notice) -> None:
        self.messages.append(event.text)

    def _on_UnitProgress(self, event: UnitProgress) -> None:
        if self.units is None:
            self.units_since = self.clock() - event.elapsed_s
        self.units = (event.done, event.total)
        if event.state == "running":
            self.nodes[event.unit] = event.node
        else:
            self.nodes.pop(event.unit, None)
        self.messages.append(f"unit {event.unit} {'runs' if event.state == 'running' else 'done'} on node "
                             f"{event.node}")

    def _on_PlanEstimate(self, event: PlanEstimate) -> None:
        self.estimate = event
        self.messages.append(f"estimate {event.seconds / 60:.1f} min (prefill {event.prefill_tokens_per_s:.0f} "
                             f"tok/s, decode {event.decode_tokens_per_s:.0f} tok/s, {event.measured()}; "
                             f"{event.basis})")

    def _on_SessionEnded(self, event: SessionEnded) -> None:
        gate = self.gates.setdefault(event.session, PassGate(event.session))
        gate.status, gate.reason = event.status, event.reason

    def _on_RunEnded(self, event: RunEnded) -> None:
        self.ended = event
        self.stop_clock()
        for gate in self.gates.values():
            if gate.status == "running":
                gate.status, gate.reason = event.status, event.reason
        self.stage = f"run {event.status}"

    # -- derived views ---------------------------------------------------------------------

    def stop_clock(self) -> None:
        """The run is over (ended, or failed before it could say so): elapsed time stops here."""
        if self.stopped_at is None:
            self.stopped_at = self.clock()

    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.stopped_at if self.stopped_at is not None else self.clock()) - self.started_at

    def eta_seconds(self) -> float | None:
        """Remaining time from the speed measured so far; before any unit is done, the engine's estimate."""
        if self.total is None:
            return None
        if self.done:
            return self.elapsed() / self.done * max(self.total - self.done, 0)
        return self.estimate.seconds if self.estimate else None

    def units_eta_seconds(self) -> float | None:
        """A Ray run's overall ETA: units done / units total × elapsed (before one has ended: eta_seconds)."""
        if self.units is None or self.units_since is None:
            return None
        done, total = self.units
        return units_eta(done, total, self.clock() - self.units_since) if done else self.eta_seconds()

    def units_line(self) -> str:
        """Which node runs which unit, and the overall ETA; empty unless the run's units run on Ray."""
        if self.units is None:
            return ""
        by_node: dict[str, list[str]] = {}
        for unit, node in self.nodes.items():
            by_node.setdefault(node, []).append(unit)
        running = " · ".join(f"{node}: {', '.join(units)}" for node, units in sorted(by_node.items()))
        done, total = self.units
        return f"units {done}/{total} done · {running or 'none running'}"

    def cache_counts(self) -> dict[str, int]:
        counts = {"cold": 0, "hit": 0, "checkpoint": 0, "unknown": 0}
        for cell in self.requests:
            counts[cell.state] = counts.get(cell.state, 0) + 1
        return counts

    def diverged_count(self) -> tuple[int, int]:
        return sum(v.diverged for v in self.verdicts), len(self.verdicts)
