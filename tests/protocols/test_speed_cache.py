"""The speed probe's cache (kit.protocols.speed_cache): a measurement is made once per machine, engine, model,
server settings and request, read back by the next run (which says so, and when it was measured), measured
again on demand, and a cache file that is foreign, stale, ill-typed or not a regular file is ignored with a
notice naming why. The engine here is the fake llama-server (tests/fake_engine): no engine starts."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.core.events import PlanEstimate
from kit.engines.llamacpp import LlamaCppEngine
from kit.launch.native import ServerSpec
from kit.launch.provider import EngineSession, ExternalProvider, NativeProvider
from kit.protocols import speed_cache
from kit.protocols.estimate import probe
from tests.bundle.kit_cli import run_here
from tests.fake_engine.llamacpp import LlamaCpp
from tests.test_cli_errors import one_line_error

PROMPT = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"


class Probed(NativeProvider):
    """A NativeProvider whose sessions are the fake llama-server (counted), not a process."""

    sessions = 0

    @contextmanager
    def session(self, label, log_dir):
        type(self).sessions += 1
        engine = LlamaCppEngine("http://fake:8080", transport=LlamaCpp().transport())
        try:
            yield EngineSession(engine=engine, launch={"startup_seconds": 4.5})
        finally:
            engine.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(speed_cache.FRESH, raising=False)
    Probed.sessions = 0
    return tmp_path / "cache"


def provider(tmp_path: Path, threads: int = 2, library: bytes = b"ggml", model_sha256: str = "ab" * 32) -> Probed:
    engine = tmp_path / "engine"
    engine.mkdir(exist_ok=True)
    (engine / "llama-server").write_bytes(b"server")
    (engine / "libggml.so.0").write_bytes(library)
    (engine / "README").write_text("not a library")
    spec = ServerSpec(binary=engine / "llama-server", model=tmp_path / "model.gguf", threads=threads, port=8080)
    return Probed(spec, {"model_sha256": model_sha256})


def measure(tmp_path, notices=None, **changes):
    return probe(provider(tmp_path, **changes), tmp_path, 7, PROMPT, notice=[].append if notices is None else notices.append)


def test_a_measurement_is_made_once_and_the_next_run_reads_it_saying_when_it_was_made(cache, tmp_path):
    first = measure(tmp_path)
    assert Probed.sessions == 1 and first.source["measured"].startswith("by this run")
    assert first.prefill_tokens_per_s > 0 and first.startup_seconds == 4.5
    kept = json.loads(Path(first.source["cache_file"]).read_text())
    assert kept["schema"] == "kit.speed/1" and kept["key"]["engine_files"].keys() == {"llama-server", "libggml.so.0"}
    again = measure(tmp_path)
    assert Probed.sessions == 1, "the second probe started a server"
    assert again == first and again.source["measured"].startswith("by an earlier run")
    assert again.source["measured_at"] == first.source["measured_at"]
    assert again.source["key_sha256"] == first.source["key_sha256"]


@pytest.mark.parametrize("change", [{"threads": 3}, {"library": b"another build"}, {"model_sha256": "cd" * 32}])
def test_another_engine_model_or_thread_count_is_measured_anew(cache, tmp_path, change):
    measure(tmp_path)
    assert measure(tmp_path, **change).source["measured"].startswith("by this run") and Probed.sessions == 2


def test_the_estimate_says_when_a_speed_read_from_the_cache_was_measured_and_how_to_measure_again(cache, tmp_path):
    first, again = measure(tmp_path), measure(tmp_path)
    assert PlanEstimate(60.0, 1.0, 1.0, "x", first.source).measured() == "measured here"
    said = PlanEstimate(60.0, 1.0, 1.0, "x", again.source).measured()
    assert again.source["measured_at"] in said and "earlier run" in said and "KIT_FRESH_ESTIMATE=1" in said


def test_another_prompt_or_seed_is_measured_anew(cache, tmp_path):
    probe(provider(tmp_path), tmp_path, 7, PROMPT)
    probe(provider(tmp_path), tmp_path, 8, PROMPT)
    probe(provider(tmp_path), tmp_path, 7, PROMPT + " ")
    assert Probed.sessions == 3


def test_the_port_paths_and_cache_ram_are_not_part_of_the_key():
    argv = ServerSpec(binary=Path("/a/llama-server"), model=Path("/m/x.gguf"), cache_ram=0, threads=2).argv(8123)
    args = speed_cache.server_args(argv)
    assert "8123" not in args and "/m/x.gguf" not in args and "--cache-ram" not in args and "/a/llama-server" not in args
    assert args[args.index("-t") + 1] == "2" and "-c" in args


def test_fresh_estimate_measures_again_and_rewrites_the_cache(cache, tmp_path, monkeypatch):
    first = measure(tmp_path)
    monkeypatch.setenv(speed_cache.FRESH, "1")
    second = measure(tmp_path)
    assert Probed.sessions == 2 and second.source["measured"].startswith("by this run")
    monkeypatch.setenv(speed_cache.FRESH, "0")
    assert measure(tmp_path).source["measured_at"] == second.source["measured_at"] != "" and Probed.sessions == 2
    assert first.source["cache_file"] == second.source["cache_file"]


def test_a_fresh_estimate_value_other_than_1_or_0_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(speed_cache.FRESH, "yes")
    with pytest.raises(ConfigError, match="KIT_FRESH_ESTIMATE='yes' is neither 1 nor 0"):
        speed_cache.fresh_asked()


def test_an_engine_the_kit_did_not_start_from_a_binary_is_measured_every_time(cache, tmp_path):
    assert speed_cache.key_for(ExternalProvider("http://127.0.0.1:1"), "p", 16, 7) is None
    no_model_digest = provider(tmp_path)
    no_model_digest.details = {}
    assert speed_cache.key_for(no_model_digest, "p", 16, 7) is None
    # a prompt made on the engine (a callable) without an id of what it renders: never cached
    probe(provider(tmp_path), tmp_path, 7, lambda engine: PROMPT)
    probe(provider(tmp_path), tmp_path, 7, lambda engine: PROMPT)
    assert Probed.sessions == 2 and not [p for p in (cache / "speed").glob("*") if p.name != "engine-hashes.json"]


def tamper(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def aged(days: float):
    def change(data):
        data["measured_at"] = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()
    return change


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.update(prefill_tokens_per_s=1e300), "prefill_tokens_per_s"),
    (lambda d: d.update(decode_tokens_per_s=-3.0), "decode_tokens_per_s"),
    (lambda d: d.update(prompt_tokens="12"), "prompt_tokens"),
    (lambda d: d.update(schema="kit.speed/0"), "schema"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d["key"].update(threads=99), "key.threads"),
    (lambda d: d["key"].update(model_sha256="ef" * 32), "another key"),
    (lambda d: d.update(measured_at="2026-01-01T00:00:00"), "measured_at"),  # no time zone
    (aged(-1), "in the future"),
    (aged(speed_cache.MAX_AGE_DAYS + 1), f"more than {speed_cache.MAX_AGE_DAYS} days ago"),
])
def test_a_foreign_stale_or_ill_typed_cache_file_is_ignored_loudly_and_measured_again(cache, tmp_path, change, why):
    path = Path(measure(tmp_path).source["cache_file"])
    tamper(path, change)
    notices: list[str] = []
    again = measure(tmp_path, notices)
    assert Probed.sessions == 2 and again.source["measured"].startswith("by this run")
    assert len(notices) == 1 and str(path) in notices[0] and why in notices[0] and "measuring the speed again" in notices[0]
    assert measure(tmp_path).source["measured"].startswith("by an earlier run"), "the rewritten file was not kept"


@pytest.mark.parametrize("kind", ["not json", "symlink", "folder", "huge"])
def test_a_cache_file_that_is_not_a_small_regular_json_file_is_ignored_loudly(cache, tmp_path, kind):
    path = Path(measure(tmp_path).source["cache_file"])
    path.unlink()
    if kind == "not json":
        path.write_text("{")
    elif kind == "symlink":
        secret = tmp_path / "secret"
        secret.write_text("{}")
        os.symlink(secret, path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text(" " * (speed_cache.MAX_FILE_BYTES + 1))
    notices: list[str] = []
    again = measure(tmp_path, notices)
    assert again.source["measured"].startswith("by this run") and Probed.sessions == 2
    if kind == "folder":  # the measurement cannot take its place: the run says so and goes on, its speed unkept
        assert len(notices) == 2 and "could not keep" in notices[1] and "cache_file" not in again.source
    else:
        assert len(notices) == 1
    assert str(path) in notices[0] and "ignoring the cached speed measurement" in notices[0], notices


def test_kit_run_refuses_a_fresh_estimate_value_before_writing_anything(tmp_path):
    refused = run_here("run", "demo", "--out", str(tmp_path / "out"), env={speed_cache.FRESH: "yes"})
    one_line_error(refused, "KIT_FRESH_ESTIMATE='yes' is neither 1 nor 0", "KIT_FRESH_ESTIMATE=1")
    assert not (tmp_path / "out").exists()
