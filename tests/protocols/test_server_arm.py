"""The cache arm of a server whose prefix caching is its launch setting (vLLM), checked around a pass
(kit.protocols.bfcl_passes.one_pass.ServerArm), and the per-request gate on such a server. A stub stands in for
the engine: the checks read only its launch flag, its own word and its counters."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kit.engines.vllm import CacheCounters
from kit.core.errors import ConfigError
from kit.protocols.bfcl_passes.model import GridGates
from kit.protocols.bfcl_passes.one_pass import PassTally, ServerArm, gate


@dataclass
class Server:
    prefix_caching: bool | None
    says: bool | None
    readings: list

    def server_prefix_caching(self):
        return self.says

    def cache_counters(self):
        return self.readings.pop(0)


def counters(hits, queries):
    return CacheCounters(hits=hits, queries=queries)


def test_a_cache_off_pass_is_proven_by_zero_hits_over_the_pass():
    arm = ServerArm(Server(False, False, [counters(0, 0), counters(0, 0)]), "off", "off1")
    assert arm.failure() is None
    assert arm.to_json() == {"launched_with_prefix_caching": False, "server_says": False, "hits_over_pass": 0,
                             "queries_over_pass": 0}


def test_hits_on_the_cache_off_server_void_the_pass():
    arm = ServerArm(Server(False, None, [counters(10, 100), counters(58, 300)]), "off", "off2")
    tally = PassTally("off")
    tally.arm_unproven = arm.failure()
    assert tally.verdict(GridGates()) == ("VOID", "48 prefix-cache hit tokens on the cache-off server over the pass")


def test_a_server_without_counters_leaves_the_cache_off_arm_unproven():
    arm = ServerArm(Server(False, None, [None, None]), "off", "off1")
    assert "unproven" in arm.failure()


def test_the_cache_on_arm_needs_no_counters_at_the_end():
    assert ServerArm(Server(True, True, [counters(0, 0), counters(96, 200)]), "on", "on1").failure() is None


@pytest.mark.parametrize("server, says", [
    (Server(True, None, []), "is a cache-off pass but its server runs with prefix caching on"),
    (Server(None, None, []), "how the server for the cache-off arm was launched is unknown"),
    (Server(False, True, []), "says enable_prefix_caching=True"),
])
def test_a_server_that_is_not_the_arms_is_refused_before_the_pass(server, says):
    with pytest.raises(ConfigError, match=says):
        ServerArm(server, "off", "off1")


def test_the_gate_on_a_server_level_arm():
    gates = GridGates()
    assert gate("off", 1, None, gates, arm_per_server=True) == (True, None)  # proven over the pass instead
    assert gate("off", 1, None, gates) == (False, "the engine did not report cached tokens")
    assert gate("off", 1, 16, gates, arm_per_server=True) == (False, "16 cached tokens on a cache-off request")
    assert gate("on", 1, None, gates, arm_per_server=True) == (False, "the engine did not report cached tokens")
