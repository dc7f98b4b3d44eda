"""The CPU remedy's sizing: four arms (one the fixed-kernels backend), BFCL prompts trimmed into the 1k-4k bin,
and a launcher estimate that counts the trimmed docs."""

from __future__ import annotations

from kit.protocols import kinds
from kit.protocols.remedy.protocol import estimate_on_cpu


def test_remedy_cpu_holds_the_engine_side_fix_and_trims_bfcl_prompts():
    protocol, _, _ = kinds.load("remedy-cpu")
    assert [arm.name for arm in protocol.arms] == ["unfixed", "chunk-16", "reuse-off", "fixedkernels"]
    assert protocol.arms[3].fixes == ("cpu-backend-portable-fixedkernels",)
    assert protocol.bfcl is not None and protocol.bfcl.workload.function_docs_max == 4
    assert protocol.bfcl.workload.max_requests_per_episode >= 2  # a cache hit to hold against a recompute
    paper, _, _ = kinds.load("remedy")
    assert paper.bfcl is not None and paper.bfcl.workload.function_docs_max is None  # the paper lists every doc


def test_the_estimate_counts_trimmed_function_docs():
    data = {"arms": [{}, {}], "gsm8k": None,
            "bfcl": {"workload": {"episodes": 2, "max_requests_per_episode": 3}}}
    whole = estimate_on_cpu(data).seconds
    trimmed = estimate_on_cpu({**data, "bfcl": {"workload": {**data["bfcl"]["workload"],
                                                             "function_docs_max": 4}}}).seconds
    assert trimmed < whole / 2
    assert estimate_on_cpu({**data, "bfcl": {"workload": {**data["bfcl"]["workload"],
                                                          "function_docs_max": 100}}}).seconds == whole
