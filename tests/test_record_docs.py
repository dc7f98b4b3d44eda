"""docs/records.md's and docs/manifest.md's field tables are generated from the record and manifest
models: they must not drift apart. docs/records.md has a table for each record class the kind registry
names (kit.protocols.record_docs), in the registry's order."""

from kit.protocols import kinds
from kit.protocols.record_docs import render
from kit.record.manifest import RunManifest
from kit.record.docs import BEGIN, DOC, MANIFEST_BEGIN, MANIFEST_DOC, render_manifest, rewritten

FIX = "run `python -m kit.protocols.record_docs`"


def test_docs_records_md_shows_the_models_fields():
    text = DOC.read_text(encoding="utf-8")
    assert rewritten(text, BEGIN, render()) == text, f"docs/records.md is out of date: {FIX}"
    assert "| `prompt_sha256` | string | yes |" in render()


def test_docs_records_md_has_a_table_for_each_record_class_the_registry_names_and_no_other():
    rendered = render()
    named = [line.split("(`", 1)[1].split("`")[0] for line in rendered.splitlines() if " add (`" in line]
    classes = kinds.record_classes(kinds.KINDS.shipped)
    assert named == [cls.__name__ for cls in classes.values()]
    for procedure, cls in classes.items():
        assert f"### {cls.TITLE} add (`{cls.__name__}`, protocol `{procedure}`)" in rendered


def test_docs_manifest_md_shows_the_manifest_models_fields():
    text = MANIFEST_DOC.read_text(encoding="utf-8")
    assert rewritten(text, MANIFEST_BEGIN, render_manifest()) == text, f"docs/manifest.md is out of date: {FIX}"
    rendered = render_manifest()
    assert "| `passes` | object of `PassInfo` by key | the passes run, by pass id |" in rendered
    assert "| `from` | string or null |" in rendered  # a field written under its alias
    for name, field in RunManifest.model_fields.items():  # every top-level key, with what it means
        assert f"| `{field.alias or name}` |" in rendered and field.description
