"""docs/records.md's field tables are generated from the record model: they must not drift apart."""

from kit.record_docs import DOC, render, rewritten


def test_docs_records_md_shows_the_models_fields():
    text = DOC.read_text(encoding="utf-8")
    assert rewritten(text) == text, "docs/records.md is out of date: run `python -m kit.record_docs`"
    assert "| `prompt_sha256` | string | yes |" in render()
