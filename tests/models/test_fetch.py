"""ensure_model with local sources: verification, refusal of mismatches, cache reuse, plain paths.

The Hugging Face hub cannot be reached from the test machines, so the one hf test replaces
`huggingface_hub.hf_hub_download` with a stand-in that writes into the `local_dir` it is given, the
way the real function does; everything after the download (hashing, refusal, placement) is real.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.core.errors import ConfigError, KitError
from kit.models.cli import models
from kit.models.fetch import default_cache_dir, ensure_model
from kit.models.sources import ChecksumMismatch


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "hashes.json") if folder.exists() else []


def test_file_source_is_verified_copied_then_served_from_cache(fake_gguf, cache_dir, registry_with, sha256_bytes):
    digest = sha256_bytes(fake_gguf.read_bytes())
    registry = registry_with({"sha256": digest, "size": fake_gguf.stat().st_size,
                              "sources": [{"kind": "file", "path": str(fake_gguf)}]})
    events = []
    first = ensure_model("fake-model", cache_dir=cache_dir, progress=events.append, registry=registry)
    assert first.path == cache_dir / "fake.gguf"
    assert first.source.startswith("file ") and first.name == "fake-model"
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == digest
    assert events and events[-1].done == fake_gguf.stat().st_size
    again = ensure_model("fake-model", cache_dir=cache_dir, registry=registry)
    assert again.source == "cache" and again.path == first.path
    assert _leftovers(cache_dir) == ["fake.gguf"]


def test_file_source_mismatch_is_refused_and_leaves_nothing(fake_gguf, cache_dir, registry_with, sha256_bytes):
    actual = sha256_bytes(fake_gguf.read_bytes())
    registry = registry_with({"sha256": "ab" * 32, "sources": [{"kind": "file", "path": str(fake_gguf)}]})
    with pytest.raises(ChecksumMismatch) as caught:
        ensure_model("fake-model", cache_dir=cache_dir, registry=registry)
    assert "ab" * 32 in caught.value.line() and actual in caught.value.line()
    assert _leftovers(cache_dir) == []


def test_corrupt_cached_copy_is_replaced(fake_gguf, cache_dir, registry_with, sha256_bytes):
    registry = registry_with({"sha256": sha256_bytes(fake_gguf.read_bytes()),
                              "sources": [{"kind": "file", "path": str(fake_gguf)}]})
    cache_dir.mkdir()
    (cache_dir / "fake.gguf").write_bytes(b"GGUF torn download")
    got = ensure_model("fake-model", cache_dir=cache_dir, registry=registry)
    assert got.source.startswith("file ")
    assert got.path.read_bytes() == fake_gguf.read_bytes()


def test_unavailable_source_falls_through_to_the_next(fake_gguf, cache_dir, tmp_path, registry_with, sha256_bytes):
    registry = registry_with({"sha256": sha256_bytes(fake_gguf.read_bytes()), "sources": [
        {"kind": "file", "path": str(tmp_path / "missing.gguf")},
        {"kind": "file", "path": str(fake_gguf)}]})
    assert ensure_model("fake-model", cache_dir=cache_dir, registry=registry).source == f"file {fake_gguf}"
    only_missing = registry_with({"sha256": "cd" * 32,
                                  "sources": [{"kind": "file", "path": str(tmp_path / "missing.gguf")}]})
    with pytest.raises(KitError, match="could not fetch model fake-model: cannot read"):
        ensure_model("fake-model", cache_dir=tmp_path / "other", registry=only_missing)


def test_installed_package_member_is_used_in_place(fake_gguf, cache_dir, tmp_path, monkeypatch, registry_with, sha256_bytes):
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    member = site / "fakepkg" / "model.gguf"
    member.write_bytes(fake_gguf.read_bytes())
    info = site / "fakepkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    registry = registry_with({"sha256": sha256_bytes(member.read_bytes()), "sources": [
        {"kind": "pypi-wheel", "package": "fakepkg", "version": "1.0", "wheel_sha256": "ef" * 32,
         "member": "fakepkg/model.gguf"}]})
    got = ensure_model("fake-model", cache_dir=cache_dir, registry=registry)
    assert got.source == "installed fakepkg" and got.path == member
    assert _leftovers(cache_dir) == []


def test_plain_path_is_hashed_and_matched_to_the_registry(fake_gguf, cache_dir, tmp_path, registry_with, sha256_bytes):
    digest = sha256_bytes(fake_gguf.read_bytes())
    known = ensure_model(fake_gguf, cache_dir=cache_dir, registry=registry_with({"sha256": digest}))
    assert (known.name, known.sha256, known.source) == ("fake-model", digest, "path")
    unknown = ensure_model(str(fake_gguf), cache_dir=cache_dir, registry=registry_with({"sha256": "12" * 32}))
    assert unknown.name is None and unknown.sha256 == digest
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        ensure_model(not_gguf, cache_dir=cache_dir, registry=registry_with({"sha256": digest}))
    with pytest.raises(ConfigError, match="does not exist"):
        ensure_model(tmp_path / "absent.gguf", cache_dir=cache_dir, registry=registry_with({"sha256": digest}))


def test_cache_dir_follows_kit_cache_dir(tmp_path):
    assert default_cache_dir({"KIT_CACHE_DIR": str(tmp_path)}) == tmp_path / "models"
    assert default_cache_dir({}) == Path.home() / ".cache" / "kit" / "models"


def test_hf_source_verifies_and_refuses(fake_gguf, cache_dir, monkeypatch, registry_with, sha256_bytes):
    import huggingface_hub

    calls = []

    def stand_in(*, repo_id, filename, revision, local_dir, tqdm_class):
        calls.append((repo_id, filename, revision))
        bar = tqdm_class(total=fake_gguf.stat().st_size)
        target = Path(local_dir) / filename
        target.write_bytes(fake_gguf.read_bytes())
        bar.update(fake_gguf.stat().st_size)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", stand_in)
    source = {"kind": "hf", "repo": "someone/some-GGUF", "revision": "main", "filename": "Some-Q8_0.gguf"}
    good = registry_with({"sha256": sha256_bytes(fake_gguf.read_bytes()), "sources": [source]})
    events = []
    got = ensure_model("fake-model", cache_dir=cache_dir, progress=events.append, registry=good)
    assert got.path == cache_dir / "fake.gguf" and got.source == "hf someone/some-GGUF@main:Some-Q8_0.gguf"
    assert calls == [("someone/some-GGUF", "Some-Q8_0.gguf", "main")]
    assert any(e.stage == "download" and e.done == fake_gguf.stat().st_size for e in events)
    assert _leftovers(cache_dir) == ["fake.gguf"]  # staging folder removed

    bad = registry_with({"sha256": "99" * 32, "sources": [source]})
    other = cache_dir.parent / "other-cache"
    with pytest.raises(ChecksumMismatch, match="expected 9999"):
        ensure_model("fake-model", cache_dir=other, registry=bad)
    assert not list(other.rglob("*.gguf"))


def test_cli_pull_refuses_a_mismatch_with_one_line(fake_gguf, tmp_path, sha256_bytes):
    reg = tmp_path / "reg.yaml"
    reg.write_text(
        "version: 1\nmodels:\n  fake-model:\n    file: fake.gguf\n    sha256: " + "ab" * 32 +
        "\n    quant: Q8_0\n    family: chatml\n    sources:\n      - {kind: file, path: " + str(fake_gguf) + "}\n",
        encoding="utf-8")
    result = CliRunner().invoke(models, ["pull", "fake-model", "--registry", str(reg),
                                         "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "sha256 mismatch" in lines[0] and "ab" * 32 in lines[0]
    assert not (tmp_path / "c" / "fake.gguf").exists()

    ok = reg.read_text().replace("ab" * 32, sha256_bytes(fake_gguf.read_bytes()))
    reg.write_text(ok, encoding="utf-8")
    result = CliRunner().invoke(models, ["pull", "fake-model", "--registry", str(reg),
                                         "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert sha256_bytes(fake_gguf.read_bytes()) in result.output


def test_hf_failure_message_never_contains_the_token(fake_gguf, cache_dir, monkeypatch, registry_with):
    import huggingface_hub

    secret = "hf_" + "x" * 30
    monkeypatch.setenv("HF_TOKEN", secret)

    def failing(**kwargs):
        raise RuntimeError(f"401 Unauthorized for token {secret}")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", failing)
    registry = registry_with({"sha256": "77" * 32, "sources": [
        {"kind": "hf", "repo": "org/gated", "filename": "m.gguf"}]})
    with pytest.raises(KitError) as caught:
        ensure_model("fake-model", cache_dir=cache_dir, registry=registry)
    assert "401 Unauthorized" in caught.value.line() and secret not in caught.value.line()
