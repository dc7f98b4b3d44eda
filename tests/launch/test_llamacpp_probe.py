"""The API probe of a llama.cpp build (kit.launch.llamacpp.llamacpp_probe) against the real embedded llama-server (the
paper's build): it answers everything the kit reads, so nothing is lacking; a build that ignored
`cache_prompt` (here: the same server asked with prompt reuse off) is named for the cache-hit gate."""

from __future__ import annotations

import pytest

from kit.launch.llamacpp import llamacpp_probe

pytestmark = pytest.mark.engine


def test_the_papers_build_lacks_nothing_the_kit_reads(embedded_binary, smollm2, tmp_path):
    lacks = llamacpp_probe.probe(embedded_binary.binary, smollm2, tmp_path / "server.log", embedded_binary.env)
    assert lacks == []


def test_a_server_that_reports_no_cached_tokens_is_named(embedded_binary, smollm2, tmp_path, monkeypatch):
    real = llamacpp_probe.LlamaCppEngine.complete

    def no_reuse(self, request):  # the server asked to recompute: a build whose cache_prompt does nothing
        return real(self, type(request)(request.prompt, max_tokens=request.max_tokens, seed=request.seed,
                                        cache_prompt=False, top_logprobs=request.top_logprobs))

    monkeypatch.setattr(llamacpp_probe.LlamaCppEngine, "complete", no_reuse)
    lacks = llamacpp_probe.probe(embedded_binary.binary, smollm2, tmp_path / "server.log", embedded_binary.env)
    assert lacks == ["/completion timings.cache_n on a repeated prompt with cache_prompt (the cache-hit gate)"]
