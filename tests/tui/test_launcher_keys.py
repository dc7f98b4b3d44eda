"""What the launcher's keys say is what they did (issue #22.7): `d` shows the doctor's checks (not the line
already on screen), `o` opens the folder only where there is a display and reaps its opener, `c` says where
the path went, the live view's title says the run ended, and a run's bundle is found where runs write it."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from kit.app import doctor
from kit.app.doctor import CommandResult
from kit.run.runner import RunResult
from kit.tui.app import KitApp
from kit.tui.catalog import capabilities
from kit.tui.screens import results
from kit.tui.screens.machine import MachineScreen
from kit.tui.screens.picker import PickerScreen
from kit.tui.screens.results import ResultsScreen
from tests.test_doctor import NVCC_13, FakeEngine, make_probes
from tests.tui.conftest import PROTOCOLS, static_text, until
from tests.tui.scripted import RESET_TABLE, scripted_run_started


def _notes(app) -> list[str]:
    return [n.message for n in app._notifications]


def _results_app(tmp_path, run_dir: Path) -> KitApp:
    app = KitApp(caps=capabilities(doctor.run_checks(make_probes(tmp_path, engine=FakeEngine()))),
                 protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)
    app.shown = RunResult(run_dir, "finished", None, {**RESET_TABLE, "run_id": run_dir.name})
    return app


def test_d_shows_every_check_of_kit_doctor_not_the_line_above_the_list(tmp_path):
    checks = doctor.run_checks(make_probes(tmp_path, engine=FakeEngine(), commands={"nvcc": CommandResult(0, NVCC_13)}))
    caps = capabilities(checks)

    async def drive():
        app = KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("d")
            await pilot.pause()
            shown = app.screen
            text = static_text(shown, "#report") if isinstance(shown, MachineScreen) else ""
            await pilot.press("escape")
            await pilot.pause()
            return shown, text, app.screen

    shown, text, after = asyncio.run(drive())
    assert isinstance(shown, MachineScreen) and isinstance(after, PickerScreen)
    flat = " ".join(text.split())
    for check in checks:  # every check, in the doctor's own words
        assert " ".join(check.line().split())[:60] in flat
    assert "can run: embedded CPU engine" in flat and "MISSING docker daemon" in flat


def test_o_without_a_display_shows_the_folder_and_starts_nothing(tmp_path, monkeypatch):
    run_dir = tmp_path / "reset-1"
    (run_dir / "results").mkdir(parents=True)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(results.sys, "platform", "linux")
    started = []
    monkeypatch.setattr(results.subprocess, "Popen", lambda *a, **k: started.append(a))

    async def drive():
        app = _results_app(tmp_path, run_dir)
        async with app.run_test(size=(100, 30)) as pilot:
            app.show_results(app.shown)
            await pilot.pause()
            await pilot.press("o")
            await pilot.pause()
            return _notes(app)

    notes = asyncio.run(drive())
    assert started == [] and not any("opened" in n for n in notes)
    assert f"no display to open it on here; the results folder is {run_dir / 'results'}" in notes


def _fake_opener(tmp_path: Path, code: int) -> Path:
    opener = tmp_path / "bin" / "xdg-open"
    opener.parent.mkdir(exist_ok=True)
    opener.write_text(f"#!/bin/sh\necho \"$1\" > {tmp_path}/opened\nexit {code}\n")
    opener.chmod(opener.stat().st_mode | stat.S_IXUSR)
    return opener


def _children(pid: int) -> list[str]:
    """The states of this process's children (Z: defunct)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(fields[0])
    return found


def test_o_with_a_display_runs_the_opener_says_what_it_did_and_leaves_no_defunct_child(tmp_path, monkeypatch):
    run_dir = tmp_path / "reset-1"
    (run_dir / "results").mkdir(parents=True)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(results.sys, "platform", "linux")

    async def press_o(code: int):
        opener = _fake_opener(tmp_path, code)
        monkeypatch.setenv("PATH", f"{opener.parent}{os.pathsep}{os.environ['PATH']}")
        app = _results_app(tmp_path, run_dir)
        async with app.run_test(size=(100, 30)) as pilot:
            app.show_results(app.shown)
            await pilot.pause()
            await pilot.press("o")
            for _ in range(100):
                if any("open" in n for n in _notes(app)):
                    break
                await pilot.pause(0.05)
            await app.workers.wait_for_complete()
            return _notes(app), _children(os.getpid())

    notes, children = asyncio.run(press_o(0))
    assert (tmp_path / "opened").read_text().strip() == str(run_dir / "results")
    assert f"asked the desktop to open {run_dir / 'results'}" in notes and "Z" not in children
    notes, children = asyncio.run(press_o(3))
    assert f"xdg-open could not open it (exit 3); the folder is {run_dir / 'results'}" in notes
    assert "Z" not in children


def test_c_says_where_the_path_went(tmp_path):
    run_dir = tmp_path / "reset-1"
    run_dir.mkdir()

    async def drive():
        app = _results_app(tmp_path, run_dir)
        async with app.run_test(size=(100, 30)) as pilot:
            app.show_results(app.shown)
            await pilot.pause()
            await pilot.press("c")
            await pilot.pause()
            return _notes(app), app.clipboard

    notes, clipboard = asyncio.run(drive())
    assert clipboard == str(run_dir)  # what Textual sent to the terminal (OSC 52)
    assert notes == [f"sent to the terminal's clipboard (if it accepts OSC 52): {run_dir}"]
    assert not any(n.startswith("copied") for n in notes)


def test_the_results_screen_finds_the_bundle_where_runs_write_it(tmp_path):
    run_dir = tmp_path / "reset-1"
    run_dir.mkdir()

    def paths() -> str:
        async def drive():
            app = _results_app(tmp_path, run_dir)
            async with app.run_test(size=(100, 30)) as pilot:
                app.show_results(app.shown)
                await pilot.pause()
                return app.screen.paths_text().plain
        return asyncio.run(drive())

    assert "bundle: none written (make one with `kit bundle " in paths()
    bundle = tmp_path / "bundles" / "reset-1.tar.gz"
    bundle.parent.mkdir()
    bundle.write_bytes(b"")
    text = paths()
    assert f"bundle: {bundle}" in text and "check it with `kit verify " in text


def test_the_live_view_says_the_run_ended(cpu_caps):
    async def drive():
        async with scripted_run_started(cpu_caps, size=(80, 24)) as (app, pilot):
            live = app.live
            running = live.sub_title
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen))
            return running, live.sub_title

    running, ended = asyncio.run(drive())
    assert running == "running reset" and ended == "reset interrupted"
