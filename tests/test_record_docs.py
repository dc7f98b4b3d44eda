"""docs/records.md's and docs/manifest.md's field tables are generated from the record and manifest
models: they must not drift apart."""

from kit.record.manifest import RunManifest
from kit.record.docs import DOC, MANIFEST_BEGIN, MANIFEST_DOC, render, render_manifest, rewritten


def test_docs_records_md_shows_the_models_fields():
    text = DOC.read_text(encoding="utf-8")
    assert rewritten(text) == text, "docs/records.md is out of date: run `python -m kit.record.docs`"
    assert "| `prompt_sha256` | string | yes |" in render()


def test_docs_manifest_md_shows_the_manifest_models_fields():
    text = MANIFEST_DOC.read_text(encoding="utf-8")
    assert rewritten(text, MANIFEST_BEGIN, render_manifest()) == text, \
        "docs/manifest.md is out of date: run `python -m kit.record.docs`"
    rendered = render_manifest()
    assert "| `passes` | object of `PassInfo` by key | the passes run, by pass id |" in rendered
    assert "| `from` | string or null |" in rendered  # a field written under its alias
    for name, field in RunManifest.model_fields.items():  # every top-level key, with what it means
        assert f"| `{field.alias or name}` |" in rendered and field.description
