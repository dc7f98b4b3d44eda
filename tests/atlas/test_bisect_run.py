"""`kit bisect llamacpp ...` through the command line (kit.cli.main, in this process) with the build and the run
substituted: a "build" is found cached, and its "run" is a copy of the Zen 4 demo's recorded run folder (the
kit's fixture bundle), its outputs changed from one build on. Everything else is real: the runs verified and
recomputed as `kit atlas` does, `--rung outputs` judged by the atlas's replay identity, the state file, the
atlas rewritten after every step, the resume, the skip and the refusals."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from kit.atlas import bisect_run, bisect_state, bisect_steps
from kit.atlas.bisect_run import Bisect
from kit.atlas.bisect_state import State, Step
from kit.atlas.bisect_steps import Built, Judged, Ran
from kit.atlas.sources import verified
from kit.launch.llamacpp import llamacpp_sdist
from tests.atlas.test_atlas import _run_folder
from tests.bundle.kit_cli import run_here

INDEX = [9, 10, 11, 12, 13, 14, 15]  # the index: ends 10 and 14, builds 11, 12, 13 between


class Lab:
    """The substituted build and run: which builds fail to build, which runs are refused, where Ctrl-C comes,
    and from which build on the outputs differ; every build made and run, in order."""

    def __init__(self, tmp: Path, first_changed: int):
        self.same, self.changed = _run_folder(tmp / "same", "Zen 4"), _run_folder(tmp / "changed", "Zen 4", True)
        self.first_changed = first_changed
        self.broken: set[int] = set()
        self.refused: set[int] = set()
        self.stop_at: int | None = None
        self.built: list[int] = []
        self.ran: list[int] = []
        self.models: list[str | None] = []

    def build(self, build: int, say) -> Built:
        self.built.append(build)
        if build in self.broken:
            return Built(False, 1.0, why="its build failed: cmake build failed (see the log)")
        return Built(True, 0.0, 60.0)

    def run(self, protocol: str, engine: dict, runs: Path, say) -> Ran:
        build = engine["engine_build"]
        assert protocol == "demo" and engine["cpu_backend"] == "portable"
        if build == self.stop_at:
            self.stop_at = None
            raise KeyboardInterrupt
        self.ran.append(build)
        self.models.append(engine.get("model"))
        if build in self.refused:
            return Ran(None, skip="its run was refused: llama-server of build 12 lacks --cache-ram")
        target = runs / f"demo-b{build}"
        shutil.copytree(self.changed if build >= self.first_changed else self.same, target)
        manifest = json.loads((target / "manifest.json").read_text())
        manifest["provenance"]["host"]["cpu"] = f"the CPU of build {build}"  # one atlas row per build
        (target / "manifest.json").write_text(json.dumps(manifest))
        return Ran(target)


@pytest.fixture
def lab(tmp_path, monkeypatch) -> Lab:
    made = Lab(tmp_path, first_changed=13)
    monkeypatch.setattr(bisect_steps, "build_step", made.build)
    monkeypatch.setattr(bisect_steps, "run_protocol", made.run)
    monkeypatch.setattr(llamacpp_sdist, "available_builds", lambda: INDEX)
    return made


def _bisect(folder: Path, *more: str, good: int = 10):
    return run_here("bisect", "llamacpp", "--good", str(good), "--bad", "14", "--protocol", "demo", "--rung",
                    "outputs", "--out", str(folder), *more)


def _state(folder: Path) -> dict:
    return json.loads((folder / "bisect.json").read_text())


def test_the_bisect_names_the_first_build_whose_outputs_change(lab, tmp_path):
    folder = tmp_path / "bisect"
    done = _bisect(folder)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.splitlines()[-1] == "first build where outputs changes: 13 (last good: 12)"
    assert lab.ran == [10, 14, 12, 13]  # the ends, then the plan's midpoint (12), then 13
    steps = _state(folder)["steps"]
    assert [(s["build"], s["role"], s["outcome"]) for s in steps] == [
        (10, "good end", "good"), (14, "bad end", "bad"), (12, "midpoint", "good"), (13, "midpoint", "bad")]
    assert steps[1]["said"].startswith("outputs differ from good: ") and "byte-identical" in steps[1]["said"]
    assert "step 1 (at most 2 left): build 12" in done.stdout and "  build 12: cached (built here in 1.0 min)" \
        in done.stdout and "range left: 12 (good) .. 14 (bad): 1 build(s) between" in done.stdout
    html, csv = folder / "atlas.html", folder / "atlas.csv"
    assert f"atlas: {html}  {csv}" in done.stdout
    rows = csv.read_text().splitlines()
    assert len(rows) == 1 + 4 and all(f"the CPU of build {b}" in "\n".join(rows) for b in (10, 12, 13, 14))
    assert "bisect-llamacpp" not in html.read_text() and "kit bisect: bisect" in html.read_text()
    table = done.stdout[done.stdout.index("  build  role"):].splitlines()
    assert [line.split()[0] for line in table[1:5]] == ["10", "14", "12", "13"]


def test_an_interrupted_bisect_continues_where_it_stopped(lab, tmp_path):
    folder = tmp_path / "bisect"
    lab.stop_at = 12
    stopped = _bisect(folder)
    assert stopped.returncode == 130
    line = stopped.stderr.strip()
    assert line.startswith("kit: error: the bisect was stopped (Ctrl-C); ") and "\n" not in line
    assert f"{folder / 'bisect.json'} keeps the 2 step(s) done; run the same command to continue" in line
    assert [s["build"] for s in _state(folder)["steps"]] == [10, 14] and (folder / "atlas.html").is_file()
    again = _bisect(folder)
    assert again.returncode == 0, again.stderr
    assert "continuing the bisect in" in again.stdout and "2 step(s) done" in again.stdout
    assert lab.ran == [10, 14, 12, 13]  # no step run twice
    assert lab.built == [10, 14, 12, 12, 13]  # only the step that was stopped is looked up again
    assert again.stdout.splitlines()[-1] == "first build where outputs changes: 13 (last good: 12)"
    finished = _bisect(folder)  # a bisect that is done says its answer again, running nothing
    assert finished.returncode == 0 and lab.ran == [10, 14, 12, 13]


def test_every_step_serves_the_model_given_and_a_resume_with_another_is_refused(lab, tmp_path):
    folder = tmp_path / "bisect"
    done = _bisect(folder, "--model", "/models/other.F16.gguf")
    assert done.returncode == 0, done.stderr
    assert lab.models == ["/models/other.F16.gguf"] * 4 and _state(folder)["model"] == "/models/other.F16.gguf"
    again = _bisect(folder)
    assert again.returncode == 2 and lab.ran == [10, 14, 12, 13]
    assert "belongs to another bisect (model /models/other.F16.gguf there, None here)" in again.stderr
    assert "--rung outputs --model /models/other.F16.gguf), or give another --out" in again.stderr
    plain = bisect_run.default_folder(10, 14, "demo", "outputs")
    assert bisect_run.default_folder(10, 14, "demo", "outputs", "/m/other.F16.gguf").name == f"{plain.name}-other.F16"


def test_a_build_that_fails_is_skipped_and_its_neighbour_tried(lab, tmp_path):
    lab.broken = {12}
    done = _bisect(tmp_path / "bisect")
    assert "  skip: build 12: its build failed: cmake build failed (see the log)" in done.stdout
    assert lab.ran == [10, 14, 13, 11]  # 12 skipped: its nearer neighbours, the later first
    assert done.returncode == 4
    assert done.stderr.strip() == (
        "kit: error: no first build where outputs changes could be named: the change lies in builds 12 (skipped: "
        "the kit could not drive them) or 13 (last good: 11); fix what kept those builds from running, then delete "
        f"{tmp_path / 'bisect' / 'bisect.json'} and run the same command (steps are rerun; builds stay cached)")


def test_a_refused_run_is_skipped(lab, tmp_path):
    lab.refused = {12}
    lab.first_changed = 12
    done = _bisect(tmp_path / "bisect")
    assert "  skip: build 12: its run was refused: llama-server of build 12 lacks --cache-ram" in done.stdout
    assert done.returncode == 4 and "the change lies in builds 12 (skipped" in done.stderr
    assert "or 13 (last good: 11)" in done.stderr


def test_ends_that_agree_stop_with_nothing_changed(lab, tmp_path):
    lab.first_changed = 99
    folder = tmp_path / "bisect"
    done = _bisect(folder)
    assert done.returncode == 4 and lab.ran == [10, 14]
    assert done.stderr.startswith("kit: error: nothing changed between 10 and 14 on outputs: both give same as good")
    assert (folder / "atlas.html").is_file() and len((folder / "atlas.csv").read_text().splitlines()) == 3


def test_an_end_the_kit_cannot_drive_is_refused(lab, tmp_path):
    lab.broken = {10}
    done = _bisect(tmp_path / "bisect")
    assert done.returncode == 2 and lab.ran == []
    assert done.stderr.strip() == ("kit: error: the good end 10 cannot be bisected from: its build failed: cmake "
                                   "build failed (see the log); fix that, or give another --good (the same command "
                                   "continues)")


@pytest.mark.parametrize("change, needle", [
    (lambda s: "{not json", "is not a state file kit bisect wrote"),
    (lambda s: s.replace('"format": "kit-bisect/1"', '"format": "kit-bisect/9"'), "is not a state file kit bisect"),
    (lambda s: s.replace('"cached": true', '"cached": "yes"', 1), "steps.0.cached"),
    (lambda s: s.replace('"rung": "outputs"', '"rung": "outputs", "extra": 1'), "extra: Extra inputs are not"),
    (lambda s: s.replace('"outcome": "good"', '"outcome": "bad"', 1), "the good end is not judged good"),
    (lambda s: s.replace('"run": "demo-b10"', '"run": "../../etc"'), "steps.0.run"),
    (lambda s: s.replace('"run": "demo-b10"', '"run": "demo-b99"'), "names the run folder"),
    (lambda s: s.replace('"good": 10', '"good": 9').replace('"build": 10', '"build": 9'),
     "belongs to another bisect (good 9 there, 10 here)"),
    (lambda s: s.replace('"rung": "outputs"', '"rung": "L2"'), "belongs to another bisect (rung L2 there"),
    (lambda s: re.sub(r'"protocol_sha256": "[0-9a-f]{64}"', '"protocol_sha256": "' + "0" * 64 + '"', s),
     "the protocol demo changed since this bisect began"),
])
def test_a_tampered_or_foreign_state_file_is_refused(lab, tmp_path, change, needle):
    folder = tmp_path / "bisect"
    lab.first_changed = 99
    assert _bisect(folder).returncode == 4  # two steps recorded
    path = folder / "bisect.json"
    path.write_text(change(path.read_text()))
    ran, built = list(lab.ran), list(lab.built)
    done = _bisect(folder)
    assert done.returncode == 2 and lab.ran == ran and lab.built == built and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"kit: error: {path}") and "--out" in line, line
    assert any(part in line for part in needle.split("|")), line


def test_a_state_file_that_is_a_link_is_refused(lab, tmp_path):
    folder = tmp_path / "bisect"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (folder / "bisect.json").symlink_to(elsewhere)
    done = _bisect(folder)
    assert done.returncode == 2 and lab.built == [] and "is a symbolic link" in done.stderr


def _numbers_moved(run_dir: Path) -> Path:
    """The run with one log-probability of its first answer moved by one unit in the last place: the same
    tokens and text, other numbers (what a changed summation order in a kernel does)."""
    records = run_dir / "records" / "s1.jsonl"
    lines = records.read_text().splitlines()
    first = json.loads(lines[0])
    entry = first["completion"]["logprobs"][0]
    entry["logprob"] = math.nextafter(entry["logprob"], 0.0)
    lines[0] = json.dumps(first)
    records.write_text("\n".join(lines) + "\n")
    return run_dir


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judged")
    folders = [_run_folder(tmp / "a", "Zen 4"), _run_folder(tmp / "b", "Zen 4"), _run_folder(tmp / "c", "Zen 4", True),
               _numbers_moved(_run_folder(tmp / "d", "Zen 4"))]
    with verified(folders) as runs:
        return runs


def test_outputs_are_judged_by_the_atlas_replay_identity(demo_runs):
    good, same, changed, _ = demo_runs
    assert bisect_steps.judge(good, "outputs", good) == Judged(
        "same as good", "outputs same as good: 16/16 requests' outputs byte-identical to the good end's")
    assert bisect_steps.judge(same, "outputs", good).key == "same as good"
    assert bisect_steps.judge(changed, "outputs", good) == Judged(
        "differ from good", "outputs differ from good: 15/16 requests' outputs byte-identical to the good end's")


def test_logprobs_tell_apart_builds_whose_tokens_agree_but_whose_numbers_moved(demo_runs):
    good, same, changed, moved = demo_runs
    assert bisect_steps.judge(moved, "outputs", good).key == "same as good"
    assert bisect_steps.judge(moved, "logprobs", good) == Judged(
        "differ from good", "logprobs differ from good: 15/16 requests' outputs and log-probabilities "
                            "byte-identical to the good end's")
    assert bisect_steps.judge(same, "logprobs", good).key == "same as good"
    assert bisect_steps.judge(changed, "logprobs", good).key == "differ from good"
    assert bisect_steps.judge(changed, "L2", good, no_verdict="every pass was VOID") == \
        Judged("no verdict", "no verdict: every pass was VOID")


def test_a_paper_measure_is_judged_by_its_value(demo_runs):
    good, same, *_ = demo_runs
    judged = bisect_steps.judge(good, "IV:paths_differ", good)
    assert judged == Judged("s1 0% (0/2); s2 0% (0/2)", "IV:paths_differ s1 0% (0/2); s2 0% (0/2)")  # 2 items
    assert bisect_steps.judge(same, "IV:paths_differ", good) == judged
    assert bisect_steps.judge(good, "L2", good) == Judged("not measured", "L2: not measured (the run has no ladder "
                                                          "results)")


def test_a_result_that_is_neither_end_counts_as_changed(tmp_path):
    state = State(format="kit-bisect/1", engine="llamacpp", good=1, bad=5, protocol="ladder-cpu", protocol_sha256="a" * 64,
                  rung="L2", cpu_backend="portable", builds=[2, 3, 4])
    for build, role, result, outcome in ((1, "good end", "holds", "good"), (5, "bad end", "diverges", "bad")):
        state = state.recorded(Step(build=build, role=role, outcome=outcome, result=result, said=f"L2 {result}",
                                    run=f"r{build}", cached=True, build_seconds=0.0, run_seconds=1.0))
    work = Bisect(tmp_path, state, print)
    assert work._outcome("midpoint", Judged("holds", "L2 holds")) == ("good", "L2 holds")
    assert work._outcome("midpoint", Judged("diverges", "L2 diverges")) == ("bad", "L2 diverges")
    assert work._outcome("midpoint", Judged("VOID", "L2 VOID")) == (
        "bad", "L2 VOID: neither the good end's result (holds) nor the bad end's (diverges), so it counts as changed")
    bisect_state.save(tmp_path, state)
    assert bisect_state.path_of(tmp_path).read_text().startswith("{")
