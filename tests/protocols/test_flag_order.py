"""Flag × order without an engine: the pass plan, comparisons, cells for `kit analyze`, the protocol
files, sizing down from the command line and the launcher's catalog entry."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kit.cli import _overrides
from kit.core.errors import ConfigError
from kit.core.events import Notice
from kit.record.manifest import Manifest
from kit.core.paths import protocols_dir
from kit.protocols import kinds
from kit.protocols.flag_order import protocol as flag_order
from kit.protocols.procedure import RunContext
from kit.tui.catalog import EMBEDDED, Capabilities, entry
from tests.protocols.fake_passes import PREPARED, FakeProvider, fake_passes


def load(text: str):
    return kinds.parse_text(text, "test")


def test_default_arms_are_the_four_cells_of_table_iii_in_run_order():
    protocol, _, _ = kinds.load("flag-order")
    plan = flag_order.pass_plan(protocol)
    assert [p.pass_id for p in plan] == [
        "default-adjacent-on1", "default-adjacent-on2",
        "default-between-on1", "default-between-off1", "default-between-on2",
        "disabled-adjacent-on1", "disabled-adjacent-on2",
        "disabled-between-on1", "disabled-between-off1", "disabled-between-on2"]
    assert {p.cell: p.cache_ram for p in plan} == {"default-adjacent": None, "default-between": None,
                                                    "disabled-adjacent": 0, "disabled-between": 0}
    assert all(p.order == 0 for p in plan)  # canonical episode order everywhere
    assert [(p.arm, p.repeat) for p in plan if p.cell == "default-between"] == [("on", 1), ("off", 1), ("on", 2)]
    assert protocol.workload.count == 80 and protocol.engine.ctx_size == 16384 and protocol.top_logprobs == 1


def test_comparisons_are_run_to_run_per_arm_and_path_where_an_arm_has_a_cache_off_pass():
    protocol, _, _ = kinds.load("flag-order")
    pairs = flag_order.comparisons(protocol)
    assert pairs["run-to-run cache-on default-between"] == ("default-between-on1", "default-between-on2")
    assert pairs["path disabled-between"] == ("disabled-between-on1", "disabled-between-off1")
    assert "path default-adjacent" not in pairs and len(pairs) == 6


def test_cells_carry_setting_and_order_the_way_table_iii_reads_them():
    protocol, _, _ = kinds.load("flag-order")
    cells = {name: cell.to_json() for name, cell in flag_order.cells(protocol).items()}  # as the manifest keeps them
    assert list(cells) == ["default-adjacent", "default-between", "disabled-adjacent", "disabled-between"]
    between = cells["disabled-between"]
    assert between["passes"] == ["disabled-between-on1", "disabled-between-off1", "disabled-between-on2"]
    assert between["engine"] == {"cache_ram": 0} and between["resolved"] == {"passes": ["on", "off", "on"]}
    assert between["flag_order"] == {"prompt_cache": "disabled", "order": "cache-off pass in between",
                                     "server": "shared",
                                     "run_to_run": ["disabled-between-on1", "disabled-between-on2"]}
    assert cells["default-adjacent"]["flag_order"]["prompt_cache"] == "default"
    assert cells["default-adjacent"]["flag_order"]["order"] == "adjacent"


def test_arms_are_data_and_bad_arms_are_refused_with_the_key():
    custom = load("""
protocol: flag_order
arms:
  - {name: big, cache_ram: 1024, passes: [on, off, on]}
""")
    assert [p.pass_id for p in flag_order.pass_plan(custom)] == ["big-on1", "big-off1", "big-on2"]
    assert flag_order.cells(custom)["big"].flag_order.prompt_cache == "1024 MiB"
    with pytest.raises(ConfigError, match="arms.0.passes.*exactly two cache-on passes"):
        load("protocol: flag_order\narms: [{name: a, passes: [on, off]}]\n")
    with pytest.raises(ConfigError, match="unique"):
        load("protocol: flag_order\narms: [{name: a, passes: [on, on]}, {name: a, passes: [on, on]}]\n")
    with pytest.raises(ConfigError, match="arms.0.name"):
        load("protocol: flag_order\narms: [{name: 'A B', passes: [on, on]}]\n")


@pytest.mark.parametrize(("name", "count", "ids"), [("flag-order", 3, None),
                                                     ("flag-order-cpu", 1, ["multi_turn_base_29"])])
def test_episodes_on_the_command_line_size_the_protocol_down(name, count, ids):
    protocol, _, _ = kinds.load(name, _overrides(None, count, None, None))
    assert protocol.workload.count == count and protocol.workload.chosen_ids() == ids
    assert len(flag_order.pass_plan(protocol)) == 10  # the design stays whole


def test_the_cpu_file_is_the_paper_design_at_a_cpu_size():
    protocol, _, _ = kinds.load("flag-order-cpu")
    paper, _, _ = kinds.load("flag-order")
    assert protocol.arms == paper.arms
    assert protocol.workload.chosen_ids() == ["multi_turn_base_29", "multi_turn_base_10"]
    assert (protocol.workload.max_tokens_cap, protocol.workload.max_requests_per_episode) == (64, 3)


def test_the_launcher_lists_both_files_as_runnable_with_an_estimate():
    caps = Capabilities((EMBEDDED,))
    for name, episodes in (("flag-order", 80), ("flag-order-cpu", 2)):
        listed = entry(protocols_dir() / f"{name}.yaml", kinds.KINDS, caps)
        assert listed.runnable and listed.kind == "flag_order", listed.why_not
        assert f"{episodes} episodes x 10 passes in 4 arms" in listed.estimate
        assert "prompt cache" in listed.measures
    sweep = entry(protocols_dir() / "sweep-cpu.yaml", kinds.KINDS, caps)
    assert sweep.runnable and "weight formats" in sweep.measures
    assert sweep.estimate.startswith("2 episodes x 20 passes")


def test_resume_skips_finished_arms_and_reruns_a_cut_short_arm_whole(tmp_path, monkeypatch):
    protocol, _, _ = kinds.load("flag-order")
    manifest = Manifest.create(tmp_path, passes={})
    done = {"default-adjacent-on1", "default-adjacent-on2", "default-between-on1"}
    for pass_id in done:
        (tmp_path / "records").mkdir(exist_ok=True)
        (tmp_path / "records" / f"{pass_id}.jsonl").write_text("{}\n")
        manifest.set_pass(pass_id, status="OK", file=f"records/{pass_id}.jsonl")
    started, events = [], []
    ran = fake_passes(monkeypatch)
    ctx = RunContext(tmp_path, manifest, FakeProvider(started), events.append, done=set(done))
    flag_order.run(protocol, PREPARED, ctx)
    assert started == [("default-between", None), ("disabled-adjacent", 0), ("disabled-between", 0)]
    assert [p for p, _ in ran] == ["default-between-on1", "default-between-off1", "default-between-on2",
                                   "disabled-adjacent-on1", "disabled-adjacent-on2", "disabled-between-on1",
                                   "disabled-between-off1", "disabled-between-on2"]
    assert all(label == p.rsplit("-", 1)[0] for p, label in ran)  # each pass on its own arm's server
    assert "default-between-on1" not in ctx.done and "default-adjacent-on1" in manifest.run.passes
    rerun = manifest.run.passes["default-between-on1"]
    assert {k: rerun.to_json()[k] for k in ("cell", "cache_ram")} == {"cell": "default-between", "cache_ram": None}
    # the server it ran on again, shared with the arm's other passes and named apart from any earlier one
    assert str(rerun.server_session).startswith("default-between/")
    assert manifest.run.passes["default-between-on2"].server_session == rerun.server_session
    assert [f.name.split(".")[0] for f in (tmp_path / "records" / "superseded").iterdir()] == ["default-between-on1"]
    assert any(isinstance(e, Notice) and "runs again" in e.text for e in events)


def test_an_engine_the_kit_did_not_start_is_refused():
    protocol, _, _ = kinds.load("flag-order")
    ctx = SimpleNamespace(provider=SimpleNamespace(fresh_servers=False))
    with pytest.raises(ConfigError, match="fresh server per arm"):
        flag_order.run(protocol, PREPARED, ctx)
