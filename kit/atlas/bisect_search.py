"""The search of `kit bisect`, pure logic: where a bisect stands after the steps judged so far, which build it
tests next, and when it is done. Nothing here builds or runs anything: the step is a function handed in
(kit.atlas.bisect_run gives the real one; tests give their own).

A build is judged `good` (its result is the good end's), `bad` (any other result: the bad end's, or one
that is neither, which counts as changed) or `skip` (the kit cannot drive it: its build failed, or its run
was refused or its engine could not start), as `git bisect skip`. The range is the builds strictly between
the last good build and the first bad one; the next build is the plan's midpoint of that range,
`between[(len(between) - 1) // 2]` (kit.atlas.bisect.plan names the same first step), and where that build
was skipped, the nearest untested build of the range (the later one of two as near: the midpoint leans
early). The search is done when no build of the range is left untested: the first bad build is the first
changed one, unless skipped builds lie before it, and then the change lies in the skipped builds or the
first bad one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

Outcome = Literal["good", "bad", "skip"]
OUTCOMES: tuple[Outcome, ...] = ("good", "bad", "skip")


def midpoint(between: list[int]) -> int:
    """The build tested next among `between` (ascending, not empty): the plan's rule."""
    return between[(len(between) - 1) // 2]


def most_steps(count: int) -> int:
    """Steps a bisect over `count` builds between its ends takes at most, none skipped."""
    return math.ceil(math.log2(count + 1)) if count > 0 else 0


@dataclass(frozen=True)
class Standing:
    """Where a bisect stands: the last good build, the first bad one, and the builds strictly between them,
    those skipped and those still untested (ascending)."""

    last_good: int
    first_bad: int
    between: tuple[int, ...]
    skipped: tuple[int, ...]

    @property
    def untested(self) -> list[int]:
        return [build for build in self.between if build not in self.skipped]

    @property
    def done(self) -> bool:
        return not self.untested

    @property
    def steps_left(self) -> int:
        """Steps left at most, no further build skipped."""
        return most_steps(len(self.untested))

    def next_build(self) -> int | None:
        """The midpoint of the range; where it was skipped, the nearest untested build; None when done."""
        untested = self.untested
        if not untested:
            return None
        between = list(self.between)
        middle = between.index(midpoint(between))
        return min(untested, key=lambda build: (abs(between.index(build) - middle), -build))

    def range_text(self) -> str:
        skipped = f", {len(self.skipped)} of them skipped" if self.skipped else ""
        return (f"{self.last_good} (good) .. {self.first_bad} (bad): {len(self.between)} build(s) between"
                f"{skipped}, at most {self.steps_left} step(s) left")

    def answer(self) -> str:
        """The finding, once done: the first changed build, or the builds that hold the change."""
        if self.skipped:
            return (f"the change lies in builds {', '.join(map(str, self.skipped))} (skipped: the kit could not "
                    f"drive them) or {self.first_bad} (last good: {self.last_good})")
        return f"{self.first_bad} (last good: {self.last_good})"


class Contradiction(ValueError):
    """Outcomes no bisect could have produced: a good build after a bad one."""


def standing(good: int, bad: int, builds: list[int], outcomes: dict[int, Outcome]) -> Standing:
    """Where a bisect over `builds` (the index's builds strictly between `good` and `bad`) stands after
    `outcomes` (build -> outcome, the ends' not needed); Contradiction when a good build follows a bad one."""
    last_good = max([good, *(b for b, o in outcomes.items() if o == "good")])
    first_bad = min([bad, *(b for b, o in outcomes.items() if o == "bad")])
    if last_good >= first_bad:
        raise Contradiction(f"build {last_good} is judged good but an earlier build, {first_bad}, bad")
    between = tuple(b for b in builds if last_good < b < first_bad)
    skipped = tuple(b for b in between if outcomes.get(b) == "skip")
    return Standing(last_good, first_bad, between, skipped)


def search(good: int, bad: int, builds: list[int], outcomes: dict[int, Outcome],
           step: Callable[[int, Standing], Outcome], after: Callable[[int, Outcome, Standing], None] =
           lambda build, outcome, now: None) -> Standing:
    """Test builds until done: `step(build, standing before)` judges one build (the caller records it), then
    `after(build, outcome, standing now)`. `outcomes` holds the steps done before (a resumed bisect: none of
    them is tested again) and is updated in place. The standing when done."""
    now = standing(good, bad, builds, outcomes)
    while (build := now.next_build()) is not None:
        outcome = step(build, now)
        outcomes[build] = outcome
        now = standing(good, bad, builds, outcomes)
        after(build, outcome, now)
    return now
