"""Records: the one writer (typed records, appended and fsynced), and a reader that counts every record
once or refuses (a torn last line cuts its pass short), skims log-probabilities when asked, and upgrades
schema 1 as it reads."""

import json

import pytest

from kit.core.digests import canonical_json, sha256_text
from kit.core.errors import ConfigError
from kit.record.manifest import PassInfo
from kit.record.model import EPISODE_SCHEMA, SCHEMA, BfclRecord, Gate, PinningRecord, RecordError, ResetRecord
from kit.protocols.kinds import validate_record
from kit.record.files import CutShort, RecordWriter, cut_short, read_records, require_whole
from tests.answers import answer, prompt_body

STAMP = {"run_id": "r1", "pass_id": "p1", "protocol": "grid"}


def entries(tokens: list[str]) -> list[dict]:
    return [{"token": t, "logprob": -0.5, "id": None, "top": [{"token": t, "logprob": -0.5, "id": None},
                                                               {"token": "x", "logprob": -1.0, "id": None}]}
            for t in tokens]


def write(writer: RecordWriter, tokens: list[str], prompt: str = '"logprobs":[', **raw) -> BfclRecord:
    completion = answer(entries(tokens), body=prompt_body(prompt), ids=False, raw=raw or {"content": "x"})
    return writer.answered(BfclRecord, completion, unit="e0", step=0, gate=Gate(True), arm="on", action="end_turn")


def test_roundtrip_keeps_every_record_in_order_with_what_was_sent(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        for _ in range(3):
            write(writer, ["é", "✓"], prompt="Say é✓")
    result = read_records(path)
    assert [r["seq"] for r in result] == [0, 1, 2]
    assert not result.torn_tail
    first = result.records[0]
    assert first["schema"] == SCHEMA and first["run_id"] == "r1" and first["pass_id"] == "p1"
    assert first["completion"]["text"] == "é✓" and first["output_sha256"] == sha256_text("é✓")
    assert first["request"] == {"endpoint": "/completion", "body": prompt_body("Say é✓")}
    assert first["prompt_sha256"] == sha256_text("Say é✓")
    assert first["started"] == "2026-11-30T00:00:00.000+00:00" and first["wall_seconds"] == 0.1
    assert first["gate"] == {"ok": True, "reason": None} and first["error"] is None
    assert "é✓" in path.read_text(encoding="utf-8")  # non-ASCII written as is
    for record in result.records:
        validate_record(record)


def test_a_record_needs_to_know_what_was_sent(tmp_path):
    from dataclasses import replace

    with RecordWriter(tmp_path / "p.jsonl", **STAMP) as writer, pytest.raises(RecordError, match="Completion.sent"):
        writer.answered(BfclRecord, replace(answer(entries(["a"]), body=prompt_body("p")), sent=None),
                        unit="e0", step=0, arm="on", action="end_turn")


def test_chat_prompt_hash_is_the_canonical_json_of_the_messages_sent(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say é"}]
    body = {"model": "m", "messages": messages, "stream": False, "options": {"seed": 42}}
    with RecordWriter(tmp_path / "p.jsonl", run_id="r", pass_id="c1", protocol="pinning") as writer:
        record = writer.answered(PinningRecord, answer(entries(["é"]), body=body, endpoint="/api/chat", ids=False),
                                 unit="measured", phase="cycle", role="pure", arm_index=1, measured=True,
                                 state={"state": None})
    assert record.prompt_sha256 == sha256_text(canonical_json(messages))
    assert canonical_json(messages) == json.dumps(messages, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _three(path):
    with RecordWriter(path, **STAMP) as writer:
        for token in "abc":
            write(writer, [token])
    return path.read_bytes().splitlines(keepends=True)


def test_a_torn_last_line_cuts_the_pass_short_unless_asked_to_report_it(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = _three(path)
    path.write_bytes(b"".join(lines[:2]) + lines[2][:40])  # a run killed in the middle of writing its third record
    with pytest.raises(CutShort, match=r"p\.jsonl:3 is a torn record .* cut short"):
        read_records(path)
    result = read_records(path, torn="report")
    assert [r["seq"] for r in result] == [0, 1] and result.torn_tail
    with pytest.raises(CutShort, match="never appended after one"):
        RecordWriter(path, **STAMP)


def test_appending_after_a_restart_continues_the_file_and_its_seq(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        write(writer, ["a"])
    with RecordWriter(path, **STAMP) as writer:
        assert writer.count == 1
        write(writer, ["b"])
    assert [(r["seq"], r["completion"]["text"]) for r in read_records(path)] == [(0, "a"), (1, "b")]


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines[:2] + lines[1:], r"p\.jsonl:3 repeats seq 1 of pass 'p1' \(first at line 2\)"),
    (lambda lines: lines[:1] + lines[2:], r"p\.jsonl:2 has seq 2 where 1 was due: 1 record\(s\) of pass 'p1'"),
    (lambda lines: [lines[1], lines[0], lines[2]], r"p\.jsonl:1 has seq 1 where 0 was due"),
    (lambda lines: lines + [lines[0]], r"p\.jsonl:4 repeats seq 0"),
    (lambda lines: lines[:2] + [lines[2].replace(b'"pass_id":"p1"', b'"pass_id":"p9"')],
     r"p\.jsonl:3 is a record of pass 'p9' in the file of pass 'p1'"),
    (lambda lines: lines[:2] + [lines[2].replace(b'"seq":2', b'"seq":true')], r"p\.jsonl:3 has seq True"),
])
def test_every_record_is_counted_once_or_the_file_is_refused_naming_the_line(tmp_path, edit, message):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join(edit(_three(path))))
    with pytest.raises(ConfigError, match=message):
        read_records(path)


@pytest.mark.parametrize("logprobs", [True, False], ids=["full", "skimmed"])
@pytest.mark.parametrize("forge, message", [
    (lambda line: line.replace(b'"text":"ab"', b'"text":"ac"'),
     r"p\.jsonl:2: output_sha256 [0-9a-f]{12}… is not the sha256 of its completion\.text \(the record was changed"),
    (lambda line: line.replace(b'"prompt":"Say ab"', b'"prompt":"Say ac"'),
     r"p\.jsonl:2: prompt_sha256 [0-9a-f]{12}… is not the sha256 of the prompt of its request\.body"),
    (lambda line: line.replace(sha256_text("ab").encode(), sha256_text("ac").encode()),
     r"p\.jsonl:2: output_sha256 "),
], ids=["text", "prompt", "digest"])
def test_a_record_whose_text_no_longer_matches_its_digests_is_refused(tmp_path, forge, message, logprobs):
    """A forged record (its text, its prompt or a digest changed after it was written) never reads."""
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        for _ in range(3):
            write(writer, ["a", "b"], prompt="Say ab")
    read_records(path, logprobs=logprobs)  # the untouched file reads
    lines = path.read_bytes().splitlines(keepends=True)
    forged = forge(lines[1])
    assert forged != lines[1]
    path.write_bytes(lines[0] + forged + lines[2])
    with pytest.raises(ConfigError, match=message):
        read_records(path, logprobs=logprobs)


def test_an_imported_records_text_is_checked_against_its_digest_and_a_hash_only_record_is_taken_as_it_is(tmp_path):
    path = tmp_path / "calls.jsonl"
    call = {"schema": SCHEMA, "run_id": "r", "pass_id": "calls", "protocol": "harness", "prompt_sha256": "f" * 64,
            "text": "hello", "output_sha256": sha256_text("hello")}
    hash_only = {**call, "seq": 1, "text": None, "output_sha256": "0" * 64}
    path.write_text(json.dumps({**call, "seq": 0}) + "\n" + json.dumps(hash_only) + "\n")
    assert len(read_records(path).records) == 2
    path.write_text(json.dumps({**call, "seq": 0, "text": "hellO"}) + "\n")
    with pytest.raises(ConfigError, match=r"calls\.jsonl:1: output_sha256 .* its text "):
        read_records(path)


def test_an_episode_listed_twice_is_refused(tmp_path):
    path = tmp_path / "p1.episodes.jsonl"
    line = {"schema": EPISODE_SCHEMA, "run_id": "r", "pass_id": "p1", "protocol": "grid", "unit": "ep_3"}
    path.write_text("".join(json.dumps({**line, "unit": unit}) + "\n" for unit in ("ep_3", "ep_4", "ep_3")))
    with pytest.raises(ConfigError, match=r"episodes\.jsonl:3 lists episode 'ep_3' again \(first at line 1\)"):
        read_records(path)


def test_a_pass_is_cut_short_when_its_file_is_torn_missing_or_short_of_the_manifests_count(tmp_path):
    lines = _three(tmp_path / "records" / "p1.jsonl")
    passes = {name: PassInfo(status="OK", file=f"records/{name}.jsonl", records=3)
              for name in ("whole", "torn", "short", "missing", "running")}
    passes["running"].status = "running"  # not ended: resume redoes it anyway, not "cut short"
    (tmp_path / "records" / "whole.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "records" / "torn.jsonl").write_bytes(b"".join(lines[:2]) + lines[2][:-9])
    (tmp_path / "records" / "short.jsonl").write_bytes(b"".join(lines[:2]))
    assert cut_short(tmp_path, passes) == {
        "torn": "records/torn.jsonl ends inside a record (line 3 is torn)",
        "short": "records/short.jsonl holds 2 of the 3 records the manifest counts",
        "missing": "its records file records/missing.jsonl is missing"}
    with pytest.raises(CutShort, match=r"has 3 pass\(es\) cut short \(pass torn: .*; run `kit resume"):
        require_whole(tmp_path, passes)
    require_whole(tmp_path, {"whole": passes["whole"]})
    with pytest.raises(ConfigError, match=r"whole\.jsonl holds 3 records but its pass whole ended with 2"):
        cut_short(tmp_path, {"whole": passes["whole"].model_copy(update={"records": 2})})


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


# token strings that hold the very bytes the skimming reader looks for, and brackets, quotes, backslashes
TRICKY = ['"logprobs":[', '],"finish_reason":', "[[", "]", '\\"', "\\", "é✓", '{"a":[1]}', "null"]


def test_skimmed_reading_equals_full_reading_without_logprobs(tmp_path, monkeypatch):
    import kit.record.files as records

    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        write(writer, TRICKY)
        write(writer, ["plain"])
        write(writer, [])
    full = read_records(path).records
    for record in full:
        record["completion"]["logprobs"] = None

    def refuse(line):  # the fallback parser must not be needed for records the kit writes
        raise AssertionError("skimming fell back to a full parse")

    monkeypatch.setattr(records, "_loads", refuse)
    assert read_records(path, logprobs=False).records == full


@pytest.mark.parametrize("raw", [
    {"logprobs": [{"token": "a", "logprob": -1.0}], "done_reason": "stop"},  # an engine echo that disagrees, kept
    {"choices": [{"logprobs": {"tokens": ["a"]}, "finish_reason": "stop"}]},  # a second finish_reason
])
def test_records_the_skimmer_cannot_cut_safely_are_read_in_full(tmp_path, raw):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        write(writer, TRICKY, **raw)
        write(writer, ["a"], **raw)
    full = read_records(path).records
    for record in full:
        record["completion"]["logprobs"] = None
    assert read_records(path, logprobs=False).records == full


def test_completion_writes_logprobs_right_before_finish_reason():
    """The skimming reader relies on this order of the normalized completion's fields (see kit.record.files)."""
    from kit.record.completion import NORMALIZED_FIELDS

    assert NORMALIZED_FIELDS[NORMALIZED_FIELDS.index("logprobs") + 1] == "finish_reason"


def test_episode_summaries_and_reset_records_fit_their_models(tmp_path):
    from kit.record.model import EpisodeSummary

    path = tmp_path / "s1.jsonl"
    with RecordWriter(path, run_id="r", pass_id="s1", protocol="reset") as writer:
        writer.answered(ResetRecord, answer(entries(["4"]), body=prompt_body("2+2?"), ids=False), unit="i0", step=0,
                        gate=Gate(False, "warm: 0 cached tokens"), reference="4", phase="warm", phase_index=1,
                        expect="warm")
        writer.write(EpisodeSummary(run_id="r", pass_id="on1", protocol="grid", arm="on", unit="e0", order_index=0,
                                    requests=2, outcome="completed", wall_seconds=1.5, score={"valid": True}))
    reset, episode = read_records(path).records
    assert validate_record(reset).gate == Gate(False, "warm: 0 cached tokens")
    assert episode["schema"] == "kit.episode/1" and episode["sentinels"] == 0


def test_a_schema_1_chat_record_gets_the_schema_2_prompt_hash_and_keeps_the_old_one(tmp_path):
    messages = [{"role": "user", "content": "Say é"}]
    old_hash = sha256_text(repr([(m["role"], m["content"]) for m in messages]))  # what kit.record/1 hashed
    line = {"schema": "kit.record/1", "run_id": "r", "pass_id": "c1", "protocol": "pinning", "phase": "cycle",
            "role": "pure", "arm_index": 1, "seq": 0, "measured": True, "prompt_sha256": old_hash,
            "request": {"endpoint": "/api/chat", "body": {"model": "m", "messages": messages}},
            "completion": {"text": "é", "token_ids": None, "tokens": ["é"], "logprobs": [], "finish_reason": "stop",
                           "cached_tokens": None, "prompt_tokens": 9, "prefill_tokens": None, "prefill_ms": 5.0,
                           "decode_tokens": 1, "decode_ms": 2.0, "outcome": "ok"},
            "raw": {}, "raw_dropped": {}, "output_sha256": sha256_text("é"), "state": {"state": "full_eval"},
            "started": "2026-11-30T00:00:00.000+00:00", "wall_seconds": 0.2, "error": None}
    path = tmp_path / "c1.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (record,) = read_records(path).records
    assert record["schema"] == SCHEMA and record["unit"] == "measured" and record["gate"] is None
    assert record["prompt_sha256"] == sha256_text(canonical_json(messages))
    assert record["legacy"] == {"schema": "kit.record/1", "prompt_sha256": old_hash}
    assert record["started"] == line["started"] and record["wall_seconds"] == 0.2  # only grid passes lose them
    validate_record(record)
