"""`kit bisect`'s search, pure logic over an injected step: the plan's midpoint order, the first changed build
found wherever it lies, skipped builds (`git bisect skip`), and a bisect interrupted and resumed testing no
build twice."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kit.atlas import bisect
from kit.atlas.bisect_search import Contradiction, Outcome, Standing, midpoint, most_steps, search, standing

INDEX = [9093, 10429, 10435, 10441, 10448, 10452, 10453, 10456, 11401, 11434]


def _judge(first_changed: int, skip: frozenset[int] = frozenset()):
    """A step: builds from `first_changed` on are bad, those in `skip` cannot be driven; the builds tested."""
    tested: list[tuple[int, Standing]] = []

    def step(build: int, now: Standing) -> Outcome:
        tested.append((build, now))
        return "skip" if build in skip else "good" if build < first_changed else "bad"

    return step, tested


@given(st.lists(st.integers(1, 999_999), min_size=2, max_size=40, unique=True).map(sorted), st.data())
def test_the_first_changed_build_is_found_wherever_it_lies(numbers, data):
    good, *builds, bad = numbers
    first = data.draw(st.sampled_from([*builds, bad]), label="first changed")
    step, tested = _judge(first)
    found = search(good, bad, builds, {}, step)
    assert found.done and not found.skipped
    assert found.first_bad == first and found.last_good == max(b for b in numbers if b < first)
    assert found.answer() == f"{first} (last good: {found.last_good})"
    assert len(tested) <= most_steps(len(builds))
    for build, before in tested:  # every build tested is the plan's midpoint of the range then
        assert before.between == tuple(b for b in builds if before.last_good < b < before.first_bad)
        assert build == midpoint(list(before.between))


def test_every_position_in_the_plans_index():
    good, bad = 10435, 11434
    between = bisect.plan(good, bad, "ladder-cpu", "L2", INDEX).between
    for first in [*between, bad]:
        step, tested = _judge(first)
        found = search(good, bad, between, {}, step)
        assert found.first_bad == first, first
        assert tested[0][0] == bisect.plan(good, bad, "ladder-cpu", "L2", INDEX).first == 10452


def test_the_midpoint_order_on_the_index():
    step, tested = _judge(10456)
    search(10435, 11434, [10441, 10448, 10452, 10453, 10456, 11401], {}, step)
    assert [build for build, _ in tested] == [10452, 10456, 10453]  # bad at 10456, good at 10453: 10456 is first


def test_a_skipped_midpoint_gives_way_to_its_nearest_untested_neighbour():
    builds = [2, 3, 4, 5, 6, 7, 8]  # the midpoint is 5; skipped, 4 and 6 are as near: the later one, 6
    step, tested = _judge(4, skip=frozenset({5}))
    found = search(1, 9, builds, {}, step)
    assert [build for build, _ in tested][:2] == [5, 6]
    assert found.first_bad == 4 and found.last_good == 3 and not found.skipped


def test_a_skip_next_to_the_change_leaves_a_range():
    step, tested = _judge(5, skip=frozenset({4}))
    found = search(1, 9, [2, 3, 4, 5, 6, 7, 8], {}, step)
    assert found.done and found.skipped == (4,) and found.last_good == 3 and found.first_bad == 5
    assert found.answer() == "the change lies in builds 4 (skipped: the kit could not drive them) or 5 (last good: 3)"


def test_every_build_skipped_reports_the_whole_range():
    step, tested = _judge(5, skip=frozenset(range(2, 9)))
    found = search(1, 9, [2, 3, 4, 5, 6, 7, 8], {}, step)
    assert sorted(build for build, _ in tested) == [2, 3, 4, 5, 6, 7, 8]  # each tried once
    assert found.skipped == (2, 3, 4, 5, 6, 7, 8) and (found.last_good, found.first_bad) == (1, 9)
    assert "builds 2, 3, 4, 5, 6, 7, 8 (skipped" in found.answer()


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3])
def test_an_interrupted_search_resumes_without_testing_a_build_again(stop_after):
    builds = list(range(2, 40))
    step, tested = _judge(23, skip=frozenset({20}))
    outcomes: dict[int, Outcome] = {}

    def stopping(build: int, now: Standing) -> Outcome:
        if len(tested) == stop_after:
            raise KeyboardInterrupt
        return step(build, now)

    with pytest.raises(KeyboardInterrupt):
        search(1, 40, builds, outcomes, stopping)
    assert len(outcomes) == stop_after  # what was judged before the stop is kept
    found = search(1, 40, builds, outcomes, step)
    built = [build for build, _ in tested]
    assert len(built) == len(set(built)) and found.first_bad == 23
    whole, order = _judge(23, skip=frozenset({20}))
    search(1, 40, builds, {}, whole)
    assert built == [build for build, _ in order]  # the same builds in the same order as without the stop


def test_a_good_build_after_a_bad_one_is_a_contradiction():
    with pytest.raises(Contradiction, match="build 7 is judged good but an earlier build, 4, bad"):
        standing(1, 9, [2, 4, 7], {4: "bad", 7: "good"})


def test_nothing_between_is_done_at_once():
    step, tested = _judge(9)
    found = search(1, 9, [], {}, step)
    assert found.done and not tested and found.answer() == "9 (last good: 1)" and found.steps_left == 0
