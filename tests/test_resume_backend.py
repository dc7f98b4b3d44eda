"""One run never mixes CPU backends: `kit resume` keeps the backend the run used, refuses another, and
refuses a machine whose backend library differs from the recorded one (real engine, a tiny demo)."""

import json

import pytest

from kit.run import runner
from kit.run.resume import resume
from kit.core.errors import KitError
from kit.launch.llamacpp import embedded

pytestmark = pytest.mark.engine


@pytest.fixture
def stopped_run(tmp_path):
    """A finished two-session demo made to look cut short in its second session."""
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    options = runner.RunOptions(protocol="demo", out=tmp_path, overrides={"workload": {"items": 1}, "sessions": 2,
                                                                          "max_tokens": 8})
    result = runner.run(options, say=lambda line: None)
    assert result.status == "finished", result.reason
    path = result.run_dir / "manifest.json"
    data = json.loads(path.read_text())
    data["status"], data["reason"] = "failed", "test: cut short"
    data["passes"]["s2"]["status"] = "running"
    path.write_text(json.dumps(data))
    return result.run_dir


def test_resume_keeps_the_backend_and_refuses_another(stopped_run):
    before = (stopped_run / "manifest.json").read_text()
    recorded = json.loads(before)["provenance"]["cpu_backend"]["name"]
    other = "portable" if recorded == "wheel" else "wheel"
    with pytest.raises(KitError) as caught:
        resume(stopped_run, say=lambda line: None, cpu_backend=other)
    assert f"ran on the {recorded} CPU backend; --cpu-backend {other} would mix backends" in caught.value.line()
    assert (stopped_run / "manifest.json").read_text() == before  # nothing touched before the refusal
    result = resume(stopped_run, say=lambda line: None)
    assert result.status == "finished", result.reason
    data = json.loads((stopped_run / "manifest.json").read_text())
    assert data["provenance"]["cpu_backend"]["name"] == recorded
    assert {p["launch"]["cpu_backend"] for p in data["passes"].values()} == {recorded}


def test_resume_refuses_a_different_backend_library(stopped_run):
    path = stopped_run / "manifest.json"
    data = json.loads(path.read_text())
    data["provenance"]["cpu_backend"]["library_sha256"] = "0" * 64  # as if run on another build of it
    path.write_text(json.dumps(data))
    with pytest.raises(KitError, match="library sha256 000000000000…, but this machine's differs"):
        resume(stopped_run, say=lambda line: None)
