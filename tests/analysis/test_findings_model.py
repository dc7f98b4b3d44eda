"""findings.json through its model (kit.analysis.findings_model): every findings file the kit has written,
including those of earlier releases in the fixtures and the bundles, reads into `Findings` and is written
back byte for byte; a file of another shape is refused in one line naming what is wrong."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kit.analysis import findings_model
from kit.analysis.findings_model import NotFindings, from_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def written_findings() -> list[tuple[str, bytes]]:
    """(name, bytes) of every findings.json in the fixtures: loose and inside bundles."""
    found = [(p.name, p.read_bytes()) for p in sorted((FIXTURES / "records_v1" / "findings").glob("*.json"))]
    for archive in sorted(FIXTURES.rglob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            found += [(f"{archive.name}:{m.name}", tar.extractfile(m).read()) for m in tar.getmembers()
                      if m.isfile() and m.name.endswith("/" + findings_model.FILE)]
    return found


WRITTEN = written_findings()


def test_the_fixtures_hold_findings_of_every_source():
    assert len(WRITTEN) >= 5  # three loose (records_v1) and two in the analysed bundle


@pytest.mark.parametrize("name, data", WRITTEN, ids=[n for n, _ in WRITTEN])
def test_each_findings_file_reads_and_writes_back_byte_for_byte(name, data):
    findings = from_json(json.loads(data))
    assert findings.text().encode() == data
    assert findings.tables and all(isinstance(t.rows, list) for t in findings.tables.values())
    assert findings.schema_ == findings_model.SCHEMA


def test_write_places_the_same_bytes(tmp_path):
    name, data = WRITTEN[0]
    from_json(json.loads(data)).write(tmp_path / findings_model.FILE)
    assert (tmp_path / findings_model.FILE).read_bytes() == data


def test_keys_the_model_does_not_declare_are_kept_in_place():
    data = json.loads(WRITTEN[0][1])
    data["runs"][0]["added_by_a_later_kit"] = {"x": [1, 2.0]}
    data["a_later_section"] = None
    assert from_json(data).to_json() == data


@pytest.mark.parametrize("data, said", [
    ({"schema": "kit.manifest/1"}, "not a kit findings file (schema 'kit.manifest/1', expected kit.findings/1)"),
    ([1], "not a kit findings file (schema 'list', expected kit.findings/1)"),
    ({"schema": "kit.findings/1", "runs": [{"run": "r"}]}, "runs.0.kind: Field required (1 problem(s))"),
    ({"schema": "kit.findings/1", "tables": {"V": {"rows": {}}}}, "tables.V.rows: Input should be a valid list"),
])
def test_a_file_of_another_shape_is_refused_in_one_line(data, said):
    with pytest.raises(NotFindings) as refused:
        from_json(data)
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    (tmp_path / "findings.json").write_text("{not json")
    with pytest.raises(NotFindings, match=r"^not valid JSON \(JSONDecodeError\)$"):
        findings_model.read(tmp_path / "findings.json")


@pytest.mark.parametrize("name,data", WRITTEN, ids=[n for n, _ in WRITTEN])
def test_every_written_table_row_reads_into_its_typed_view(name, data):
    """The rows of Tables III–VII of every findings.json the kit has written (earlier releases too) read into
    their typed views, each declared field the value as written, its JSON type kept (0 stays 0, 0.0 stays 0.0);
    the file is not touched by reading them."""
    findings = from_json(json.loads(data))
    for table, view in findings_model.ROW_VIEWS.items():
        raw = findings.table(table).rows
        for row, typed in zip(raw, view.of(findings.table(table)), strict=True):
            for field in view.model_fields:
                if field in row:
                    value = getattr(typed, field)
                    assert value == row[field] and type(value) is type(row[field]), (table, field)
    assert findings.text().encode() == data


def test_a_row_without_a_field_its_readers_need_is_refused_where_it_is_read():
    good = {"model": "m", "format": "Q4_0", "prompt_cache": "default", "order": "adjacent", "run": "g", "k": 1,
            "n": 8, "rate": 0.125, "lo": 0.02, "hi": 0.47, "added_later": {"x": 1}}
    (row,) = findings_model.TableIIIRow.of(findings_model.Table(rows=[good]))
    assert (row.k, row.rate, row.model_extra) == (1, 0.125, {"added_later": {"x": 1}})
    with pytest.raises(ValueError, match="order"):
        findings_model.TableIIIRow.of(findings_model.Table(rows=[{k: v for k, v in good.items() if k != "order"}]))
