"""Events a run emits as it goes; reporters (terminal, TUI) turn them into views. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class RunStarted:
    run_dir: Path
    protocol: str
    plan: dict[str, Any]


@dataclass(frozen=True)
class SessionStarted:
    session: str
    index: int
    total: int
    launch: dict[str, Any]


@dataclass(frozen=True)
class RequestDone:
    session: str
    unit: str
    phase: str
    seq: int
    cached_tokens: int | None
    prefill_ms: float | None
    gate_ok: bool


@dataclass(frozen=True)
class ItemVerdict:
    """One item's four phases are in: does each path reproduce, and do the paths differ?"""

    session: str
    unit: str
    done: int
    total: int
    recompute_reproduces: bool
    hit_reproduces: bool
    paths_differ: bool
    first_difference: int | None


@dataclass(frozen=True)
class EpisodeDone:
    """One episode of one pass is finished (and scored, where the workload scores)."""

    pass_id: str
    unit: str
    done: int
    total: int
    requests: int
    outcome: str
    valid: bool | None


@dataclass(frozen=True)
class EpisodeVerdict:
    """An episode now exists in both passes of a comparison: identical, or where they part."""

    comparison: str  # e.g. "path", "run-to-run cache-on"
    passes: tuple[str, str]
    unit: str
    diverged: bool
    kind: str | None
    request_index: int | None
    token_index: int | None


@dataclass(frozen=True)
class PlanEstimate:
    """A duration estimate from speeds measured on the engine before the run."""

    seconds: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    basis: str
    # where the speeds came from: `measured` (by this run, or by an earlier one whose measurement the kit's speed
    # cache kept: kit.protocols.speed_cache), `measured_at`, and the cache file and key where one was used
    speed: dict[str, Any] = field(default_factory=dict)

    def measured(self) -> str:
        """Where and when the speeds were measured, in words."""
        if not self.speed.get("cache_file") or str(self.speed.get("measured", "")).startswith("by this run"):
            return "measured here"
        return (f"measured here at {self.speed.get('measured_at')} by an earlier run, kept in the kit's speed cache; "
                "KIT_FRESH_ESTIMATE=1 measures again")


@dataclass(frozen=True)
class SessionEnded:
    session: str
    status: str  # OK, VOID or failed
    reason: str | None


@dataclass(frozen=True)
class PinningCall:
    """One call of the pinning protocol: its role, the cache state it was labelled with, its output."""

    session: str
    phase: str
    role: str
    arm_index: int
    state: str | None
    confidence: float | None
    prefill_ms: float | None
    output_sha256: str | None  # None for the excluded different-prompt calls


@dataclass(frozen=True)
class PassSummary:
    """A pinning pass is done: its status, whether its reload was confirmed, its measured outputs in order."""

    session: str
    phase: str
    status: str
    reload_confirmed: bool
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    """A line worth showing while a run prepares (e.g. a weight format being produced)."""

    text: str


@dataclass(frozen=True)
class UnitProgress:
    """Where a run's units stand (--executor ray): `unit` now runs on `node` (state "running") or has ended
    there ("done"); `done` of the run's `total` units have ended `elapsed_s` seconds after they were handed
    out, which gives an overall ETA."""

    unit: str
    node: str
    node_ip: str
    state: str  # running or done
    attempt: int
    done: int
    total: int
    elapsed_s: float

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (elapsed / units done × units left); None before a unit has ended."""
        return units_eta(self.done, self.total, self.elapsed_s)


def units_eta(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left when `done` of `total` units took `elapsed_s` (units run side by side: the pace is the
    run's, not one unit's); None before a unit has ended."""
    return elapsed_s / done * max(total - done, 0) if done else None


@dataclass(frozen=True)
class RunEnded:
    run_dir: Path
    status: str
    reason: str | None


class KindEvent:
    """An event a kind sends through `ctx.emit` to a listener of its own that takes it out of the stream (the
    grid's EpisodeFinished, to its LiveComparer), so no view is ever handed one."""


Event = (RunStarted | SessionStarted | RequestDone | ItemVerdict | EpisodeDone | EpisodeVerdict | PlanEstimate
         | SessionEnded | RunEnded | PinningCall | PassSummary | Notice | UnitProgress | KindEvent)
Emit = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A reporter that shows nothing."""
