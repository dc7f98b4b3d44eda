"""A model download during a run says what it fetches and how far it got (issue #22.7: the first `kit demo`
downloaded its model in silence), and a cached model says nothing. The hub is replaced by the stand-in of
test_fetch (the download's byte counts come through huggingface_hub's tqdm class, as for real)."""

from __future__ import annotations

from pathlib import Path

from kit.models.fetch import ensure_model
from kit.models.progress import said


def test_a_download_is_said_in_steps_and_a_cached_model_says_nothing(fake_gguf, cache_dir, monkeypatch,
                                                                     registry_with, sha256_bytes):
    import huggingface_hub

    data = fake_gguf.read_bytes()

    def stand_in(*, repo_id, filename, revision, local_dir, tqdm_class):
        bar = tqdm_class(total=len(data))
        target = Path(local_dir) / filename
        with target.open("wb") as out:
            for start in range(0, len(data), max(1, len(data) // 20)):  # 20 chunks: every 5%
                chunk = data[start:start + max(1, len(data) // 20)]
                out.write(chunk)
                bar.update(len(chunk))
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", stand_in)
    source = {"kind": "hf", "repo": "someone/some-GGUF", "revision": "main", "filename": "Some-Q8_0.gguf"}
    registry = registry_with({"sha256": sha256_bytes(data), "sources": [source]})
    lines: list[str] = []
    ensure_model("fake-model", cache_dir=cache_dir, progress=said(lines.append), registry=registry)
    assert lines[0].startswith("downloading hf someone/some-GGUF@main:Some-Q8_0.gguf (")
    steps = [line for line in lines if line.startswith("  download ")]
    assert steps == [f"  download {p}%" for p in range(10, 101, 10)]  # every 10%, not every chunk
    assert any(line.startswith("checking the sha256 of fake.gguf") for line in lines)
    lines.clear()
    ensure_model("fake-model", cache_dir=cache_dir, progress=said(lines.append), registry=registry)
    assert lines == []  # served from the cache: nothing to say
