"""`kit bisect` with real runs of the embedded llama-server: only the build lookup is substituted (every "build"
is found cached and runs on the embedded engine, the paper's build, instead of llama-server of build N built
from its sdist: those builds take 20+ minutes each and CI has none). The run is the real runner's, verified
and judged as in a real bisect; the embedded engine run twice gives byte-identical outputs, so the ends agree
and the bisect stops with "nothing changed", its atlas kept, and run again it runs nothing."""

from __future__ import annotations

import pytest

from kit.atlas import bisect_run, bisect_state
from kit.atlas.bisect_steps import Builds, Built
from kit.core.paths import protocols_dir

pytestmark = pytest.mark.engine


def test_a_bisect_of_real_runs_whose_ends_agree(tmp_path, engine_cpu_backend):
    protocol = tmp_path / "demo-tiny.yaml"  # the demo, smaller: 2 items, 8 tokens, 2 sessions
    protocol.write_text((protocols_dir() / "demo.yaml").read_text().replace("items: 6", "items: 2")
                        .replace("max_tokens: 64", "max_tokens: 8"))
    looked_up: list[int] = []

    def cached(build: int, say) -> Built:
        looked_up.append(build)
        return Built(True, 0.0)

    builds = Builds(make=cached, options=lambda build: {"cpu_backend": engine_cpu_backend or "auto"})
    folder, lines = tmp_path / "bisect", []
    with pytest.raises(bisect_run.NoFirstBuild) as stopped:
        bisect_run.bisect(1, 3, str(protocol), "outputs", folder, lines.append, lambda: [1, 2, 3], builds)
    assert stopped.value.exit_code == 4 and looked_up == [1, 3]
    assert stopped.value.message.startswith("nothing changed between 1 and 3 on outputs: both give same as good")
    state = bisect_state.State.model_validate_json((folder / "bisect.json").read_bytes())
    assert [(s.build, s.outcome, s.result) for s in state.steps] == [(1, "good", "same as good"),
                                                                     (3, "good", "same as good")]
    assert state.steps[1].said == "outputs same as good: 16/16 requests' outputs byte-identical to the good end's"
    runs = sorted(p.name for p in (folder / "runs").iterdir())
    assert len(runs) == 2 and all(s.run in runs for s in state.steps)
    atlas = (folder / "atlas.csv").read_text()  # one row: the same engine on the same machine, its two runs
    assert len(atlas.splitlines()) == 2 and "2 run(s): demo-tiny 16 requests, demo-tiny 16 requests" in atlas
    assert (folder / "atlas.html").read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(bisect_run.NoFirstBuild):  # run again: judged already, nothing built or run
        bisect_run.bisect(1, 3, str(protocol), "outputs", folder, lines.append, lambda: [1, 2, 3], builds)
    assert looked_up == [1, 3] and len(list((folder / "runs").iterdir())) == 2
    assert any(line.startswith(f"continuing the bisect in {folder}: 2 step(s) done") for line in lines)
