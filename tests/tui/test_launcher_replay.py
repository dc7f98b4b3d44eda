"""The launcher replays a bundle: `r` on the picker asks for it and for the llama.cpp build to replay on, the
replay runs on the real engine and the comparison fills in request by request, then the summary matches
`kit replay`'s."""

from __future__ import annotations

import asyncio

import pytest

from kit.bundle.writer import write_bundle
from kit.launch.llamacpp import llamacpp_build
from kit.record.manifest import Manifest
from kit.run import runner
from kit.tui.app import KitApp
from kit.tui.screens.replay import ReplayScreen
from tests.tui.conftest import PROTOCOLS, ask_replay, static_text, until

pytestmark = pytest.mark.engine


async def _replayed(caps, tmp_path, bundle, build: str = ""):
    """The replay screen once `r` replayed `bundle` on `build` (empty: the paper's), its status and passes."""
    app = KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=tmp_path / "replays")
    async with app.run_test(size=(120, 40)) as pilot:
        await ask_replay(pilot, app, bundle, build)
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen))
        screen = app.screen
        await until(pilot, lambda: screen.done is not None or screen.error is not None)
        await pilot.pause()
        return screen, static_text(screen, "#status"), static_text(screen, "#passes")


def test_r_replays_a_bundle_and_the_comparison_fills_in(cpu_caps, tmp_path, shared_demo_bundle):
    bundle = shared_demo_bundle.path  # the session's demo bundle (tests/shared_runs.py): 2 items x 2 sessions

    screen, status, passes = asyncio.run(_replayed(cpu_caps, tmp_path, bundle))  # the paper's build, as made
    assert screen.error is None, screen.error
    (done,) = screen.done
    assert "16/16 requests byte-identical; every verdict identical" in status
    assert done.comparison.requests == (16, 16)
    (follower,) = screen.followers  # the live view compared every request as it came in
    assert {p: (s.replayed, s.identical) for p, s in follower.passes.items()} == {"s1": (8, 8), "s2": (8, 8)}
    assert "8/8" in passes and "none so far" in passes


@pytest.mark.cpu_backends  # a build made here has its own (portable) backend: it runs once
def test_a_bundle_made_on_a_build_made_here_replays_on_that_build(cpu_caps, tmp_path):
    """The build asked for is the one the replay runs on and its manifest records (`kit replay --engine-build`)."""
    if llamacpp_build.built(11434, "portable") is None:
        pytest.skip("llama.cpp build 11434 is not built here (kit engines build llamacpp --build 11434)")
    original = runner.run(runner.RunOptions(protocol="demo", out=tmp_path / "runs", engine_build=11434,
                                            overrides={"workload": {"items": 1}, "sessions": 2, "max_tokens": 8}),
                          say=lambda _: None)
    assert original.status == "finished", original.reason
    bundle = write_bundle([original.run_dir], tmp_path / "demo.tar.gz", environ={}).path

    screen, _status, _passes = asyncio.run(_replayed(cpu_caps, tmp_path, bundle, "11434"))
    assert screen.error is None, screen.error
    (done,) = screen.done
    replayed = Manifest.load(done.result.run_dir).run.engine.to_json()
    assert replayed["engine_build"]["build"] == 11434
    assert replayed["engine_build"]["binary_sha256"] == \
        Manifest.load(original.run_dir).run.engine.to_json()["engine_build"]["binary_sha256"]
    assert not [d for d in done.comparison.differences if "build" in d], done.comparison.differences
