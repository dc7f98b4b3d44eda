"""A run folder or bundle never chooses a program to run (docs/security.md, "Run folders and bundles"):
`kit resume` and `kit replay` start a server binary only when the user passes it (`--server-bin`), and a
run that used one recorded its sha256, which the binary passed must have. The user's own run, started with
--server-bin, resumes and replays with the same binary passed again."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from kit.run import runner
from kit.run.resume import resume
from kit.bundle.show import not_honoured
from kit.record.manifest import Manifest, parsed
from tests.stopped_run import stopped_run
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

DEMO = Path(__file__).resolve().parent / "fixtures" / "records_v1" / "demo-20261201-070851"
SIZE = {"workload": {"items": 2}, "sessions": 2, "max_tokens": 4}


def _canary(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "EXECUTED"
    program = tmp_path / "outside" / "llama-server"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\necho executed > '{marker}'\nexit 1\n")
    program.chmod(0o755)
    return program, marker




class _Provided(Exception):
    """Raised by the stand-in provider: the resume got as far as choosing its engine."""


def _stop_at_the_engine(monkeypatch) -> None:
    def provider_for(options, protocol, say):
        raise _Provided(options.server_bin)
    monkeypatch.setattr(runner, "provider_for", provider_for)


def test_resume_never_runs_the_recorded_binary_and_says_to_pass_it(tmp_path, monkeypatch):
    program, marker = _canary(tmp_path)
    run_dir = stopped_run(tmp_path, {"server_bin": str(program)})
    _stop_at_the_engine(monkeypatch)
    with pytest.raises(runner.KitError) as refused:
        resume(run_dir, say=lambda _: None)
    assert f"ran the server binary {program}, which is not run again" in refused.value.line()
    assert "pass --server-bin with your own build of that binary" in refused.value.line()
    assert not marker.exists() and Manifest.load(run_dir).run.status == "interrupted"


def test_a_binary_with_another_sha256_than_recorded_is_refused(tmp_path, monkeypatch):
    program, marker = _canary(tmp_path)
    run_dir = stopped_run(tmp_path, {"server_bin": "/their/llama-server"}, {"server_bin_sha256": "ab" * 32})
    _stop_at_the_engine(monkeypatch)
    with pytest.raises(runner.KitError, match=r"has sha256 .*, but .* ran a server binary with sha256 abababababab…"):
        resume(run_dir, say=lambda _: None, server_bin=program)
    assert not marker.exists()


def test_the_binary_with_the_recorded_sha256_is_the_one_started(tmp_path, monkeypatch):
    program, _ = _canary(tmp_path)
    digest = hashlib.sha256(program.read_bytes()).hexdigest()
    run_dir = stopped_run(tmp_path, {"server_bin": "/elsewhere/llama-server"}, {"server_bin_sha256": digest})
    _stop_at_the_engine(monkeypatch)
    with pytest.raises(_Provided) as provided:
        resume(run_dir, say=lambda _: None, server_bin=program)
    assert provided.value.args == (program,)


def test_a_run_recorded_before_the_sha256_takes_the_binary_passed_with_a_note(tmp_path, monkeypatch):
    program, _ = _canary(tmp_path)
    run_dir = stopped_run(tmp_path, {"server_bin": "/elsewhere/llama-server"})
    _stop_at_the_engine(monkeypatch)
    said = []
    with pytest.raises(_Provided) as provided:
        resume(run_dir, say=said.append, server_bin=program)
    assert provided.value.args == (program,)
    assert said == [f"note: {run_dir} did not record the sha256 of its server binary /elsewhere/llama-server; "
                    f"resuming with --server-bin {program}, as you asked"]


def test_a_binary_for_a_run_on_the_kits_own_engine_is_refused(tmp_path, monkeypatch):
    program, marker = _canary(tmp_path)
    _stop_at_the_engine(monkeypatch)
    with pytest.raises(runner.KitError, match="ran the kit's own engine, not a server binary; --server-bin would mix"):
        resume(stopped_run(tmp_path), say=lambda _: None, server_bin=program)
    assert not marker.exists()


def test_replay_of_a_run_naming_a_binary_refuses_in_one_line_and_runs_nothing(tmp_path):
    program, marker = _canary(tmp_path)
    run_dir = shutil.copytree(DEMO, tmp_path / "run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["options"]["server_bin"] = str(program)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    one_line_error(kit("replay", str(run_dir), "--out", str(tmp_path / "out")),
                   f"ran the server binary {program}, which is not run again", "--server-bin PATH",
                   "--different-engine-ok")
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert not_honoured(parsed(manifest, "manifest.json")) == [f"recorded server binary {program}: not run; replay uses your own install "
                                      "(--server-bin, compared by sha256)"]


def test_not_honoured_lists_model_paths_urls_and_odd_protocol_names_and_nothing_for_a_plain_run():
    manifest = Manifest.load(DEMO).run
    assert not_honoured(manifest) == []
    manifest.options.update(model="/their/model.gguf", engine_url="http://10.0.0.1:8080")
    manifest.protocol.name = "../../x"
    assert not_honoured(manifest) == [
        "recorded model path /their/model.gguf: not used; the model is found by its sha256 (registry or --model)",
        "recorded engine URL http://10.0.0.1:8080: not contacted; replay refuses a run against a URL",
        "protocol name '../../x': not a plain name; replay refuses it"]


@pytest.fixture
def own_binary(tmp_path, embedded_binary) -> Path:
    """A user's own llama-server build, as --server-bin names it: here a script starting the embedded one."""
    changed = {k: v for k, v in embedded_binary.env.items() if os.environ.get(k) != v}
    script = tmp_path / "bin" / "llama-server"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n" + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in changed.items())
                      + f"exec {shlex.quote(str(embedded_binary.binary))} \"$@\"\n")
    script.chmod(0o755)
    return script


@pytest.mark.engine
def test_the_users_own_run_resumes_and_replays_with_its_binary_passed_again(tmp_path, own_binary):
    result = runner.run(runner.RunOptions(protocol="demo", out=tmp_path / "runs", server_bin=own_binary,
                                          overrides=SIZE), say=lambda _: None)
    assert result.status == "finished", result.reason
    manifest = Manifest.load(result.run_dir)
    assert manifest.run.engine.server_bin_sha256 == hashlib.sha256(own_binary.read_bytes()).hexdigest()
    manifest.run.passes["s2"].status = "interrupted"  # as after a kill during s2
    manifest.finish("interrupted")

    one_line_error(kit("resume", str(result.run_dir)), "pass --server-bin", f"--server-bin {own_binary} if that is")
    resumed = kit("resume", str(result.run_dir), "--server-bin", str(own_binary))
    assert resumed.returncode == 0, resumed.stderr
    after = Manifest.load(result.run_dir).run
    assert after.status == "finished" and after.resumed[-1]["passes_redone"] == ["s2"]

    one_line_error(kit("replay", str(result.run_dir), "--out", str(tmp_path / "refused")), "--server-bin PATH")
    assert not (tmp_path / "refused").exists()
    replayed = kit("replay", str(result.run_dir), "--out", str(tmp_path / "replays"), "--server-bin", str(own_binary))
    assert replayed.returncode == 0, replayed.stderr
    (replay_dir,) = (tmp_path / "replays").iterdir()
    comparison = json.loads((replay_dir / "replay" / "comparison.json").read_text())
    assert not [d for d in comparison["differences"] if d.startswith("server binary")]
    assert comparison["requests"] == 16
