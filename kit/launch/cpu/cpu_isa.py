"""Which x86 instruction-set extensions a shared library uses, measured from its machine code.

`scan(path)` decodes the library's executable sections with iced-x86 (a complete x86-64 decoder that
names the CPUID feature of every instruction) and counts instructions per extension, under the names
Linux prints in `/proc/cpuinfo`'s flags line. That is how the embedded engine's requirement list
(`kit/launch/cpu/wheel_cpu_isa.json`) was made, and how a test re-derives it from the installed wheel.

Decoding is linear over each executable section: data embedded in code could decode as stray
instructions, so a class seen only a handful of times deserves a second look (objdump agrees with
the wheel's counts; see tests/launch/test_cpu_isa.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kit.core.errors import KitError

# Features every x86-64 processor has (or that older ones execute as NOPs, like CET's endbr64): not
# requirements. Names are iced-x86's CpuidFeature names.
BASELINE = frozenset({
    "INTEL8086", "INTEL8086_ONLY", "INTEL186", "INTEL286", "INTEL386", "INTEL486", "INTEL486A", "X64", "CMOV",
    "CX8", "FPU", "FPU287", "FPU387", "MMX", "SSE", "SSE2", "MULTIBYTENOP", "CET_IBT", "CPUID", "TSC", "SYSCALL",
    "PAUSE", "CLFSH", "FXSR",
})

# iced-x86 CpuidFeature name -> the flag Linux shows in /proc/cpuinfo for it.
CPUINFO_FLAG = {
    "SSE3": "pni", "SSSE3": "ssse3", "SSE4_1": "sse4_1", "SSE4_2": "sse4_2", "POPCNT": "popcnt",
    "LZCNT": "abm", "BMI1": "bmi1", "BMI2": "bmi2", "MOVBE": "movbe", "ADX": "adx", "PCLMULQDQ": "pclmulqdq",
    "AES": "aes", "SHA": "sha_ni", "RDRAND": "rdrand", "RDSEED": "rdseed", "XSAVE": "xsave", "F16C": "f16c",
    "FMA": "fma", "AVX": "avx", "AVX2": "avx2", "AVX_VNNI": "avx_vnni", "AVX_VNNI_INT8": "avx_vnni_int8",
    "AVX_IFMA": "avx_ifma", "AVX512F": "avx512f", "AVX512VL": "avx512vl", "AVX512BW": "avx512bw",
    "AVX512DQ": "avx512dq", "AVX512CD": "avx512cd", "AVX512_IFMA": "avx512ifma", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VBMI2": "avx512_vbmi2", "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16",
    "AVX512_FP16": "avx512_fp16", "AVX512_BITALG": "avx512_bitalg", "AVX512_VPOPCNTDQ": "avx512_vpopcntdq",
    "GFNI": "gfni", "VAES": "vaes", "VPCLMULQDQ": "vpclmulqdq", "AMX_TILE": "amx_tile", "AMX_INT8": "amx_int8",
    "AMX_BF16": "amx_bf16", "AMX_FP16": "amx_fp16", "PREFETCHW": "3dnowprefetch", "PREFETCHWT1": "prefetchwt1",
    "RDTSCP": "rdtscp", "CLFLUSHOPT": "clflushopt", "CLWB": "clwb", "FSGSBASE": "fsgsbase",
}

SCANNER = "iced-x86"
INSTALL_HINT = "pip install 'iced-x86==1.21.0' 'pyelftools==0.33' (both come with the kit's [test] extra)"


def scan(path: Path) -> dict[str, int]:
    """Instructions per extension (cpuinfo flag names) in the executable sections of an ELF file."""
    try:
        import iced_x86  # noqa: PLC0415 - a measuring tool, not needed to run the kit
        from elftools.common.exceptions import ELFError  # noqa: PLC0415
        from elftools.elf.elffile import ELFFile  # noqa: PLC0415
    except ImportError as exc:
        raise KitError(f"scanning machine code needs iced-x86 and pyelftools ({exc})", INSTALL_HINT) from exc
    names = {value: name for name, value in vars(iced_x86.CpuidFeature).items()
             if isinstance(value, int) and not name.startswith("_")}
    counts: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            sections = [(s.data(), s["sh_addr"]) for s in elf.iter_sections()
                        if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & 0x4]  # SHF_EXECINSTR
    except (OSError, ValueError, ELFError) as exc:
        raise KitError(f"cannot read {path} as an ELF library ({exc})", "pass a shared library (.so) file") from exc
    for code, address in sections:
        for instruction in iced_x86.Decoder(64, code, ip=address):
            for feature in {names[f] for f in instruction.cpuid_features()} - BASELINE:
                flag = CPUINFO_FLAG.get(feature)
                if flag is None:
                    unknown[feature] += 1
                else:
                    counts[flag] += 1
    if unknown:
        raise KitError(f"{path} uses extensions this scanner has no cpuinfo name for: {dict(unknown)}",
                       "add them to kit.launch.cpu.cpu_isa.CPUINFO_FLAG")
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
