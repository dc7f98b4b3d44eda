"""`workload.function_docs_max`: the system prompt lists only the first N of an episode's function docs (BFCL's
own prompt builder on the real worker; the engine is `ScriptedEngine`), and the workload records it."""

from __future__ import annotations

import json

import pytest
from bfcl_fakes import ScriptedEngine, char_count_tokens

from kit.protocols.bfcl_passes.model import BfclWorkload
from kit.workloads.bfcl import render_chatml, run_episode
from kit.workloads.bfcl.client import BfclWorkerError


def _names(prompt: str) -> list[str]:
    """The function names a BFCL system prompt lists (its docs are a JSON list between the first [ and the
    line that closes it)."""
    start = prompt.index("\n[") + 1
    end = prompt.index("\n]", start) + 2
    return [doc["name"] for doc in json.loads(prompt[start:end])]


def test_the_prompt_lists_the_first_n_docs_in_bfcls_order(bfcl_worker, first_80):
    episode = first_80[0]
    whole = bfcl_worker.system_prompt(episode.id)
    assert _names(whole) == list(episode.function_names)
    trimmed = bfcl_worker.system_prompt(episode.id, functions=4)
    assert _names(trimmed) == list(episode.function_names[:4])
    assert len(trimmed) < len(whole) / 3
    assert trimmed.split("\n[")[0] == whole.split("\n[")[0]  # BFCL's own instructions, unchanged
    assert bfcl_worker.system_prompt(episode.id, functions=1000) == whole  # more than it has: all of them


@pytest.mark.parametrize("functions", [0, -1, True, "4"])
def test_a_count_that_is_not_a_positive_integer_is_refused_by_the_worker(bfcl_worker, first_80, functions):
    with pytest.raises(BfclWorkerError, match="positive integer"):
        bfcl_worker.system_prompt(first_80[0].id, functions=functions)


def test_the_workload_sends_its_prompt_to_the_episode(bfcl_worker, first_80):
    episode = first_80[0]
    workload = BfclWorkload(episodes=1, function_docs_max=3)
    prompt = workload.system_prompt(bfcl_worker, episode.id)
    assert _names(prompt) == list(episode.function_names[:3])
    assert BfclWorkload(episodes=1).system_prompt(bfcl_worker, episode.id) == bfcl_worker.system_prompt(episode.id)
    seen = []
    run_episode(ScriptedEngine(["I cannot help."] * 8), bfcl_worker, episode, render_chatml, 16384, "p",
                count_tokens=char_count_tokens, seed=42, max_requests=1, system_prompt=prompt,
                on_request=lambda info, request, completion: seen.append(request))
    (request,) = seen
    assert prompt in request.prompt and bfcl_worker.system_prompt(episode.id) not in request.prompt


@pytest.mark.parametrize("value", [0, 101, True, 2.0, "4"])
def test_the_knob_is_bounded_and_strict(value):
    with pytest.raises(ValueError, match="function_docs_max"):
        BfclWorkload(function_docs_max=value)
