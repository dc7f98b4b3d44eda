"""Every hostile input of the corpus ends clear: refused in one line or handled, nothing executed, touched,
killed, hung or traced back (see README.md here and docs/security.md)."""

from __future__ import annotations

import os
import re
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.adversarial.corpus import Case, Scratch, fresh_process, all_cases, run_case
from tests.adversarial.forks import Forks

CASES = all_cases()
SIDE_BY_SIDE = max(2, min(8, 2 * (os.cpu_count() or 1)))  # cases run at once (engine cases: alone, in their test)

# Under `-n` every test of this module goes to one worker (tests/conftest.py makes `load` `loadgroup`): a worker
# starts every selected case up front, so two workers sharing the module would each run all of them.
# its own tier (not unit: ~90 s of the 2-core budget, one kit process per case); one xdist worker holds it whole
pytestmark = [pytest.mark.corpus, pytest.mark.xdist_group("adversarial corpus")]


@pytest.fixture(scope="module")
def forks(tmp_path_factory):
    """One kit, imported once, that each case's `kit` process is forked from (forks.py)."""
    folder = tmp_path_factory.mktemp("forks")
    (folder / "home").mkdir()
    server = Forks(folder, {**os.environ, "HOME": str(folder / "home"), "COLUMNS": "80"})
    yield server
    server.close()


@pytest.fixture(scope="module")
def started_cases(request, tmp_path_factory, forks):
    """Every selected case that starts no engine, started up front, SIDE_BY_SIDE at a time: each case is a
    `kit` process of its own (forked from `forks`, without a Python start and the kit's imports) in a scratch
    folder of its own, and much of its time is waiting on a hostile engine's drip, so side by side they take a
    fraction of the wall time one after another would. What is judged, and how, is unchanged; each case is
    still its own test."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", "") == "test_hostile_input_ends_clear"]
    pool = ThreadPoolExecutor(max_workers=SIDE_BY_SIDE, thread_name_prefix="corpus")
    started: dict[str, Future] = {
        case.id: pool.submit(run_case, case, tmp_path_factory.mktemp(re.sub(r"\W+", "-", case.id)[:40]), forks)
        for case in selected if not case.engine}
    yield started
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.engine] if case.engine else [])
                                  for case in CASES], ids=[case.id for case in CASES])
def test_hostile_input_ends_clear(case: Case, request, tmp_path):
    if case.engine:
        outcome, detail = run_case(case, tmp_path)
    else:
        outcome, detail = request.getfixturevalue("started_cases")[case.id].result()
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
def test_the_judge_sees_each_bad_outcome(make, outcome, tmp_path, forks):
    """The corpus can fail: a command that is not refused, a canary that ran, a victim killed; in a kit process
    of its own or forked alike."""
    case = Case(cls="bundle", name="judge", make=make, needle="never")
    assert run_case(case, tmp_path / "own")[0] == outcome
    assert run_case(case, tmp_path / "forked", forks)[0] == outcome


@pytest.mark.parametrize("args", [["--version"], ["--no-such-option"], ["verify", "no-such-bundle.zip"]],
                         ids=["version", "unknown option", "missing bundle"])
def test_a_forked_kit_ends_as_a_kit_process_of_its_own(args, tmp_path, forks):
    """Exit status and every line printed, forked or started fresh, alike (forks.py)."""
    endings = []
    for how in ("own", "forked"):
        scratch = Scratch(tmp_path / how)
        ending = forks.run(args, scratch.tmp, scratch.env(), 60) if how == "forked" else \
            fresh_process(args, scratch, 60)
        endings.append((ending[0], ending[1].replace(str(scratch.root), "SCRATCH")))
    assert endings[0] == endings[1]
    assert endings[0][1].strip()
