"""Model output that would run code, through the real worker: refused, answered as BFCL answers a failed
call, and nothing happens. A control first shows every payload does run against BFCL's own code.

Sentinels live in a folder anyone may write to, so a payload that ran as the worker's unprivileged user
would have created them: their absence means the policy stopped it, not the file permissions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bfcl_fakes import ScriptedEngine, char_count_tokens

from kit.workloads.bfcl import render_chatml, run_episode, score_episode

TOOL_ERROR = "Error during execution: "


@pytest.fixture
def open_dir():
    """A folder in /tmp that any user may write to, and a file in it that any user may delete."""
    folder = Path(tempfile.mkdtemp(prefix="kit-sandbox-test-", dir="/tmp"))
    folder.chmod(0o777)
    keep = folder / "keep.txt"
    keep.write_text("still here")
    keep.chmod(0o666)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def payloads(d: Path) -> list[str]:
    """Call strings that run a process, write, delete or reach beyond the episode's classes."""
    s = d / "sentinel"
    return [
        f"inspect.os.system(command='touch {s}-system')",
        f"__import__('os').system('touch {s}-import')",
        f"os.remove(path='{d / 'keep.txt'}')",
        f"open(file='{s}-open', mode='w')",
        f"open('{s}-open2', 'w')",
        f"importlib.import_module(name='os').system(command='touch {s}-importlib')",
        f"exec(\"import os; os.system('touch {s}-exec')\")",
        f"eval(\"__import__('os').system('touch {s}-eval')\")",
        f"GorillaFileSystem.ls.__globals__['inspect'].os.system('touch {s}-chain')",
        f"GorillaFileSystem.ls.__func__.__globals__['inspect'].os.system('touch {s}-chain2')",
        f"ls(a=inspect.os.system('touch {s}-arg'))",
        "f(x=os.getcwd())",
        f"cd(folder=mkdir(dir_name='{s.name}-nested'))",
        f"mkdir(dir_name='{s.name}-' + 'binop')",
        "get_flight_cost(travel_from='SFO', travel_to='LAX', travel_date='2024-11-15', travel_class='economy')",
        "TravelAPI.authenticate_travel(client_id='a', client_secret='b', refresh_token='c', grant_type='d', "
        "user_first_name='e', user_last_name='f')",
        "_load_scenario(scenario={})",
        "GorillaFileSystem._load_scenario(scenario={})",
        "GorillaFileSystem.__init__()",
        "ls(**{'a': True})",
    ]


def assert_nothing_happened(d: Path) -> None:
    assert sorted(p.name for p in d.iterdir()) == ["keep.txt"]
    assert (d / "keep.txt").read_text() == "still here"


def raw_bfcl(install, code: str, tmp_path: Path) -> None:
    """Run `code` against BFCL itself, without the kit's worker (the control)."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(install.site_dir),
           "BFCL_PROJECT_ROOT": str(tmp_path), "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)


def test_control_the_payloads_run_against_bfcl_itself(bfcl_install, tmp_path, open_dir):
    s = open_dir / "sentinel"
    raw_bfcl(bfcl_install, f"""
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call
from bfcl_eval.model_handler.utils import default_decode_execute_prompting
execute_multi_turn_func_call([{payloads(open_dir)[0]!r}, {payloads(open_dir)[3]!r}], {{}},
                             ["GorillaFileSystem"], "control", "multi_turn_base_0")
default_decode_execute_prompting("[ls(a=__import__('os').system('touch {s}-decoder') + 0)]")
""", tmp_path)
    assert {p.name for p in open_dir.iterdir()} >= {"sentinel-system", "sentinel-open", "sentinel-decoder"}


def test_payloads_given_to_execute_are_refused_and_run_nothing(bfcl_worker, first_80, open_dir):
    ep = first_80[0]  # GorillaFileSystem + TwitterAPI
    before = bfcl_worker.execute("sandbox-ref", ep.id, ["ls(a=True)"]).results
    calls = payloads(open_dir)
    done = bfcl_worker.execute("sandbox", ep.id, calls)
    assert [r.index for r in done.refused] == list(range(len(calls)))
    assert [r.call for r in done.refused] == calls
    assert all(r.tool_result == result and result.startswith(TOOL_ERROR)
               for r, result in zip(done.refused, done.results, strict=True))
    reasons = {r.call: r.reason for r in done.refused}
    assert reasons[calls[0]] == "name 'inspect' is not defined"
    assert reasons[calls[-6]] == "name 'get_flight_cost' is not defined"  # a method of a class not involved
    # The environment is as it was: no private method reset it, no nested mkdir ran.
    assert bfcl_worker.execute("sandbox", ep.id, ["ls(a=True)"]).results == before
    bfcl_worker.release("sandbox", ep.id)
    bfcl_worker.release("sandbox-ref", ep.id)
    assert_nothing_happened(open_dir)


def test_allowed_and_refused_calls_of_one_step_keep_their_order(bfcl_worker, first_80, open_dir):
    ep = first_80[0]
    done = bfcl_worker.execute("order", ep.id, ["cd(folder='document')", payloads(open_dir)[0], "pwd()"])
    bfcl_worker.release("order", ep.id)
    assert [r.index for r in done.refused] == [1]
    assert "document" in done.results[0] and done.results[1].startswith(TOOL_ERROR)
    assert done.results[2] == '{"current_working_directory": "/workspace/document"}'
    assert_nothing_happened(open_dir)


def test_payloads_through_the_agent_loop_are_refused_and_recorded(bfcl_worker, first_80, open_dir):
    ep = first_80[0]
    s = open_dir / "sentinel"
    script = [f"[{c}]" for c in payloads(open_dir)[:4]] + [
        f"[ls(a=__import__('os').system('touch {s}-decoder') + 0)]",  # BFCL's decoder would eval this
    ] + ["Done."] * (len(ep.turns) - 1)
    seen = []
    result = run_episode(ScriptedEngine(script), bfcl_worker, ep, render_chatml, 16384, "agent-sandbox",
                         count_tokens=char_count_tokens, seed=42, on_request=lambda info, req, comp: seen.append(info))
    executed = [info for info in seen if info.action == "execute"]
    assert [info.tool_refused[0].reason for info in executed] == [
        "name 'inspect' is not defined", "name 'system' is not defined",  # the decoder kept only `system`
        "name 'os' is not defined", "name 'open' is not defined"]
    assert all(info.tool_results == (info.tool_refused[0].tool_result,) for info in executed)
    tool_msgs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert tool_msgs and all(m.startswith(TOOL_ERROR) for m in tool_msgs)
    ended = seen[len(executed)]
    assert ended.action == "end_turn" and ended.decode_error.startswith("refused by the call policy")
    score = score_episode(bfcl_worker, result)
    assert not score.valid and score.refused and all(r["turn"] == 0 for r in score.refused)
    assert_nothing_happened(open_dir)


def test_payloads_given_to_the_checker_are_refused_and_run_nothing(bfcl_worker, first_80, open_dir):
    ep = first_80[0]
    turns = [[list(t)] for t in ep.ground_truth]
    turns[0] = [payloads(open_dir)] + turns[0]
    score = bfcl_worker.check(ep.id, turns)
    assert len(score.refused) == len(payloads(open_dir))
    assert {(r["turn"], r["step"]) for r in score.refused} == {(0, 0)}
    assert score.decoded == turns  # what the model said, not the stand-ins
    assert_nothing_happened(open_dir)


def test_a_refused_call_scores_as_the_failed_call_it_was(bfcl_worker, first_80, open_dir):
    # The ground truth plus a refused call in a step of its own still scores valid, as it did when
    # the same step was a call that failed in BFCL's executor: failed calls change no state.
    for ep in first_80[:5]:
        turns = [[list(t)] for t in ep.ground_truth]
        turns[0] = [[payloads(open_dir)[0]]] + turns[0]
        score = bfcl_worker.check(ep.id, turns)
        assert score.valid, (ep.id, score.error_type, score.error_message)
        assert len(score.refused) == 1
    assert_nothing_happened(open_dir)


def test_score_drops_steps_the_decoder_would_eval(bfcl_worker, first_80, open_dir):
    s = open_dir / "sentinel"
    ep = first_80[0]
    turns = [[f"[ls(a=__import__('os').system('touch {s}-score') + 0)]"] for _ in ep.ground_truth]
    score = bfcl_worker.score(ep.id, turns)
    assert not score.valid and score.error_type == "multi_turn:empty_turn_model_response"
    assert_nothing_happened(open_dir)


def test_every_ground_truth_call_passes_the_policy_and_scores_valid(bfcl_worker):
    episodes = bfcl_worker.load_episodes()
    assert len(episodes) == 200
    for ep in episodes:
        score = bfcl_worker.check(ep.id, [[list(t)] if t else [] for t in ep.ground_truth])
        assert score.refused == [] and score.valid, (ep.id, score.refused, score.error_type)


def test_an_invented_function_gets_bfcls_own_error_text(bfcl_worker, first_80):
    # What BFCL's executor answered before the policy existed, so such trajectories do not change.
    done = bfcl_worker.execute("invented", first_80[0].id, ["foo(x=1)", "mean(numbers=[1, 2, 3])",
                                                             "GorillaFileSystem.ls()"])
    bfcl_worker.release("invented", first_80[0].id)
    assert done.results == ("Error during execution: name 'foo' is not defined",
                            "Error during execution: name 'mean' is not defined",
                            # allowed: BFCL itself rejects the Class.method form this way
                            "Error during execution: name 'GorillaFileSystem' is not defined")
    assert [r.index for r in done.refused] == [0, 1]
