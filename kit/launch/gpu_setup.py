"""Native GPU engines without Docker: build the pinned llama.cpp with CUDA, or install vLLM in a venv.

The llama.cpp build runs images/build-llamacpp.sh, the same pinned script the Dockerfile's build
stage runs. Both commands check their prerequisites first and refuse with one line when one is
missing. Commands are built as argument lists (tested) and run through an injectable runner.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from kit.core.errors import EngineError
from kit.launch import build_tools
from kit.core.paths import REPO_ROOT, cache_dir

LLAMACPP_SHORT = "7e4c0a9"
BUILD_SCRIPT = REPO_ROOT / "images" / "build-llamacpp.sh"
VLLM_PIN = "vllm==0.11.0"
ARCHS = re.compile(r"^\d+[a-z]?(-real|-virtual)?(;\d+[a-z]?(-real|-virtual)?)*$")
_RELEASE = re.compile(r"release (\d+)\.(\d+)")

Which = Callable[[str], "str | None"]
Output = Callable[[Sequence[str]], str]  # run a command, return its output (raises OSError if absent)
Execute = Callable[[Sequence[str]], int]  # run a command attached to the terminal, return its exit code


def default_llamacpp_prefix() -> Path:
    """Where `kit engines build llamacpp` installs by default: <cache>/engines/llamacpp-7e4c0a9-cuda."""
    return cache_dir() / "engines" / f"llamacpp-{LLAMACPP_SHORT}-cuda"


def _output(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def _execute(argv: Sequence[str]) -> int:
    return subprocess.run(list(argv)).returncode


def check_build_prerequisites(which: Which = shutil.which, output: Output = _output) -> str:
    """Refuse unless cmake and nvcc 12.x are on PATH; returns the CUDA release (e.g. "12.6")."""
    build_tools.require("building llama.cpp with CUDA", which)
    if which("nvcc") is None:
        raise EngineError("nvcc not found", "install the CUDA 12 toolkit or put /usr/local/cuda/bin on PATH")
    release, _text = nvcc_release(output)
    if not release.startswith("12."):
        raise EngineError(f"nvcc is CUDA {release}; the pinned llama.cpp build needs CUDA 12.x",
                          "put a CUDA 12 toolkit's bin/ first on PATH")
    return release


def nvcc_release(output: Output = _output) -> tuple[str, str]:
    """(the CUDA release, e.g. "12.6"; the whole `nvcc --version` text), or refused where it names none."""
    text = output(["nvcc", "--version"])
    match = _RELEASE.search(text)
    if match is None:
        raise EngineError("cannot read the CUDA version from `nvcc --version`", "check the CUDA toolkit install")
    return f"{match.group(1)}.{match.group(2)}", text


def gpu_archs(output: Output = _output) -> list[str]:
    """The CUDA architectures of the GPUs `nvidia-smi --query-gpu=compute_cap` lists (e.g. "8.9" → "89"),
    distinct, in order; none where nvidia-smi is absent, fails or lists none."""
    try:
        text = output(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    except (OSError, subprocess.SubprocessError):
        return []
    found = [line.strip().replace(".", "") for line in text.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())]
    return list(dict.fromkeys(found))


def build_llamacpp_argv(prefix: Path, archs: str = "89", script: Path = BUILD_SCRIPT,
                        extra: Sequence[str] = ()) -> list[str]:
    """The build script's command line for one install prefix and CUDA architecture list."""
    if not ARCHS.match(archs):
        raise EngineError(f"--archs must be CUDA architectures such as 89 or '86;90', got {archs!r}",
                          "pass e.g. --archs 89 (sm_89) or --archs '80;90'")
    return ["bash", str(script), "--archs", archs, *extra, str(prefix)]


def build_llamacpp(prefix: Path | None = None, archs: str = "89", *, which: Which = shutil.which,
                   output: Output = _output, execute: Execute = _execute,
                   say: Callable[[str], None] = print) -> Path:
    """Check prerequisites, run the pinned build script, return the installed llama-server path."""
    prefix = Path(prefix) if prefix is not None else default_llamacpp_prefix()
    argv = build_llamacpp_argv(prefix, archs)  # bad --archs is refused before anything else
    release = check_build_prerequisites(which, output)
    say(f"building llama.cpp {LLAMACPP_SHORT} with CUDA {release} for archs {archs} into {prefix}")
    code = execute(argv)
    if code != 0:
        raise EngineError(f"the llama.cpp build failed (exit {code})", "read the build output above")
    return prefix / "bin" / "llama-server"


def gpu_visible(output: Output = _output) -> bool:
    """True when `nvidia-smi -L` lists at least one GPU."""
    try:
        text = output(["nvidia-smi", "-L"])
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in text.splitlines())


def vllm_install_commands(venv: Path, python: str = sys.executable) -> list[list[str]]:
    """Create `venv` and install the pinned vLLM into it."""
    venv_python = str(Path(venv) / "bin" / "python")
    return [[python, "-m", "venv", str(venv)],
            [venv_python, "-m", "pip", "install", "--upgrade", "pip"],
            [venv_python, "-m", "pip", "install", VLLM_PIN]]


def default_vllm_venv() -> Path:
    return cache_dir() / "engines" / "vllm-0.11.0"


def install_vllm(venv: Path | None = None, force: bool = False, *, output: Output = _output,
                 execute: Execute = _execute, say: Callable[[str], None] = print) -> Path:
    """Install vLLM 0.11.0 into a new venv; refuses without a visible NVIDIA GPU unless `force`."""
    if not force and not gpu_visible(output):
        raise EngineError("no NVIDIA GPU is visible (nvidia-smi lists none); vLLM 0.11.0 needs one",
                          "run this on a GPU machine, or pass --force to install anyway")
    venv = Path(venv) if venv is not None else default_vllm_venv()
    for argv in vllm_install_commands(venv):
        say("$ " + " ".join(argv))
        code = execute(argv)
        if code != 0:
            raise EngineError(f"`{' '.join(argv[:4])}` failed (exit {code})", "read the output above")
    return venv / "bin" / "vllm"
