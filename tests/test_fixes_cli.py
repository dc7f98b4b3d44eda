"""`--fix` and `--server-arg` on the command line: refused in one line with nothing written where they are
unknown, ill-shaped, or cannot be applied; a resume applies the recorded ones and refuses others; remedy
protocol files are validated the same way (kit.launch.llamacpp.fixes, kit.protocols.remedy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.protocols import kinds
from kit.core.errors import KitError
from tests.bundle.kit_cli import run_here
from tests.stopped_run import stopped_run
from tests.test_cli_errors import one_line_error


@pytest.mark.parametrize("args, needles", [
    (["--fix", "nope"], ["--fix 'nope' is not a fix the kit knows", "reuse-off"]),
    (["--server-arg=--port=1"], ["--port is not a flag the kit lets a run add"]),
    (["--server-arg=-m=/etc/passwd"], ["-m is not a flag"]),
    (["--server-arg=-t=8"], ["the kit sets -t itself", "--fix threads-N"]),
    (["--fix", "chunk-16", "--engine-url", "http://127.0.0.1:9"], ["--fix chunk-16", "--engine-url"]),
    (["--server-arg=-ub=8", "--launcher", "docker"], ["docker launcher"]),
    (["--fix", "cpu-backend-portable", "--server-bin", "/bin/true"], ["server-bin launcher"]),
    # an engine build is not the embedded engine: its CPU backend cannot be swapped for the wheel's binary
    (["--fix", "cpu-backend-wheel", "--engine-build", "11434"], ["cpu-backend-wheel", "engine-build launcher"]),
    (["--fix", "cpu-backend-portable", "--engine-build", "11434"], ["cpu-backend-portable", "engine-build launcher"]),
    (["--fix", "chunk-16", "--fix", "chunk-32"], ["both set --ubatch-size"]),
    (["--fix", "reuse-off"], ["--fix reuse-off leaves no cache hit", "an arm of a remedy protocol"]),
])
def test_run_refuses_before_anything_is_written(tmp_path, args, needles):
    out = tmp_path / "out"
    one_line_error(run_here("run", "demo", "--out", str(out), *args), *needles)
    assert not out.exists()


def test_a_remedy_protocol_takes_its_fixes_from_its_arms_only(tmp_path):
    out = tmp_path / "out"
    one_line_error(run_here("run", "remedy-cpu", "--out", str(out), "--fix", "chunk-16"),
                   "remedy protocols apply their fixes per arm")
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--launcher", "docker"], "--fix chunk-16 cannot be applied with the docker launcher"),
    (["--engine-url", "http://127.0.0.1:9"], "the kit does not start a server it reaches by --engine-url"),
])
def test_a_remedy_whose_arms_cannot_be_applied_is_refused_before_its_folder(tmp_path, args, needle):
    out = tmp_path / "out"
    one_line_error(run_here("run", "remedy-cpu", "--out", str(out), *args), needle)
    assert not out.exists()


def test_a_remedy_arm_swapping_the_cpu_backend_is_refused_on_an_engine_build(tmp_path):
    """An engine build is not the embedded engine: an arm that swaps in the embedded engine's backend would run
    the wheel's binary while the manifest names the build; refused before the run folder exists."""
    text = (Path(__file__).parent.parent / "protocols" / "remedy-cpu.yaml").read_text()
    protocol = tmp_path / "remedy-wheel.yaml"
    protocol.write_text(text.replace("{name: reuse-off, fixes: [reuse-off]}",
                                     "{name: wheel, fixes: [cpu-backend-wheel]}"))
    out = tmp_path / "out"
    one_line_error(run_here("run", str(protocol), "--out", str(out), "--engine-build", "11434"),
                   "--fix cpu-backend-wheel cannot be applied with the engine-build launcher")
    assert not out.exists()


def test_check_of_a_server_at_a_url_refuses_fixes(tmp_path):
    out = tmp_path / "out"
    one_line_error(run_here("check", "http://127.0.0.1:9", "--kind", "llamacpp", "--out", str(out), "--fix",
                            "chunk-16"), "--fix and --server-arg set the servers the kit starts")
    assert not out.exists()


def _manifest(run_dir: Path) -> bytes:
    return (run_dir / "manifest.json").read_bytes()


@pytest.mark.parametrize("recorded, given, needle", [
    ({"fixes": ["chunk-16"]}, ["--fix", "chunk-32"], "ran with --fix chunk-16"),
    ({}, ["--fix", "chunk-16"], "ran with no fix and no server flag"),
    ({"fixes": ["chunk-16"], "server_args": ["--swa-full"]}, ["--fix", "chunk-16"], "--server-arg=--swa-full"),
])
def test_resume_refuses_other_fixes_than_the_recorded_ones(tmp_path, recorded, given, needle):
    run_dir = stopped_run(tmp_path, options=recorded)
    before = _manifest(run_dir)
    one_line_error(run_here("resume", str(run_dir), *given), needle, "resume without --fix")
    assert _manifest(run_dir) == before


@pytest.mark.parametrize("recorded, needle", [
    ({"fixes": "chunk-16"}, "options.fixes is str"),
    ({"fixes": [16]}, "options.fixes is list"),
    ({"server_args": ["--port=1"]}, "a recorded option does not hold here"),
])
def test_resume_refuses_recorded_fixes_laid_out_otherwise(tmp_path, recorded, needle):
    run_dir = stopped_run(tmp_path, options=recorded)
    before = _manifest(run_dir)
    one_line_error(run_here("resume", str(run_dir)), needle)
    assert _manifest(run_dir) == before


REMEDY = {"protocol": "remedy", "arms": [{"name": "unfixed"}, {"name": "c16", "fixes": ["chunk-16"]}]}


@pytest.mark.parametrize("change, needle", [
    ({"arms": [{"name": "c16", "fixes": ["chunk-16"]}, {"name": "unfixed"}]}, "the first arm (c16) is the unfixed"),
    ({"arms": [{"name": "unfixed"}, {"name": "x", "fixes": ["nope"]}]}, "arm x: --fix 'nope' is not a fix"),
    ({"arms": [{"name": "unfixed"}, {"name": "x", "server_args": ["--host=0.0.0.0"]}]}, "--host is not a flag"),
    ({"arms": [{"name": "unfixed"}, {"name": "unfixed", "fixes": ["chunk-16"]}]}, "arm names must differ"),
    ({"arms": [{"name": "unfixed"}, {"name": "plain"}]}, "only the first arm may be unfixed"),
    ({"arms": [{"name": "unfixed"}, {"name": "../x", "fixes": ["f16"]}]}, "is not 1-40 lowercase"),
    ({"gsm8k": None}, "give at least one workload"),
    ({"arms": [{"name": "unfixed"}]}, "at least 2"),
])
def test_remedy_files_are_validated(tmp_path, change, needle):
    path = tmp_path / "bad-remedy.yaml"
    path.write_text(json.dumps({**REMEDY, **change}))
    with pytest.raises(KitError) as raised:
        kinds.load(str(path))
    assert needle in raised.value.line()


def test_the_shipped_remedy_files_load_as_the_remedy_kind():
    for name in ("remedy-cpu", "remedy"):
        protocol, _, _ = kinds.load(name)
        assert kinds.of(protocol).name == "remedy" and protocol.arms[0].applied().empty
        assert all(not arm.applied().empty for arm in protocol.arms[1:])


def test_resume_takes_the_recorded_fixes_as_the_runs_options(tmp_path):
    from kit.run.resume import _resumed_fixes  # noqa: PLC0415

    saved = {"fixes": ["chunk-16"], "server_args": ["--swa-full"]}
    _resumed_fixes(tmp_path, saved, fixes=(), server_args=())  # none given: the recorded ones
    assert saved == {"fixes": ("chunk-16",), "server_args": ("--swa-full",)}
    _resumed_fixes(tmp_path, saved, fixes=("chunk-16",), server_args=("--swa-full",))  # the same ones again
    with pytest.raises(KitError, match="ran with --fix chunk-16 --server-arg=--swa-full"):
        _resumed_fixes(tmp_path, saved, fixes=("chunk-16",), server_args=())
