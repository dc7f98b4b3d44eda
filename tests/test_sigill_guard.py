"""A server that dies of SIGILL on the wheel's CPU backend, before the first record, is answered by one
line, the portable backend, and the pass started again; after a record, or when the person forced the
wheel, the run fails and says why. The dying server is a fake binary (tests/launch/fake_sigill_server.py)
because this machine's CPU runs the wheel's backend; the pass that follows runs on the real engine."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from kit.run import providers, runner
from kit.launch.cpu import sigill_guard
from kit.core.errors import EngineError, IllegalInstruction
from kit.launch.llamacpp import embedded
from kit.launch.llamacpp.embedded import EmbeddedBinary
from kit.launch.native import ServerSpec
from kit.launch.provider import NativeProvider
from kit.record.manifest import Manifest

FAKE = Path(__file__).resolve().parent / "launch" / "fake_sigill_server.py"
REAL_LOCATE = embedded.locate


def fake_wheel(mode: str, chosen_by: str = "auto"):
    """embedded.locate as on a CPU whose flags looked fine, but whose wheel backend dies of SIGILL."""
    def locate(choice="auto", build_if_needed=True, say=print, flags=None):
        real = REAL_LOCATE("wheel", say=lambda line: None)
        backend = replace(real.backend, chosen_by=chosen_by, reason="test: flags looked complete")
        return EmbeddedBinary(FAKE, {**os.environ, "FAKE_SIGILL": mode}, backend)
    return locate


@pytest.mark.parametrize("mode", ["start", "request"])
def test_native_server_reports_sigill_as_illegal_instruction(tmp_path, mode, smollm2):
    spec = ServerSpec(binary=FAKE, model=smollm2, env={**os.environ, "FAKE_SIGILL": mode})
    provider = NativeProvider(spec)
    with pytest.raises(IllegalInstruction) as caught:
        with provider.session("s1", tmp_path) as live:
            live.engine.apply_template([{"role": "user", "content": "hi"}])
    assert "SIGILL" in caught.value.line() or "illegal instruction" in caught.value.line()
    assert "\n" not in caught.value.line()


@pytest.mark.engine
@pytest.mark.cpu_backends  # the wheel's backend is played by a fake, the switch always lands on the portable one
@pytest.mark.parametrize("mode", ["start", "request"])
def test_sigill_before_the_first_record_switches_to_the_portable_backend(tmp_path, monkeypatch, mode):
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    monkeypatch.setattr(providers.embedded, "locate", fake_wheel(mode))
    said: list[str] = []
    options = runner.RunOptions(protocol="demo", out=tmp_path, overrides={"workload": {"items": 2}, "sessions": 1,
                                                                          "max_tokens": 8})
    result = runner.run(options, say=said.append)
    assert result.status == "finished", result.reason
    switch_lines = [line for line in said if "died of SIGILL" in line]
    assert len(switch_lines) == 1 and "portable" in switch_lines[0]
    data = json.loads((result.run_dir / "manifest.json").read_text())
    assert data["provenance"]["cpu_backend"]["name"] == "portable"
    assert data["provenance"]["cpu_backend"]["rebuilt_here"] is True
    assert [s["to"] for s in data["cpu_backend_switches"]] == ["portable"]
    assert data["cpu_backend_switches"][0]["from"]["name"] == "wheel"
    assert data["passes"]["s1"]["status"] == "OK" and data["passes"]["s1"]["launch"]["cpu_backend"] == "portable"
    lines = (result.run_dir / "records" / "s1.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 4  # two items x four phases, nothing from the dead server
    superseded = list((result.run_dir / "records" / "superseded").glob("s1.jsonl.*"))
    assert all(path.read_text() == "" for path in superseded)  # what moved aside held no record


def _manifest(tmp_path: Path, records: int) -> Manifest:
    run_dir = tmp_path / "run"
    (run_dir / "records").mkdir(parents=True)
    (run_dir / "records" / "s1.jsonl").write_text("".join('{"seq": %d}\n' % i for i in range(records)))
    manifest = Manifest.create(run_dir, provenance={})
    manifest.set_pass("s1", status="running", file="records/s1.jsonl")
    return manifest


def _provider(chosen_by: str = "auto") -> NativeProvider:
    real = embedded.locate("wheel", say=lambda line: None)
    return NativeProvider(ServerSpec(binary=FAKE, model=FAKE), cpu=replace(real.backend, chosen_by=chosen_by))


@pytest.fixture
def wheel_installed():
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")


def test_after_a_record_the_switch_is_refused_and_nothing_moves(tmp_path, wheel_installed):
    manifest = _manifest(tmp_path, records=3)
    with pytest.raises(EngineError) as caught:
        sigill_guard.switch(_provider(), manifest, IllegalInstruction("llama-server died of SIGILL"), print)
    assert "after 3 records" in caught.value.line() and "never mixes backends" in caught.value.line()
    assert "--cpu-backend portable" in caught.value.line()
    assert (manifest.run_dir / "records" / "s1.jsonl").read_text().count("\n") == 3
    assert "s1" in manifest.run.passes


def test_a_forced_wheel_is_not_switched(tmp_path, wheel_installed):
    with pytest.raises(EngineError, match=r"--cpu-backend wheel\).*run with --cpu-backend portable"):
        sigill_guard.switch(_provider("wheel"), _manifest(tmp_path, 0), IllegalInstruction("died of SIGILL"), print)


def test_a_users_binary_is_not_switched(tmp_path):
    provider = NativeProvider(ServerSpec(binary=FAKE, model=FAKE))
    with pytest.raises(EngineError, match="uses an instruction this CPU lacks"):
        sigill_guard.switch(provider, _manifest(tmp_path, 0), IllegalInstruction("died of SIGILL"), print)
