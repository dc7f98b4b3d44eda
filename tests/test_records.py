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


def _record(tokens: list[str], **changes) -> dict:
    from kit.engines.base import Completion, TokenLogprob, TopLogprob

    entries = tuple(TokenLogprob(token=t, logprob=-0.5, id=None, top=(TopLogprob(t, -0.5), TopLogprob("x", -1.0)))
                    for t in tokens)
    completion = Completion(text="".join(tokens), token_ids=None, tokens=tuple(tokens), logprobs=entries,
                            finish_reason="stop", cached_tokens=3, prompt_tokens=9, prefill_tokens=6,
                            prefill_ms=1.0, decode_tokens=len(tokens), decode_ms=2.0).to_json()
    completion.pop("raw")
    return {"unit": "e0", "step": 0, "seq": 0, "prompt_sha256": "0" * 64,
            "request": {"endpoint": "/completion", "body": {"prompt": '"logprobs":[', "n_probs": 2}},
            "completion": completion, "raw": {"content": "x"}, **changes}


# token strings that hold the very bytes the skimming reader looks for, and brackets, quotes, backslashes
TRICKY = ['"logprobs":[', '],"finish_reason":', "[[", "]", '\\"', "\\", "é✓", '{"a":[1]}', "null"]


def test_skimmed_reading_equals_full_reading_without_logprobs(tmp_path, monkeypatch):
    import kit.records as records

    path = tmp_path / "p.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record(TRICKY))
        writer.write(_record(["plain"]))
        writer.write(_record([]))
    full = read_records(path).records
    for record in full:
        record["completion"]["logprobs"] = None

    def refuse(line):  # the fallback parser must not be needed for records the kit writes
        raise AssertionError("skimming fell back to a full parse")

    monkeypatch.setattr(records, "_loads", refuse)
    assert read_records(path, logprobs=False).records == full


@pytest.mark.parametrize("changes", [
    {"raw": {"logprobs": [{"token": "a", "logprob": -1.0}], "done_reason": "stop"}},  # an engine echo, kept
    {"raw": {"choices": [{"logprobs": {"tokens": ["a"]}, "finish_reason": "stop"}]}},  # a second finish_reason
    {"extra": {"logprobs": [1, 2], "finish_reason": None}},  # look-alikes outside the completion
])
def test_records_the_skimmer_cannot_cut_safely_are_read_in_full(tmp_path, changes):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path) as writer:
        writer.write(_record(TRICKY, **changes))
        nulled = _record(["a"], **changes)
        nulled["completion"]["logprobs"] = None
        writer.write(nulled)
    full = read_records(path).records
    for record in full:
        record["completion"]["logprobs"] = None
    assert read_records(path, logprobs=False).records == full


def test_completion_writes_logprobs_right_before_finish_reason():
    """The skimming reader relies on this order of the Completion fields (see kit.records)."""
    from dataclasses import fields

    from kit.engines.base import Completion

    names = [f.name for f in fields(Completion)]
    assert names[names.index("logprobs") + 1] == "finish_reason"
