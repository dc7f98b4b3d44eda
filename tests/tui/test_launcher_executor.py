"""The setup form's "where passes run" choice (docs/ray.md): offered for kinds whose units may run on Ray
(Kind.units), refused with its reason where Ray cannot run them, and handed to the run as the same RunOptions
`kit run --executor ray --ray-address ...` makes. No engine and no Ray cluster: the form only."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner
from textual.widgets import Button, Input, Select

from kit.core.paths import protocols_dir
from kit.protocols.kinds import KINDS
from kit.run import executors, runner
from kit.tui import form
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED, Capabilities, entry
from kit.tui.screens.setup import SetupScreen
from tests.tui.conftest import PROTOCOLS, static_text, type_text
from tests.tui.test_vllm_form import setup_for

EXECUTOR_FIELDS = ("executor", "ray_address", "cpus_per_task", "gpus_per_task")


def _fields(options) -> dict:
    return {name: getattr(options, name) for name in EXECUTOR_FIELDS}


def test_the_form_offers_where_passes_run_exactly_for_the_kinds_ray_runs():
    offered = sorted(kind for kind in KINDS if form.offers_executors(kind))
    assert offered == sorted(executors.ray_kinds()) and {"reset", "sweep", "grid", "flag_order"} <= set(offered)
    assert not form.offers_executors("ladder")


def test_the_launcher_hands_ray_to_the_run_as_the_cli_does(tmp_path, monkeypatch):
    setup = setup_for("reset", tmp_path, executor="ray", ray_address=" ray://head:10001 ")
    assert form.problems(setup, Capabilities((EMBEDDED,)), set()) == {}
    from_form = form.run_options(setup)

    seen = []

    def run(options, **_kw):
        seen.append(options)
        raise SystemExit(0)

    monkeypatch.setattr(runner, "run", run)
    from kit.cli import cli

    result = CliRunner().invoke(cli, ["run", setup.protocol, "--out", str(tmp_path), "--executor", "ray",
                                      "--ray-address", "ray://head:10001"])
    assert result.exit_code == 0 and len(seen) == 1, result.output
    assert _fields(from_form) == _fields(seen[0]) == {"executor": "ray", "ray_address": "ray://head:10001",
                                                       "cpus_per_task": 1.0, "gpus_per_task": 0.0}
    setup.ray_address = ""  # empty: a local Ray instance, as without --ray-address
    assert form.run_options(setup).ray_address is None
    setup.executor = "local"
    assert _fields(form.run_options(setup)) == _fields(runner.RunOptions(protocol=setup.protocol))


@pytest.mark.parametrize("text, ok", [("", True), ("auto", True), ("ray://10.0.0.3:10001", True),
                                      ("head-node:6379", True), ("head", False), ("http://head:8265", False),
                                      ("ray://head", False)])
def test_a_ray_address_is_checked_with_a_reason(text, ok, tmp_path):
    setup = setup_for("reset", tmp_path, executor="ray", ray_address=text)
    found = form.problems(setup, Capabilities((EMBEDDED,)), set())
    assert ("ray_address" not in found) is ok, found
    if not ok:
        assert "is not a Ray address" in found["ray_address"] and "ray://HOST:PORT" in found["ray_address"]


def test_ray_is_refused_with_its_reason_for_what_it_cannot_run(tmp_path, monkeypatch):
    caps = Capabilities((EMBEDDED,))
    ladder = setup_for("ladder-cpu", tmp_path, executor="ray")
    assert "whose passes run in this process only" in form.problems(ladder, caps, set())["executor"]
    endpoint = setup_for("reset", tmp_path, executor="ray", engine="endpoint", url="http://127.0.0.1:8080")
    assert "not my own endpoint" in form.problems(endpoint, caps, set())["executor"]
    monkeypatch.setattr(executors, "ray_installed", lambda: False)
    reset = setup_for("reset", tmp_path, executor="ray")
    assert form.problems(reset, caps, set())["executor"].endswith(executors.INSTALL)
    reset.executor = "local"  # this process needs no Ray
    assert "executor" not in form.problems(reset, caps, set())


def _app(caps, tmp_path) -> KitApp:
    return KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)


def test_the_setup_screen_starts_a_ray_run_and_hides_the_choice_where_it_does_not_apply(cpu_caps, tmp_path,
                                                                                          monkeypatch):
    started = []

    async def drive():
        app = _app(cpu_caps, tmp_path)
        monkeypatch.setattr(app, "start_run", started.append)
        async with app.run_test(size=(100, 40)) as pilot:
            app.open_setup(entry(protocols_dir() / "ladder-cpu.yaml", KINDS, cpu_caps))
            await pilot.pause()
            assert not app.screen.query_one("#w-executor").display  # a ladder runs its passes in this process
            app.pop_screen()
            app.open_setup(entry(PROTOCOLS / "reset.yaml", KINDS, cpu_caps))
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SetupScreen) and screen.query_one("#w-executor").display
            assert not screen.query_one("#w-ray_address").display  # shown once Ray is chosen
            screen.query_one("#f-executor", Select).value = "ray"
            await pilot.pause()
            assert screen.query_one("#w-ray_address").display
            screen.query_one("#f-ray_address", Input).focus()
            await type_text(pilot, "nohost")
            await pilot.pause()
            assert "is not a Ray address" in static_text(screen, "#p-ray_address")
            assert screen.query_one("#start", Button).disabled
            await pilot.press("ctrl+u")
            await type_text(pilot, "auto")
            await pilot.pause()
            assert not screen.query_one("#start", Button).disabled
            await pilot.press("ctrl+r")
            await pilot.pause()

    asyncio.run(drive())
    assert len(started) == 1
    assert _fields(started[0]) == {"executor": "ray", "ray_address": "auto", "cpus_per_task": 1.0,
                                   "gpus_per_task": 0.0}
