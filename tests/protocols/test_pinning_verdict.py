"""Whether a state change flips the bytes, one rule for the verdict of a gated run and for the calls of a run
without a reset (kit.protocols.pinning.verdict.flips_of): calls whose state is unknown say nothing of it; the
pinning fixture of an earlier release recomputes as it was written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.protocols.pinning import results
from kit.protocols.pinning.table import PinningResults, StateRow
from kit.protocols.pinning.verdict import flips_of, verdict

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "records_v1" / "pinning-tiny-20261201-071511"


def state(name: str, output: str, n: int = 2) -> dict:
    return {"state": name, "n": n, "modal_output": output, "modal_count": n, "modal_share": 1.0,
            "wilson95": [0.3, 1.0]}


@pytest.mark.parametrize("states, flips", [
    ([state("full_eval", "A"), state("full_kv", "B")], True),
    ([state("full_eval", "A"), state("full_kv", "A")], False),
    ([state("full_eval", "A"), state("unknown", "B")], None),  # one state named: nothing said of a change
    ([state("full_eval", "A"), state("full_kv", "A"), state("unknown", "B")], False),
    ([state("full_eval", "A"), state("full_kv", "B", n=0)], None),
    ([], None),
])
def test_a_state_change_flips_the_bytes_only_between_named_states(states, flips):
    assert flips_of([StateRow.of(s) for s in states]) is flips
    table = {"table": "pinning", "engine": {}, "telemetry": True, "outputs": {}, "passes": [], "states": states,
             "gate": {"status": "PASS", "reasons": []}, "arms": {"pure": {"n": 0}, "contaminated": {"n": 0}},
             "cycles": [], "regimes": {"always_fresh": {"n": 0}, "steady": {"n": 0}}}
    assert verdict(PinningResults.of(table)).state_change_flips_bytes is flips  # the gated verdict: the same rule


def test_the_pinning_fixture_of_an_earlier_release_recomputes_as_written(tmp_path):
    run_dir = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, run_dir)
    written = json.loads((FIXTURE / "results" / "pinning.json").read_text())
    assert json.loads(json.dumps(results.pinning_table(run_dir).to_json())) == written
