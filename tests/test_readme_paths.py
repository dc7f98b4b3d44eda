"""The README's two set-up paths: exactly two, each one command line and how long it takes on two cores,
and the test path is the command CI runs (`.ci/run`), apart from CI's own setup (static checks, quiet
pip, the docker tier's private daemon, bytecode kept even where the machine's environment says not to, the
time each phase starts)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI_ONLY = ("bash .ci/static-checks.sh", "source .ci/docker-tier.sh", "unset PYTHONDONTWRITEBYTECODE")


def paths() -> dict[str, str]:
    """'## Run …' section title -> its text."""
    text = (ROOT / "README.md").read_text()
    return dict(re.findall(r"^## (Run [^\n]*)\n(.*?)(?=^## |\Z)", text, re.M | re.S))


def commands(line: str) -> list[list[str]]:
    """A shell line's commands (split at &&), each as words with CI's spellings made the README's."""
    found = []
    for command in line.split("&&"):
        words = shlex.split(command)
        if words[:1] == ["exec"]:
            words = words[1:]
        if words[:3] == ["python3", "-m", "pip"]:
            words = ["pip", *[w for w in words[3:] if w != "-q"]]
        found.append(["python" if w == "python3" else w for w in words])
    return found


def test_the_readme_has_two_set_up_paths_each_one_command_with_its_duration():
    found = paths()
    assert list(found) == ["Run the demo (any Linux x86-64 machine, no GPU, no Docker)", "Run the tests"]
    for title, text in found.items():
        assert len(re.findall(r"^```bash\n[^\n]+\n```$", text, re.M)) == 1, title
        assert re.search(r"takes\s+(about\s+)?\d+(–\d+)?\s+minutes\s+on\s+two\s+cores", text), title


def test_the_readme_test_command_is_what_ci_runs():
    [readme] = re.findall(r"^```bash\n([^\n]+)\n```$", paths()["Run the tests"], re.M)
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd ", "phase")) and line not in CI_ONLY]
    assert commands(readme) == [c for line in ci for c in commands(line)]
    assert commands(readme)[-1][:4] == ["python", "-m", "pytest", "-q"] and "--durations=25" in commands(readme)[-1]
