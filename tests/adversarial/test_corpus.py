"""Every hostile input of the corpus ends clear: refused in one line or handled, nothing executed, touched,
killed, hung or traced back (see README.md here and docs/security.md)."""

from __future__ import annotations

import pytest

from tests.adversarial.corpus import Case, Scratch, all_cases, run_case

CASES = all_cases()


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.engine] if case.engine else [])
                                  for case in CASES], ids=[case.id for case in CASES])
def test_hostile_input_ends_clear(case: Case, tmp_path):
    outcome, detail = run_case(case, tmp_path)
    assert outcome == "clear", f"{case.id}: {outcome}: {detail}"


def _forgets_to_refuse(scratch: Scratch) -> list[str]:
    return ["--version"]


def _runs_the_canary(scratch: Scratch) -> list[str]:
    scratch.marker.write_text("executed")  # as the canary program would
    return ["--version"]


def _kills_the_victim(scratch: Scratch) -> list[str]:
    import os
    import signal

    os.kill(scratch.victim(), signal.SIGKILL)
    return ["--version"]


@pytest.mark.parametrize("make, outcome", [
    (_forgets_to_refuse, "accepted"),
    (_runs_the_canary, "executed"),
    (_kills_the_victim, "touched"),
])
def test_the_judge_sees_each_bad_outcome(make, outcome, tmp_path):
    """The corpus can fail: a command that is not refused, a canary that ran, a victim killed."""
    assert run_case(Case(cls="bundle", name="judge", make=make, needle="never"), tmp_path)[0] == outcome
