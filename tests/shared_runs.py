"""Real runs made once per test session (and CPU backend) and read by the tests of several modules: a small
grid on the embedded engine costs its server starts and some seconds of prompt processing on two cores (a
minute with every function doc in its prompt), and every run starts its servers, so the modules that only
read a run share it instead of each making their own. A shared run is read-only: its folder's digest is
taken when it is made and checked again when the session ends, so a test that changed it fails (a test that
needs to change a run copies it into its own tmp_path first)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kit.bundle.writer import write_bundle
from kit.run import runner
from kit.run.execution import RunResult

# One BFCL episode (the shortest first-turn prompt, trimmed to two function docs), two requests per pass,
# top-2 log-probs: the grid's own tests (tests/protocols/test_grid_run.py) recompute its table from these
# records, and `kit analyze` (tests/analysis/test_analyze_real.py) reads it as Table V and the mechanism's
# positions.
GRID = """
protocol: grid
engine: {ctx_size: 16384, cache_ram: null}
workload:
  episodes: 1
  ids: [multi_turn_base_29]      # the shortest first-turn prompt (~4.4k tokens with every function doc)
  function_docs_max: 2           # BFCL's instructions and the first two function docs: a seventh of the
                                 # system prompt (3.2k of 22.6k characters); the long prompt is
                                 # tests/workloads/bfcl/test_bfcl_engine.py's
  max_tokens_cap: 16
  max_requests_per_episode: 2
passes: [on, off, on, off]
top_logprobs: 2
seed: 7
"""


@dataclass(frozen=True)
class SharedRun:
    """A finished run shared by several tests: its result and the events it emitted while it ran."""

    result: RunResult
    events: list = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir


def folder_digest(folder: Path) -> str:
    """Every file's relative path and bytes under `folder`, in one sha256."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session")
def shared_grid_run(tmp_path_factory, embedded_binary):
    """The small grid above, run once on the real engine; its folder must be the same when the session ends."""
    folder = tmp_path_factory.mktemp("shared-grid")
    protocol = folder / "grid-tiny.yaml"
    protocol.write_text(GRID)
    events: list = []
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=folder), emit=events.append, say=lambda _: None)
    before = folder_digest(result.run_dir)
    yield SharedRun(result, events)
    assert folder_digest(result.run_dir) == before, f"a test changed the shared run folder {result.run_dir}"


@pytest.fixture(scope="session")
def shared_reset_runs(tmp_path_factory, embedded_binary) -> list[Path]:
    """Two small finished reset runs, 2 items x 2 sessions and 2 items x 1 session (12 tokens, 1k context), for
    the tests that bundle them (tests/bundle/test_real_bundle.py, via its `real_runs`) and `kit analyze`'s
    (tests/analysis/test_analyze_real.py, the first); their folders must be the same when the session ends."""
    out = tmp_path_factory.mktemp("shared-reset")
    small = {"max_tokens": 12, "engine": {"ctx_size": 1024}}
    runs = []
    for sessions in (2, 1):
        options = runner.RunOptions(protocol="reset", out=out,
                                    overrides={**small, "workload": {"items": 2}, "sessions": sessions})
        result = runner.run(options, say=lambda _: None)
        assert result.status == "finished", result.reason
        runs.append(result.run_dir)
    before = folder_digest(out)
    yield runs
    assert folder_digest(out) == before, f"a test changed a shared reset run under {out}"


@dataclass(frozen=True)
class SharedBundle:
    """A bundle of a finished run shared by several tests, and the CPU backend its run was served on."""

    path: Path
    cpu_backend: str


@pytest.fixture(scope="session")
def shared_demo_bundle(tmp_path_factory, embedded_binary):
    """A small demo run (2 items x 2 sessions, 8 tokens: 16 requests) bundled, for the tests that replay it
    (`kit replay`, tests/test_replay.py, and the launcher's, tests/tui/test_launcher_replay.py); the bundle and
    its run folder must be the same when the session ends."""
    out = tmp_path_factory.mktemp("shared-demo")
    options = runner.RunOptions(protocol="demo", out=out,
                                overrides={"workload": {"items": 2}, "sessions": 2, "max_tokens": 8})
    result = runner.run(options, say=lambda _: None)
    assert result.status == "finished", result.reason
    backend = json.loads((result.run_dir / "manifest.json").read_text())["provenance"]["cpu_backend"]["name"]
    bundle = write_bundle([result.run_dir], out / "demo.tar.gz", environ={}).path
    before = folder_digest(out)
    yield SharedBundle(bundle, backend)
    assert folder_digest(out) == before, f"a test changed the shared demo run or its bundle under {out}"
