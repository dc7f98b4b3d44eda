"""The state of one `kit bisect`: `bisect.json` in its folder, rewritten atomically after every step, so that the
same command continues an interrupted bisect without building or running a step again.

The file is read back as untrusted input (someone may have edited it, or it may be another bisect's): a
typed model with strict fields and nothing else, its builds and steps checked for what a bisect can have
written (builds ascending between the two ends, a build judged once, the ends judged first, no good build
after a bad one, a run folder named by a plain name of the folder's runs/, present there), and the
bisect it describes checked against the command line. Anything else is refused in one line naming the file
and what to do; nothing is built or run before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kit.atlas.bisect_search import Contradiction, Outcome, standing
from kit.core.atomic_file import write_text_atomic
from kit.core.errors import ConfigError
from kit.core.regular_file import read_regular

FORMAT: Literal["kit-bisect/1"] = "kit-bisect/1"
STATE_FILE = "bisect.json"
RUNS = "runs"  # the step runs' folders, under the bisect folder
MAX_BYTES = 1_000_000  # a real state file is a few kilobytes

Build = Annotated[int, Field(ge=1, le=999_999)]
Seconds = Annotated[float, Field(ge=0, le=30 * 86_400)]
Line = Annotated[str, Field(max_length=20_000)]
FolderName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")]
Role = Literal["good end", "bad end", "midpoint"]


class Step(BaseModel):
    """One build judged: its outcome, the result it gave (None for a skip) and what is said of it, its run
    folder (under runs/), and the seconds its build (0 when cached) and run took."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    build: Build
    role: Role
    outcome: Outcome
    result: Line | None
    said: Line
    run: FolderName | None
    cached: bool
    build_seconds: Seconds
    run_seconds: Seconds | None


class State(BaseModel):
    """What a bisect is (engine, ends, protocol and its sha256, result, CPU backend, model, the index's builds between
    the ends when it began) and the steps judged so far, in the order they were taken."""

    model_config = ConfigDict(strict=True, extra="forbid")

    format: Literal["kit-bisect/1"]
    engine: Literal["llamacpp"]
    good: Build
    bad: Build
    protocol: Line
    protocol_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    rung: Line
    cpu_backend: Literal["portable"]
    model: Line | None = None  # --model: the GGUF every step serves (None: the kit's pinned default)
    builds: list[Build]
    steps: list[Step] = []

    @model_validator(mode="after")
    def _coherent(self) -> State:
        if self.good >= self.bad:
            raise ValueError(f"good {self.good} is not before bad {self.bad}")
        if self.builds != sorted(set(self.builds)) or any(not self.good < b < self.bad for b in self.builds):
            raise ValueError("builds are not ascending, distinct builds strictly between good and bad")
        seen = [step.build for step in self.steps]
        if len(seen) != len(set(seen)):
            raise ValueError("a build is judged twice")
        roles = [step.role for step in self.steps]
        ends = {"good end": self.good, "bad end": self.bad}
        if roles[:2] != ["good end", "bad end"][:len(roles)] or "good end" in roles[2:] or "bad end" in roles[2:]:
            raise ValueError("the steps do not begin with the good end, then the bad end")
        for step in self.steps:
            if step.build != ends.get(step.role, step.build) or (step.role == "midpoint" and step.build not in
                                                                 self.builds):
                raise ValueError(f"step of build {step.build} is not a build of its role ({step.role})")
            if (step.outcome == "skip") != (step.result is None):
                raise ValueError(f"step of build {step.build}: a result is given exactly when it is not skipped")
            if step.role != "midpoint" and step.outcome == "skip":
                raise ValueError("an end is never skipped")
            if step.outcome != "skip" and step.run is None:
                raise ValueError(f"step of build {step.build} is judged but names no run folder")
        if self.steps and self.steps[0].outcome != "good":
            raise ValueError("the good end is not judged good")
        try:
            standing(self.good, self.bad, self.builds, self.outcomes())
        except Contradiction as exc:
            raise ValueError(str(exc)) from None
        return self

    def outcomes(self) -> dict[int, Outcome]:
        """The midpoints' outcomes (the search's input; the ends are its bounds)."""
        return {step.build: step.outcome for step in self.steps if step.role == "midpoint"}

    def step(self, role: Role) -> Step | None:
        return next((step for step in self.steps if step.role == role), None)

    def recorded(self, step: Step) -> State:
        return self.model_copy(update={"steps": [*self.steps, step]})


def path_of(folder: Path) -> Path:
    return folder / STATE_FILE


def save(folder: Path, state: State) -> None:
    """Replace the state file atomically (a reader never sees half of it)."""
    write_text_atomic(path_of(folder), state.model_dump_json(indent=2) + "\n")


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "the file"
    return f"{where}: {error.get('msg')}"


def load(folder: Path, wanted: State) -> State | None:
    """The state of the bisect in `folder` (None: none begun there), checked as untrusted input and against
    `wanted` (the command line's bisect, no steps); refused in one line naming the file and what to do."""
    path = path_of(folder)
    if not path.exists() and not path.is_symlink():
        return None
    fix = f"delete {path} to start this bisect over, or give another --out"
    data = read_regular(path, "the bisect state file", MAX_BYTES, fix)
    try:
        state = State.model_validate_json(data)
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a state file kit bisect wrote ({_first_error(exc)})", fix) from None
    differ = [f"{name} {getattr(state, name)} there, {getattr(wanted, name)} here"
              for name in ("engine", "good", "bad", "protocol", "rung", "cpu_backend", "model")
              if getattr(state, name) != getattr(wanted, name)]
    if differ:
        raise ConfigError(f"{path} belongs to another bisect ({'; '.join(differ)})",
                          f"run the command that began it (kit bisect {state.engine} --good {state.good} --bad "
                          f"{state.bad} --protocol {state.protocol} --rung {state.rung}"
                          f"{'' if state.model is None else ' --model ' + state.model}), or give another --out")
    if state.protocol_sha256 != wanted.protocol_sha256:
        raise ConfigError(f"{path}: the protocol {state.protocol} changed since this bisect began (sha256 "
                          f"{state.protocol_sha256[:12]}… then, {wanted.protocol_sha256[:12]}… now)",
                          f"put the protocol back as it was, or {fix[0].lower()}{fix[1:]}")
    runs = folder / RUNS
    for step in state.steps:
        run = runs / step.run if step.run else None
        if run is not None and step.outcome != "skip" and (run.is_symlink() or not run.is_dir()):
            raise ConfigError(f"{path} names the run folder {run} of build {step.build}, which is not a folder "
                              "there", fix)
    return state
