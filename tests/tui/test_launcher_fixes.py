"""The setup form's fix picker and llama.cpp build field (issues #38, #39): the registry's fixes and the builds
made here offered, each refused inline with the line `kit run --fix` / `--engine-build` gives, and handed to
the run as the same RunOptions, so the manifest records the same fixes and build. No engine: the form only
(the runner is replaced where a run would start)."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner
from textual.widgets import Button, Input, SelectionList

from kit.cli import cli
from kit.core.errors import KitError
from kit.core.paths import protocols_dir
from kit.launch.llamacpp import fixes
from kit.protocols.kinds import KINDS
from kit.run import runner
from kit.tui import form
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED, Capabilities, entry
from kit.tui.screens.setup import SetupScreen
from tests.launch.test_llamacpp_build import _built
from tests.tui.conftest import PROTOCOLS, static_text, type_text
from tests.tui.test_vllm_form import setup_for

CAPS = Capabilities((EMBEDDED,))
URL = "http://127.0.0.1:9"  # refused before anything is contacted


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _cli_options(monkeypatch, *args: str) -> runner.RunOptions:
    """The RunOptions `kit run ARGS` hands the runner."""
    seen: list[runner.RunOptions] = []

    def run(options, **_kw):
        seen.append(options)
        raise SystemExit(0)

    monkeypatch.setattr(runner, "run", run)
    result = CliRunner().invoke(cli, ["run", *args])
    assert result.exit_code == 0 and len(seen) == 1, result.output
    return seen[0]


def _cli_error(*args: str) -> str:
    """The line `kit run ARGS` refuses with (`kit: error: LINE`; the real runner: it refuses before anything is
    written)."""
    result = CliRunner().invoke(cli, ["run", *args])
    assert isinstance(result.exception, KitError), result.output
    return result.exception.line()


def test_the_picker_offers_every_named_fix_of_the_registry_and_its_families():
    assert form.fix_choices() == [(fix.name, fix.closes) for fix in fixes.NAMED.values()]
    assert len(form.fix_choices()) >= 4 and all(closes for _, closes in form.fix_choices())
    assert all(text in form.fix_families() for text in fixes.FAMILIES.values())


def test_the_fixes_reach_the_run_and_its_manifest_as_kit_run_fix_gives_them(tmp_path, monkeypatch):
    setup = setup_for("reset", tmp_path, fixes=("f16",), more_fixes=" chunk-16  threads-2 ")
    assert form.problems(setup, CAPS, set()) == {}
    from_form = form.run_options(setup)
    from_cli = _cli_options(monkeypatch, setup.protocol, "--out", str(tmp_path), "--fix", "f16", "--fix", "chunk-16",
                            "--fix", "threads-2")
    assert from_form.fixes == ("f16", "chunk-16", "threads-2")
    # the manifest's options record (kit.run.runner.options_json), whole: the same fixes, nothing else differs
    assert runner.options_json(from_form) == runner.options_json(from_cli)
    assert from_form.applied.to_json() == from_cli.applied.to_json()  # what the engine record's fixes come from
    setup.fixes, setup.more_fixes = (), ""
    assert form.run_options(setup).fixes == () and runner.options_json(form.run_options(setup))["fixes"] == ()


def test_server_flags_reach_the_run_as_kit_run_server_arg_gives_them(tmp_path, monkeypatch):
    setup = setup_for("reset", tmp_path, more_fixes="chunk-16", server_args="--swa-full  -fa=on")
    assert form.problems(setup, CAPS, set()) == {}
    from_form = form.run_options(setup)
    from_cli = _cli_options(monkeypatch, setup.protocol, "--out", str(tmp_path), "--fix", "chunk-16",
                            "--server-arg=--swa-full", "--server-arg=-fa=on")
    assert from_form.server_args == ("--swa-full", "-fa=on")
    assert runner.options_json(from_form) == runner.options_json(from_cli)
    assert from_form.applied.to_json() == from_cli.applied.to_json()


@pytest.mark.parametrize("values, cli_args", [
    ({"engine": "endpoint", "url": URL, "fixes": ("f16",)}, ("--engine-url", URL, "--fix", "f16")),
    ({"engine": "native", "fixes": ("cpu-backend-portable",)}, ("--server-bin", "BIN", "--fix", "cpu-backend-portable")),
    ({"fixes": ("reuse-off",)}, ("--fix", "reuse-off")),
    ({"more_fixes": "chunk-x"}, ("--fix", "chunk-x")),
    ({"fixes": ("f16",), "more_fixes": "chunk-16 chunk-32"}, ("--fix", "f16", "--fix", "chunk-16", "--fix", "chunk-32")),
    ({"server_args": "--port=8081"}, ("--server-arg=--port=8081",)),
    ({"more_fixes": "chunk-16", "server_args": "-ub=32"}, ("--fix", "chunk-16", "--server-arg=-ub=32")),
    ({"engine": "llamacpp-cpu-container", "server_args": "--swa-full"}, ("--launcher", "docker", "--image",
                                                                         "kit/llamacpp:7e4c0a9-cpu", "--gpus", "none",
                                                                         "--server-arg=--swa-full")),
])
def test_a_fix_the_engine_cannot_take_is_refused_inline_with_the_cli_s_line(values, cli_args, tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    setup = setup_for("reset", tmp_path, **{**values, **({"server_bin": str(binary)} if "engine" in values and
                                                           values["engine"] == "native" else {})})
    found = form.problems(setup, CAPS, set())
    assert "fixes" in found, found
    args = [str(binary) if arg == "BIN" else arg for arg in cli_args]
    assert found["fixes"] == _cli_error(setup.protocol, "--out", str(tmp_path / "out"), *args)
    assert not (tmp_path / "out").exists()


def test_a_remedy_protocol_names_its_fixes_per_arm_and_the_picker_says_so(tmp_path):
    setup = setup_for("remedy-cpu", tmp_path)
    assert "fixes" not in form.problems(setup, CAPS, set())  # its arms' fixes apply with the embedded engine
    setup.fixes = ("f16",)
    line = form.problems(setup, CAPS, set())["fixes"]
    assert "apply their fixes per arm" in line
    assert line == _cli_error(setup.protocol, "--out", str(tmp_path / "out"), "--fix", "f16")


def test_an_engine_build_not_built_here_is_refused_naming_the_build_command(cache, tmp_path, monkeypatch):
    setup = setup_for("reset", tmp_path, engine_build="11434")
    line = form.problems(setup, CAPS, set())["engine_build"]
    assert "not built here" in line and "kit engines build llamacpp --build 11434" in line
    assert form.builds_here(setup) == []
    assert not (cache / "engines" / "llama-server-b11434-portable").exists()  # nothing built or fetched
    _built(cache, 11434)
    assert form.builds_here(setup) == [11434]
    assert form.problems(setup, CAPS, set()) == {}
    from_form = form.run_options(setup)
    from_cli = _cli_options(monkeypatch, setup.protocol, "--out", str(tmp_path), "--engine-build", "11434")
    assert from_form.engine_build == 11434
    assert runner.options_json(from_form) == runner.options_json(from_cli)
    setup.engine_build = ""  # the paper's build: the embedded engine, as without --engine-build
    assert form.run_options(setup).engine_build is None


@pytest.mark.parametrize("values, says", [
    ({"engine_build": "b11434"}, "is not a llama.cpp build number"),
    ({"engine_build": "0"}, "is not a build number"),
    ({"engine_build": "11434", "cpu_backend": "wheel"}, "a build from source has the portable or cuda backend only"),
])
def test_an_engine_build_field_that_cannot_run_says_why(values, says, cache, tmp_path):
    _built(cache, 11434)
    setup = setup_for("reset", tmp_path, **values)
    assert says in form.problems(setup, CAPS, set())["engine_build"]


def test_the_engine_build_field_is_for_the_embedded_engine_only(cache, tmp_path):
    setup = setup_for("reset", tmp_path, engine="endpoint", url=URL, engine_build="not read")
    assert "engine_build" not in form.problems(setup, CAPS, set())
    assert form.run_options(setup).engine_build is None


def _shown(screen, selector: str) -> str:
    """A problem line as drawn, its wrapped lines joined."""
    return " ".join(static_text(screen, selector).split())


def _app(tmp_path) -> KitApp:
    return KitApp(caps=CAPS, protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)


def test_the_setup_screen_picks_fixes_and_a_build_and_starts_the_run_with_them(cache, tmp_path, monkeypatch):
    _built(cache, 11434)
    started: list[runner.RunOptions] = []

    async def drive():
        app = _app(tmp_path)
        monkeypatch.setattr(app, "start_run", started.append)
        async with app.run_test(size=(110, 50)) as pilot:
            app.open_setup(entry(PROTOCOLS / "reset.yaml", KINDS, CAPS))
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SetupScreen)
            picker = screen.query_one("#f-fixes", SelectionList)
            assert [picker.get_option_at_index(i).value for i in range(picker.option_count)] == list(fixes.NAMED)
            assert "built here: 11434" in screen.query_one("#f-engine_build", Input).placeholder
            picker.focus()
            await pilot.pause()
            names = list(fixes.NAMED)
            await pilot.press(*["down"] * names.index("f16"), "space")
            await pilot.pause()
            assert screen.setup.fixes == ("f16",)
            screen.query_one("#f-more_fixes", Input).focus()
            await type_text(pilot, "chunk-16 chunk-16")
            await pilot.pause()
            assert "both set --ubatch-size" in _shown(screen, "#p-fixes")
            assert screen.query_one("#start", Button).disabled
            await pilot.press(*["backspace"] * len(" chunk-16"))
            screen.query_one("#f-engine_build", Input).focus()
            await type_text(pilot, "11435")
            await pilot.pause()
            assert "kit engines build llamacpp --build 11435" in _shown(screen, "#p-engine_build")
            await pilot.press("backspace", "4")
            await pilot.pause()
            assert _shown(screen, "#p-fixes") == _shown(screen, "#p-engine_build") == ""
            await pilot.press("ctrl+r")
            await pilot.pause()

    asyncio.run(drive())
    assert len(started) == 1
    assert started[0].fixes == ("f16", "chunk-16") and started[0].engine_build == 11434


def test_the_picker_shows_the_refusal_where_the_engine_cannot_take_a_fix(tmp_path):
    async def drive():
        app = _app(tmp_path)
        async with app.run_test(size=(110, 50)) as pilot:
            app.open_setup(entry(protocols_dir() / "reset.yaml", KINDS, CAPS))
            await pilot.pause()
            screen = app.screen
            screen.query_one("#f-engine").value = "endpoint"
            screen.query_one("#f-url", Input).value = URL
            await pilot.pause()
            assert screen.query_one("#w-fixes").display and not screen.query_one("#w-engine_build").display
            screen.query_one("#f-fixes", SelectionList).select("f16")
            await pilot.pause()
            assert "does not start a server it reaches by --engine-url" in _shown(screen, "#p-fixes")
            assert screen.query_one("#start", Button).disabled
            screen.query_one("#f-engine").value = "vllm-native"  # no llama-server flags: picked fixes refused
            await pilot.pause()
            assert screen.query_one("#w-fixes").display and "has none of them" in _shown(screen, "#p-fixes")
            screen.query_one("#f-fixes", SelectionList).deselect_all()
            await pilot.pause()
            assert not screen.query_one("#w-fixes").display  # nothing to pick for vLLM

    asyncio.run(drive())


def test_the_results_screen_shows_a_remedy_run_s_table_and_cost_per_prompt_length(cpu_caps, tmp_path):
    """A remedy run's table on the results screen (its kind's render, kit.protocols.remedy.view): each arm's
    fixes, divergence with intervals, closed or not, the cheapest fix that closes each table, the cost per bin."""
    from kit.run.execution import RunResult  # noqa: PLC0415
    from tests.protocols.test_remedy_results import write_remedy_run  # noqa: PLC0415

    run_dir = write_remedy_run(tmp_path / "remedy-run")
    table = KINDS["remedy"].results(run_dir)

    async def drive():
        app = _app(tmp_path)
        async with app.run_test(size=(160, 80)) as pilot:
            app.show_results(RunResult(run_dir, "finished", None, table))
            await pilot.pause()
            return _shown(app.screen, "#table")

    text = asyncio.run(drive())
    for shown in ("Divergence per arm", "│ fix-a │ chunk-16 │", "│ fix-b │ --swa-full │", "(unfixed)",
                  "[20.7, 100.0]) not closed │",
                  "Cost per prompt-length bin", "1k-4k", "×2.00", "Table IV: cheapest fix that closes it: fix-a"):
        assert shown in text, shown


def test_the_builds_offered_are_the_finished_ones_of_the_chosen_backend(cache):
    from kit.launch.llamacpp import llamacpp_build  # noqa: PLC0415

    _built(cache, 11434)
    _built(cache, 10435)
    broken = llamacpp_build.install_dir(9093, "portable")
    broken.mkdir(parents=True)
    (broken / llamacpp_build.BUILD_RECORD).write_text("{not json")  # unreadable: names no build
    moved = llamacpp_build.install_dir(9094, "portable")
    moved.mkdir(parents=True)
    (moved / llamacpp_build.BUILD_RECORD).write_text('{"build": 9095, "cpu_backend": "portable"}')  # not its folder
    assert llamacpp_build.builds_here("portable") == [10435, 11434]
    assert llamacpp_build.builds_here("other") == []
    assert form.builds_here(setup_for("reset", cache, cpu_backend="wheel")) == []  # a source build has no wheel
