"""`kit replay`: a demo bundle replayed on the machine that made it is byte-identical request by request
and value by value; replayed on the other CPU backend, the difference is named and what changed is
measured; runs that cannot be replayed faithfully are refused in one line before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.bundle.writer import write_bundle
from kit.launch.cpu import cpu_backend
from kit.launch.llamacpp import embedded
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

V1_DEMO = Path(__file__).resolve().parent / "fixtures" / "records_v1" / "demo-20261201-070851"


@pytest.fixture(scope="module")
def demo_bundle(shared_demo_bundle) -> tuple[Path, str]:
    """The session's demo bundle (tests/shared_runs.py: 2 items x 2 sessions, 8 tokens) and its CPU backend."""
    return shared_demo_bundle.path, shared_demo_bundle.cpu_backend


def _replayed(out: Path) -> tuple[dict, dict]:
    (run_dir,) = out.iterdir()
    return (json.loads((run_dir / "replay" / "comparison.json").read_text()),
            json.loads((run_dir / "manifest.json").read_text()))


@pytest.mark.engine
def test_a_demo_bundle_replayed_here_is_byte_identical(demo_bundle, tmp_path):
    bundle, _ = demo_bundle
    done = kit("replay", str(bundle), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "16/16 requests byte-identical; every verdict identical; same engine build" in done.stdout
    comparison, manifest = _replayed(tmp_path)
    assert (comparison["requests_identical"], comparison["requests"]) == (16, 16)
    assert comparison["values_compared"] > 0 and comparison["values_differ"] == [] and comparison["differences"] == []
    assert [p["first_difference"] for p in comparison["passes"]] == [None, None]
    assert manifest["replay_of"]["source"] == str(bundle) and manifest["status"] == "finished"


@pytest.mark.engine
def test_a_replay_on_the_other_cpu_backend_names_the_difference_and_measures_what_changed(demo_bundle, tmp_path):
    bundle, recorded = demo_bundle
    other = "portable" if recorded == "wheel" else "wheel"
    if cpu_backend.missing(other, cpu_backend.cpu_flags()):
        pytest.skip(f"the {other} CPU backend cannot run on this CPU")
    done = kit("replay", str(bundle), "--out", str(tmp_path), "--cpu-backend", other)
    assert done.returncode == 0, done.stderr
    comparison, manifest = _replayed(tmp_path)
    (line,) = [d for d in comparison["differences"] if d.startswith("CPU backend:")]
    assert line.startswith(f"CPU backend: {recorded} (libggml-cpu sha256 ") and f"-> {other} (" in line
    assert manifest["provenance"]["cpu_backend"]["name"] == other
    identical, total = comparison["requests_identical"], comparison["requests"]
    assert total == 16 and 0 <= identical <= 16
    assert comparison["summary"].startswith(f"{identical}/16 requests byte-identical") and "different CPU backend" in \
        comparison["summary"]
    assert all((p["first_difference"] is None) == (p["identical"] == p["requests"][0]) for p in comparison["passes"])


def _folder(tmp_path: Path, **changes) -> Path:
    run_dir = shutil.copytree(V1_DEMO, tmp_path / "run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            manifest[section][field] = value
        else:
            manifest[section] = value
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


@pytest.mark.parametrize("changes, needle", [
    ({"options__engine_url": "http://127.0.0.1:9"}, "ran against an engine reached by URL"),
    ({"engine__model_sha256": "ab" * 32}, "the model the run served (sha256 abababababab…"),
    ({"options__server_bin": "/nowhere/llama-server"}, "ran the server binary /nowhere/llama-server, which is not run "
                                                       "again: a run folder or bundle never chooses a program to run"),
    ({"protocol__name": "../../kit/models/registry"}, "protocol name '../../kit/models/registry' is not a plain file"),
    ({"protocol__name": "/tmp/registry"}, "protocol name '/tmp/registry' is not a plain file name"),
    ({"options": "x"}, "manifest.json: options: Input should be a valid dictionary"),  # refused as read
    ({"engine__model_sha256": 5}, "manifest.json: engine.model_sha256: Input should be a valid string"),
    ({"workload": {"source": "gsm8k", "file": "/nowhere/test.jsonl", "sha256": "cd" * 32}},
     "the GSM8K file the run served (sha256 cdcdcdcdcdcd…) is not at /nowhere/test.jsonl"),
    ({"imported": {"from": "determinism-harness"}}, "was imported from determinism-harness"),
    ({"options__fixes": "chunk-16"}, "options.fixes is str 'chunk-16', not the list the kit records"),
    ({"options__server_args": [16]}, "options.server_args is list"),  # checked as resume checks it
    ({"options__engine_build": "11434"}, "options.engine_build is str '11434', not the int the kit records"),
    ({"protocol__sha256": "0" * 64}, "refusing to replay a run whose protocol was changed"),
    ({"status": "started"}, "is still running (status 'started')"),
])
def test_a_run_that_cannot_be_replayed_faithfully_is_refused_before_anything_is_written(tmp_path, changes, needle):
    out = tmp_path / "out"
    one_line_error(kit("replay", str(_folder(tmp_path, **changes)), "--out", str(out)), needle)
    assert not out.exists()


def test_a_different_engine_build_is_refused_unless_asked_for(tmp_path):
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    manifest = json.loads((V1_DEMO / "manifest.json").read_text())
    recorded = {**manifest["provenance"]["cpu_backend"], "library_sha256": "ef" * 32}
    run_dir = _folder(tmp_path, provenance={**manifest["provenance"], "cpu_backend": recorded})
    out = tmp_path / "out"
    one_line_error(kit("replay", str(run_dir), "--out", str(out)),
                   "different engine build: the run's wheel CPU backend has library sha256 efefefefefef…",
                   "--different-engine-ok")
    assert not out.exists()


def test_a_rebuilt_binary_of_the_recorded_build_is_refused_unless_asked_for(tmp_path, monkeypatch):
    """Replay checks an engine build as resume does (kit.run.engine_build.own_build): the same build number
    with another binary is another engine, not "the same build"."""
    from tests.launch.test_llamacpp_build import _built  # noqa: PLC0415

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    binary = _built(tmp_path / "cache", 11434)
    manifest = json.loads((V1_DEMO / "manifest.json").read_text())
    recorded = {"build": 11434, "cpu_backend": "portable", "binary_sha256": "ab" * 32}
    run_dir = _folder(tmp_path, engine={**manifest["engine"], "engine_build": recorded},
                      options={**manifest["options"], "engine_build": 11434})
    out = tmp_path / "out"
    one_line_error(kit("replay", str(run_dir), "--out", str(out), "--engine-build", "11434"),
                   "a different binary of that build", "--different-engine-ok")
    assert not out.exists() and binary.is_file()


def test_a_bundle_that_does_not_verify_is_not_replayed(tmp_path):
    run_dir = shutil.copytree(V1_DEMO, tmp_path / "run")
    (run_dir / "results" / "reset_table.json").write_text("{}")  # the results no longer match the records
    tampered = write_bundle([run_dir], tmp_path / "t.tar.gz", environ={}).path
    out = tmp_path / "out"
    one_line_error(kit("replay", str(tampered), "--out", str(out)), "does not verify (FAILED:")
    assert not out.exists()
