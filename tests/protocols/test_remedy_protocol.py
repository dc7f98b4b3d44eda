"""The remedy's procedure without an engine or BFCL: what `prepare` plans for each workload, BFCL's install
reached with the run's inputs (its progress told where the run says); its BFCL passes on the servers a run has
(an episode's cache-on and cache-off passes of an arm share one), a resumed run running such a pair again whole."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

from kit.core.events import Notice, SessionStarted
from kit.protocols import kinds
from kit.protocols.bfcl_passes import drive
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.remedy import protocol as remedy
from kit.record.manifest import Manifest
from tests.protocols.fake_passes import FakeProvider

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

    monkeypatch.setattr(drive, "ensure_bfcl", ensure_bfcl)
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
    assert prepared.plan["gsm8k"]["items"] == 2 and len(prepared.payload.gsm8k) == 2


def test_the_shipped_remedy_protocol_prepares_its_bfcl_workload(monkeypatch):
    told = fake_install(monkeypatch)
    protocol, _, _ = kinds.load("remedy", {"gsm8k": None})  # its GSM8K items need a file given with --gsm8k
    prepared = kinds.KINDS["remedy"].prepare(protocol, RunInputs())
    assert told == [None] and prepared.plan["bfcl"]["episodes"] == 80 and "gsm8k" not in prepared.plan


def _bfcl_run(tmp_path, monkeypatch, done=(), passes=None):
    """The BFCL passes of BOTH on fake servers, two episodes: (passes run with their servers' labels, servers
    started, events, the manifest)."""
    ran: list = []

    @contextmanager
    def bfcl_passes(protocol, prepared, ctx, arms, fresh_server_per_pass, estimate_provider=None):
        yield "worker", [SimpleNamespace(id="e0"), SimpleNamespace(id="e1")], None

    def run_pass(protocol, ctx, live, worker, episodes, render, plan, on_episode):
        ran.append((plan.pass_id, [e.id for e in episodes], live.launch["label"]))
        ctx.manifest.set_pass(plan.pass_id, status="OK")

    monkeypatch.setattr(remedy, "bfcl_passes", bfcl_passes)
    monkeypatch.setattr(remedy, "run_pass", run_pass)
    protocol, started, events = kinds.parse_text(BOTH, "test"), [], []
    manifest = Manifest.create(tmp_path, passes=passes or {})
    ctx = RunContext(tmp_path, manifest, FakeProvider(started), events.append, done=set(done))
    providers = {arm.name: FakeProvider(started, arm.name) for arm in protocol.arms}
    remedy._bfcl(protocol, Prepared(plan={}, workload={}, payload=remedy.RemedyPayload(bfcl="install")), ctx, providers)
    return ran, started, events, Manifest.load(tmp_path)


def test_bfcl_passes_run_on_a_server_per_arm_and_episode_in_turn(tmp_path, monkeypatch):
    ran, started, events, manifest = _bfcl_run(tmp_path, monkeypatch)
    servers = ["unfixed.bfcl.e0", "chunk-16.bfcl.e0", "chunk-16.bfcl.e1", "unfixed.bfcl.e1"]  # the arms in turn
    assert started == [(label, label.split(".")[0]) for label in servers]  # each on its arm's provider
    assert ran == [(f"{label}.{cache}", [label[-2:]], label) for label in servers for cache in ("on", "off")]
    assert [(e.session, e.index, e.total) for e in events if isinstance(e, SessionStarted)] == [
        (label, index, 4) for index, label in enumerate(servers, start=1)]
    info = manifest.run.passes["chunk-16.bfcl.e1.off"]
    assert info.remedy == {"arm": "chunk-16", "workload": "bfcl", "unit": "e1", "cache": "off"}
    assert info.server_session.startswith("chunk-16.bfcl.e1/")  # the server, unique within the run
    assert info.server_session == manifest.run.passes["chunk-16.bfcl.e1.on"].server_session
    assert info.server_session != manifest.run.passes["chunk-16.bfcl.e0.on"].server_session


def test_a_resumed_run_runs_an_arms_episode_again_whole_where_one_of_its_passes_finished(tmp_path, monkeypatch):
    (tmp_path / "records").mkdir()
    (tmp_path / "records/unfixed.bfcl.e1.on.jsonl").write_text("{}\n")
    finished = {"unfixed.bfcl.e0.on", "unfixed.bfcl.e0.off", "chunk-16.bfcl.e0.on", "chunk-16.bfcl.e0.off",
                "unfixed.bfcl.e1.on"}
    passes = {pid: {"status": "OK", "file": f"records/{pid}.jsonl"} for pid in finished}
    ran, started, events, manifest = _bfcl_run(tmp_path, monkeypatch, finished, passes)
    assert [label for label, _ in started] == ["chunk-16.bfcl.e1", "unfixed.bfcl.e1"]
    assert [pid for pid, *_ in ran] == ["chunk-16.bfcl.e1.on", "chunk-16.bfcl.e1.off", "unfixed.bfcl.e1.on",
                                        "unfixed.bfcl.e1.off"]
    said = [e.text for e in events if isinstance(e, Notice)]
    assert said == ["server unfixed.bfcl.e1 stopped after unfixed.bfcl.e1.on: its passes share one server, so it "
                    "runs again whole (earlier records kept in records/superseded/)"]
    assert [p.name.split(".jsonl")[0] for p in (tmp_path / "records/superseded").iterdir()] == ["unfixed.bfcl.e1.on"]
    assert manifest.run.passes["unfixed.bfcl.e1.on"].server_session.startswith("unfixed.bfcl.e1/")
