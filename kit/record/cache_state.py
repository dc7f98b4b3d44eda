"""Which prompt-cache state served a request: read from telemetry, or from prefill time calibrated per machine.

Three states are known (seed 002, and llama.cpp's own slot logic):

- ``full_eval``: nothing reused; the whole prompt is evaluated (a freshly loaded instance).
- ``partial``: a prefix is restored (a chat-template checkpoint, or the prefix a different prompt
  shared) and the rest evaluated.
- ``full_kv``: the whole prompt is restored from the KV cache; only a boundary token or a few are
  re-evaluated (the same prompt again on an instance that kept it).

Telemetry (cached tokens) names the state directly. Where an engine reports no cached tokens, prefill
time is the signature, and its class boundaries are a per-machine, per-model fact: they come from
labelled calls (`calibrate`), never from constants. Classes whose calibration ranges overlap are
merged, so the classifier never claims a separation the calibration did not show.

Pure functions and frozen values only; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

STATES = ("full_eval", "partial", "full_kv")
HISTORY_STATE = {"fresh": "full_eval", "after_other": "partial", "repeat": "full_kv"}
"""The state a labelled calibration call is expected to land in, by what happened before it."""

MIN_LOG_SD = 0.02  # numerical floor for a log-time spread (2 %), not a class boundary


@dataclass(frozen=True)
class StateLabel:
    """The state assigned to one request. `state` is None when it cannot be told; `confidence` is a
    probability in [0, 1] (1.0 for telemetry) or None."""

    state: str | None
    confidence: float | None
    source: str  # "telemetry", "timing" or "none"
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def from_telemetry(cached_tokens: int | None, prompt_tokens: int | None, reuse_tolerance: int = 8) -> StateLabel | None:
    """The state as the engine's cached-token count shows it, or None when the engine did not say.

    Full-KV reuse leaves at most `reuse_tolerance` prompt tokens to evaluate (llama.cpp re-evaluates 1,
    Ollama's runner 5 of 116 in seed 002)."""
    if cached_tokens is None or prompt_tokens is None or prompt_tokens <= 0:
        return None
    evaluated = prompt_tokens - cached_tokens
    if cached_tokens == 0:
        state = "full_eval"
    elif evaluated <= reuse_tolerance:
        state = "full_kv"
    else:
        state = "partial"
    return StateLabel(state, 1.0, "telemetry", f"{cached_tokens} of {prompt_tokens} prompt tokens reused")


@dataclass(frozen=True)
class ClassFit:
    """One timing class of the calibration: the states in it (more than one when they overlapped)
    and its prefill-time range and log-normal fit."""

    states: tuple[str, ...]
    n: int
    min_ms: float
    max_ms: float
    median_ms: float
    log_mean: float

    @property
    def name(self) -> str:
        return "+".join(self.states)


@dataclass(frozen=True)
class Calibration:
    """Prefill-time classes fitted on labelled calls, slowest (full evaluation) to fastest.

    `separated` is True only when every labelled state forms its own class with no overlap;
    `boundaries[i]` (ms) lies between class i and i+1 (geometric midpoint of the gap)."""

    classes: tuple[ClassFit, ...]
    boundaries: tuple[float, ...]
    log_sd: float
    separated: bool
    merged: tuple[tuple[str, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {"classes": [{**asdict(c), "name": c.name} for c in self.classes], "boundaries_ms": list(self.boundaries),
                "log_sd": self.log_sd, "separated": self.separated, "merged": [list(m) for m in self.merged]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        classes = tuple(ClassFit(states=tuple(c["states"]), n=c["n"], min_ms=c["min_ms"], max_ms=c["max_ms"],
                                 median_ms=c["median_ms"], log_mean=c["log_mean"]) for c in data["classes"])
        return cls(classes, tuple(data["boundaries_ms"]), data["log_sd"], data["separated"],
                   tuple(tuple(m) for m in data["merged"]))


def calibrate(samples: Iterable[tuple[str, float]]) -> Calibration:
    """Fit timing classes from (state, prefill_ms) pairs of labelled calls.

    Each state's range is [min, max] of its samples. States are ordered by median time; a state whose
    range overlaps the class before it joins that class (and the calibration is not separated)."""
    by_state: dict[str, list[float]] = {}
    for state, ms in samples:
        if ms is None or not ms > 0:
            raise ValueError(f"prefill time must be a positive number of ms, got {ms!r} for {state}")
        by_state.setdefault(state, []).append(float(ms))
    if not by_state:
        raise ValueError("no labelled calls to calibrate from")
    order = sorted(by_state, key=lambda s: -statistics.median(by_state[s]))
    groups: list[tuple[list[str], list[float]]] = []
    for state in order:
        values = by_state[state]
        if groups and max(values) >= min(groups[-1][1]):
            groups[-1][0].append(state)
            groups[-1][1].extend(values)
        else:
            groups.append(([state], list(values)))
    classes = tuple(_fit(states, values) for states, values in groups)
    boundaries = tuple(math.sqrt(slow.min_ms * fast.max_ms) for slow, fast in pairwise(classes))
    return Calibration(classes, boundaries, _pooled_log_sd(groups), all(len(c.states) == 1 for c in classes),
                       tuple(c.states for c in classes if len(c.states) > 1))


def _fit(states: list[str], values: list[float]) -> ClassFit:
    logs = [math.log(v) for v in values]
    return ClassFit(tuple(states), len(values), min(values), max(values), statistics.median(values),
                    statistics.fmean(logs))


def _pooled_log_sd(groups: list[tuple[list[str], list[float]]]) -> float:
    squares, dof = 0.0, 0
    for _, values in groups:
        logs = [math.log(v) for v in values]
        if len(logs) > 1:
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return max(MIN_LOG_SD, math.sqrt(squares / dof)) if dof else MIN_LOG_SD


def classify(calibration: Calibration, prefill_ms: float | None) -> StateLabel:
    """The timing class of one request, with the posterior probability of that class (log-normal
    classes with the pooled spread, equal priors) as its confidence. A merged class keeps its
    merged name ("full_kv+partial"): the calibration could not tell those states apart."""
    if prefill_ms is None or not prefill_ms > 0:
        return StateLabel(None, None, "none", "no prefill time reported")
    index = sum(prefill_ms < b for b in calibration.boundaries)
    chosen = calibration.classes[index]
    x = math.log(prefill_ms)
    weights = [math.exp(-0.5 * ((x - c.log_mean) / calibration.log_sd) ** 2) for c in calibration.classes]
    total = sum(weights)
    confidence = weights[index] / total if total > 0 else (1.0 if len(weights) == 1 else 0.0)
    inside = chosen.min_ms <= prefill_ms <= chosen.max_ms
    detail = f"{prefill_ms:.1f} ms, {'inside' if inside else 'outside'} the calibrated range of {chosen.name}"
    return StateLabel(chosen.name, round(confidence, 6), "timing", detail)


@dataclass(frozen=True)
class Separation:
    """Do two sets of prefill times separate with no overlap? `ratio` is the gap as a time ratio
    (lowest of the slower set over highest of the faster set; > 1 when they separate)."""

    separate: bool
    a_range: tuple[float, float]
    b_range: tuple[float, float]
    ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def separation(a: Sequence[float], b: Sequence[float]) -> Separation:
    """Whether the times `a` and `b` fall in disjoint ranges (either order)."""
    if not a or not b:
        raise ValueError("both sets need at least one prefill time")
    ar, br = (min(a), max(a)), (min(b), max(b))
    slow, fast = (ar, br) if statistics.median(a) >= statistics.median(b) else (br, ar)
    ratio = slow[0] / fast[1] if fast[1] > 0 else None
    return Separation(slow[0] > fast[1], ar, br, round(ratio, 6) if ratio is not None else None)
