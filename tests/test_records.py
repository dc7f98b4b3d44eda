"""Records: append + fsync writer, and a reader that tolerates (and reports) a torn last line."""

import json

import pytest

from kit.errors import ConfigError
from kit.records import SCHEMA, RecordWriter, prompt_sha256, read_records


def test_roundtrip_keeps_every_record_in_order(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path) as writer:
        for seq in range(3):
            writer.write({"seq": seq, "text": "é✓"})
    result = read_records(path)
    assert [r["seq"] for r in result] == [0, 1, 2]
    assert all(r["schema"] == SCHEMA for r in result.records)
    assert result.records[0]["text"] == "é✓"
    assert not result.torn_tail


def test_torn_last_line_is_reported_and_skipped(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path) as writer:
        writer.write({"seq": 0})
        writer.write({"seq": 1})
    with path.open("a") as fh:  # a run killed in the middle of writing its third record
        fh.write('{"schema": "kit.record/1", "seq": 2, "comp')
    result = read_records(path)
    assert [r["seq"] for r in result] == [0, 1]
    assert result.torn_tail


def test_appending_after_a_restart_continues_the_file(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path) as writer:
        writer.write({"seq": 0})
    with RecordWriter(path) as writer:
        writer.write({"seq": 1})
    assert [r["seq"] for r in read_records(path)] == [0, 1]


def test_a_damaged_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"schema": SCHEMA, "seq": 0}) + "\nnot json\n" + json.dumps({"schema": SCHEMA}) + "\n")
    with pytest.raises(ConfigError, match=r"p\.jsonl:2 is not a valid record"):
        read_records(path)


def test_a_record_from_another_schema_is_refused(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"schema": "kit.record/99"}) + "\n")
    with pytest.raises(ConfigError, match="kit.record/99"):
        read_records(path)


def test_prompt_hash_is_sha256_of_utf8_bytes():
    assert prompt_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
