"""The launcher on the real embedded engine (llama.cpp 7e4c0a9, SmolLM2-135M Q4_1), driven with Pilot:
it proves the engine before anything is ready; pick reset, accept the defaults of a tiny reset protocol
(2 items, 2 sessions, 8 tokens), run, and read the results screen; and a stop mid-run that leaves a
readable, interrupted run folder."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict

import pytest

from kit.launch.llamacpp import embedded_proof
from kit.app.doctor import DOCKER_WAY
from kit.record.files import read_records
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED
from kit.tui.screens.live import LiveScreen
from kit.tui.screens.results import ResultsScreen
from tests.tui.conftest import PROTOCOLS, static_text, until

pytestmark = pytest.mark.engine


def _counts_from_records(run_dir) -> dict[str, list[int]]:
    """Per session: items, recompute reproduces, hit reproduces, paths differ, cache-caused, from the raw records."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    counts = {}
    for pass_id, info in manifest["passes"].items():
        by_item = defaultdict(lambda: {"cold": [], "warm": []})
        for record in read_records(run_dir / info["file"]).records:
            by_item[record["unit"]][record["expect"]].append(record["completion"]["token_ids"])
        counts[pass_id] = [len(by_item), sum(v["cold"][0] == v["cold"][1] for v in by_item.values()),
                           sum(v["warm"][0] == v["warm"][1] for v in by_item.values()),
                           sum(v["cold"][0] != v["warm"][0] for v in by_item.values()),
                           sum(v["cold"][0] == v["cold"][1] and v["warm"][0] == v["warm"][1]
                               and v["cold"][0] != v["warm"][0] for v in by_item.values())]
    return counts


def test_the_launcher_proves_the_embedded_engine_before_it_says_ready(fresh_kit_cache, tmp_path):
    async def drive():
        app = KitApp(protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)  # no caps: it looks itself
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            checking = static_text(app.screen, "#protocols")
            await until(pilot, lambda: app.caps.checked, timeout=180, settle=0.3)
            return checking, app.caps, [(e.name, e.ready) for e in app.screen.entries]

    checking, caps, entries = asyncio.run(drive())
    assert "checking this machine" in checking and "ready" not in checking  # nothing is ready before the proof
    assert EMBEDDED in caps.ways and EMBEDDED not in caps.why_not
    assert caps.why_not[DOCKER_WAY].startswith("docker daemon: not reachable")  # what is missing, in the doctor's words
    assert entries == [("grid-cpu", True), ("reset", True), ("batch", False)]
    kept = [path for path in embedded_proof.folder(fresh_kit_cache).glob("embedded-proof-*.json")]
    assert len(kept) == 1 and json.loads(kept[0].read_text())["ok"] is True  # kept for the next launch


def _open_reset(pilot):
    return pilot.press("down", "enter")  # the picker lists grid-cpu, reset, batch


def test_pick_reset_accept_defaults_run_and_the_results_screen_matches_the_records(cpu_caps, tmp_path,
                                                                                   embedded_binary):
    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=tmp_path)
        async with app.run_test(size=(100, 40)) as pilot:
            await _open_reset(pilot)
            await pilot.pause()
            await pilot.press("ctrl+r")  # the defaults as they are
            await until(pilot, lambda: isinstance(app.screen, LiveScreen), settle=0.3)
            live = app.screen
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen), settle=0.3)
            return (app.screen.result, live, static_text(app.screen, "#table"), static_text(app.screen, "#status"),
                    app.screen.paths_text().plain)

    result, live, table_text, status_text, paths_text = asyncio.run(drive())
    assert result.status == "finished" and "run finished" in status_text
    assert live.sub_title == "reset finished"  # not "running reset" once it has ended
    bundle = result.run_dir.parent / "bundles" / f"{result.run_dir.name}.tar.gz"  # as after `kit run`
    assert bundle.is_file() and f"bundle: {bundle}" in paths_text and "kit verify " in paths_text
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["protocol"]["overrides"] == {}  # the file's own numbers, as `kit run` records them
    counts = _counts_from_records(result.run_dir)
    assert set(counts) == {"s1", "s2"}
    for session, numbers in counts.items():
        line = next(line for line in table_text.splitlines() if re.match(rf"\W*{session}\W", line))
        assert [int(n) for n in re.findall(r"\b\d+\b", line.split("OK", 1)[1])] == numbers
        assert numbers[0] == 2
    # the live screen saw every request and one verdict per item and session
    assert live.state.done == 16 and len(live.state.requests) == 16
    assert len(live.state.verdicts) == 4
    assert {g.status for g in live.state.gates.values()} == {"OK"}


def test_stop_mid_run_leaves_a_readable_interrupted_run(cpu_caps, tmp_path, embedded_binary):
    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await _open_reset(pilot)
            await pilot.pause()
            await pilot.press("ctrl+r")
            await until(pilot, lambda: isinstance(app.screen, LiveScreen), settle=0.3)
            live = app.screen
            await until(pilot, lambda: live.state.done >= 2, settle=0.3)
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen), settle=0.3)
            return app.screen.result, live, static_text(app.screen, "#status")

    result, live, status_text = asyncio.run(drive())
    assert result.status == "interrupted" and "run interrupted" in status_text
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert all(info["status"] != "running" for info in manifest["passes"].values())
    records = [read_records(result.run_dir / info["file"]) for info in manifest["passes"].values()]
    assert not any(r.torn_tail for r in records)
    # every request the screen saw is a complete record, and the run stopped well short of its 16
    assert sum(len(r.records) for r in records) == live.state.done < 16
