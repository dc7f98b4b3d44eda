"""The remedy's procedure without an engine or BFCL: what `prepare` plans for each workload, BFCL's install
reached with the run's inputs (its progress told where the run says)."""

from __future__ import annotations

from types import SimpleNamespace

from kit.protocols import kinds
from kit.protocols.grid import protocol as grid
from kit.protocols.procedure import RunInputs

BOTH = """protocol: remedy
engine: {ctx_size: 1024, cache_ram: 0}
arms:
  - {name: unfixed}
  - {name: chunk-16, fixes: [chunk-16]}
gsm8k:
  workload: {source: arithmetic, items: 2}
  max_tokens: 16
bfcl:
  workload: {episodes: 3, max_requests_per_episode: 2}
"""


def fake_install(monkeypatch) -> list:
    """BFCL's install replaced by a stand-in; returns the `say` each call was given."""
    told: list = []

    def ensure_bfcl(*, say=None):
        told.append(say)
        return SimpleNamespace(to_manifest=lambda: {"bfcl_eval": "stand-in"})

    monkeypatch.setattr(grid, "ensure_bfcl", ensure_bfcl)
    return told


def test_prepare_with_a_bfcl_workload_installs_bfcl_with_the_runs_inputs(monkeypatch):
    told = fake_install(monkeypatch)
    protocol = kinds.parse_text(BOTH, "test")
    say = [].append
    prepared = kinds.KINDS["remedy"].prepare(protocol, RunInputs(say=say))
    assert told == [say]  # the install's progress goes where the run's inputs say
    assert prepared.plan["bfcl"]["passes"] == ["on", "off"] and prepared.plan["bfcl"]["episodes"] == 3
    assert prepared.plan["bfcl"]["max_requests_per_episode"] == 2
    assert prepared.workload["bfcl"] == {"source": "bfcl multi_turn_base", "episodes": 3, "ids": [],
                                         "bfcl_eval": "stand-in"}
    assert prepared.plan["gsm8k"]["items"] == 2 and len(prepared.payload["gsm8k"]) == 2


def test_the_shipped_remedy_protocol_prepares_its_bfcl_workload(monkeypatch):
    told = fake_install(monkeypatch)
    protocol, _, _ = kinds.load("remedy", {"gsm8k": None})  # its GSM8K items need a file given with --gsm8k
    prepared = kinds.KINDS["remedy"].prepare(protocol, RunInputs())
    assert told == [None] and prepared.plan["bfcl"]["episodes"] == 80 and "gsm8k" not in prepared.plan
