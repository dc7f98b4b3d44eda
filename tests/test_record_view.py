"""The record as analysis reads it (kit.record.view): each field the view holds is the value the full read gives,
on the fixtures and on generated records; what the full read refuses, the view refuses, with the same words; and
a prompt checked once for a run is not taken on trust for another prompt that claims its digest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.core.digests import canonical_json, sha256_text
from kit.record.files import DamagedRecords, RecordWriter, logprobs_of, read_records
from kit.record.model import Gate, ResetRecord
from kit.record.view import FIELDS, CheckedPrompts
from tests.analysis.records_builder import position, write_grid_like
from tests.answers import answer, prompt_body

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures"
STAMP = {"run_id": "r1", "pass_id": "p1", "protocol": "reset"}


def assert_same(view: dict[str, Any], full: dict[str, Any], logprobs: bool | str) -> None:
    """Each field the view holds (kit.record.view.FIELDS) is there exactly where the full record has it, with the
    full record's value; the prompt was read for its digest only."""
    for key in FIELDS[""] - {"request", "completion"}:
        assert (key in view, view.get(key)) == (key in full, full.get(key)), key
    assert (view.get("request") is None) == (full.get("request") is None)
    if full.get("request") is not None:
        body, full_body = view["request"].get("body"), full["request"].get("body")
        assert (body is None) == (full_body is None)
        if full_body is not None:
            assert body == {k: v for k, v in full_body.items() if k in FIELDS["request.body"]}
    assert (view.get("completion") is None) == (full.get("completion") is None)
    if full.get("completion") is not None:
        completion, full_completion = view["completion"], full["completion"]
        for key in FIELDS["completion"] - {"logprobs"}:
            assert (key in completion, completion.get(key)) == (key in full_completion, full_completion.get(key))
        assert logprobs_of(completion) == (full_completion["logprobs"] if logprobs == "deferred" else None)


def assert_view_reads_as_full(path: Path) -> int:
    """Read `path` in full and through the view (log-probabilities deferred, then dropped); how many records of
    schema 2 the view read (it holds no `raw`), each matching the full read's field by field."""
    full = read_records(path).records
    viewed = set()
    for logprobs in ("deferred", False):
        view = read_records(path, logprobs, view=CheckedPrompts()).records
        assert len(view) == len(full)
        for seen, whole in zip(view, full):
            if "raw" in whole and "raw" not in seen:
                viewed.add(whole["seq"])
                assert_same(seen, whole, logprobs)
            else:  # the full read's: an episode line, or schema 1 upgraded
                assert logprobs_of(seen.get("completion") or {}) == (
                    (whole.get("completion") or {}).get("logprobs") if logprobs == "deferred" else None)
    return len(viewed)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("records_v1/*/records/*.jsonl")), ids=lambda p: p.name)
def test_schema_1_fixtures_read_through_the_view_as_the_full_read_upgrades_them(path):
    assert assert_view_reads_as_full(path) == 0  # every line is schema 1: the full read upgrades it


def test_a_grid_run_reads_through_the_view_as_in_full(tmp_path):
    episodes = {"e0": [("p0", [position(5, 0.5, 6, 3), position(7, 0.1, 8, 3)], 0), ('p"1\n', [], None)],
                "e1": [("é✓ \\u00e9", [position(1, 2.0, 2, 3)], 12)]}
    run = write_grid_like(tmp_path / "run", {"on1": {"arm": "on", "order": ["e1", "e0"], "episodes": episodes}},
                          depth=3)
    assert assert_view_reads_as_full(run / "records" / "on1.jsonl") == 3
    assert assert_view_reads_as_full(run / "records" / "on1.episodes.jsonl") == 0


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)  # orjson writes no lone surrogate
_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)  # orjson writes NaN and infinities as null
_entry = st.fixed_dictionaries({"token": _text, "logprob": _floats, "id": st.none() | st.integers(0, 2**40),
                                "top": st.lists(st.fixed_dictionaries({"token": _text, "logprob": _floats,
                                                                       "id": st.none() | st.integers(0, 2**40)}),
                                                max_size=3)})
_body = st.one_of(
    st.builds(prompt_body, _text, n_probs=st.integers(0, 20), cache_prompt=st.booleans()),
    st.fixed_dictionaries({"model": _text, "messages": st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user"]), "content": _text}), max_size=3),
        "logprobs": st.booleans(), "top_logprobs": st.integers(0, 20)}))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(records=st.lists(st.tuples(st.lists(_entry, max_size=4), _body, st.none() | st.integers(0, 99), _text,
                                  st.booleans(), st.sampled_from(["cold", "warm"])), min_size=1, max_size=4))
def test_generated_records_read_through_the_view_as_in_full(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("view") / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        for positions, body, cached, text, ids, phase in records:
            endpoint = "/completion" if "prompt" in body else "/v1/chat/completions"
            writer.answered(ResetRecord, answer(positions, body=body, cached=cached, text=text, ids=ids,
                                                endpoint=endpoint, raw={"content": text, "n": [1.5, None]}),
                            unit=f"i{len(text)}", step=0, gate=Gate(True), phase=phase, phase_index=0,
                            expect=phase)
    assert assert_view_reads_as_full(path) == len(records)


def _file(tmp_path: Path, prompts: list[str]) -> Path:
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        for seq, prompt in enumerate(prompts):
            writer.answered(ResetRecord, answer([position(1, 0.5, 2, 2)], body=prompt_body(prompt), raw={"content": "x"}),
                            unit=f"i{seq}", step=0, gate=Gate(True), phase="cold", phase_index=0, expect="cold")
    return path


def _refusal(path: Path, **view: Any) -> str:
    with pytest.raises(DamagedRecords) as refused:
        read_records(path, "deferred", **view)
    return str(refused.value)


@pytest.mark.parametrize("change", [(b"same prompt", b"some prompt"), (b'"text":"t1"', b'"text":"t2"'),
                                    (b'"seq":1', b'"seq":"1"'), (b'"content":"x"', b'"content":"\xff"')],
                         ids=["a prompt edited", "an output edited", "a seq of another type", "a byte not UTF-8"])
def test_the_view_refuses_what_the_full_read_refuses_in_its_words(tmp_path, change):
    path = _file(tmp_path, ["same prompt", "same prompt"])
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(*change)
    assert lines[1] != path.read_bytes().split(b"\n")[1]
    path.write_bytes(b"\n".join(lines))
    assert _refusal(path, view=CheckedPrompts()) == _refusal(path)


def test_a_prompt_checked_for_a_run_vouches_only_for_the_same_prompt(tmp_path):
    prompts = CheckedPrompts()
    first = _file(tmp_path, ["the prompt"])
    assert read_records(first, False, view=prompts).records[0]["prompt_sha256"] == sha256_text("the prompt")
    assert prompts == {sha256_text("the prompt"): (b'"the prompt"', None)}
    assert len(read_records(first, False, view=prompts).records) == 1  # the same prompt again: taken as checked
    # another file of the run claims that digest for another prompt: checked, and refused
    (tmp_path / "other").mkdir()
    forged = _file(tmp_path / "other", ["the prompt"])
    forged.write_bytes(forged.read_bytes().replace(b'"prompt":"the prompt"', b'"prompt":"the Prompt"'))
    assert "is not the sha256 of the prompt" in _refusal(forged, view=prompts)
    assert list(prompts) == [sha256_text("the prompt")]


def test_checked_prompts_past_their_budget_forget_the_earliest_and_check_it_again(tmp_path, monkeypatch):
    import kit.record.model as model  # noqa: PLC0415

    hashed: list[str] = []
    monkeypatch.setattr(model, "sha256_text", lambda text: hashed.append(text) or sha256_text(text))
    prompts = CheckedPrompts(budget=2 * len(b'"prompt a"'))  # room for two of these prompts' JSON
    path = _file(tmp_path, ["prompt a", "prompt b", "prompt c"])
    read_records(path, False, view=prompts)
    assert list(prompts) == [sha256_text("prompt b"), sha256_text("prompt c")] and prompts.held == 20
    hashed.clear()
    for prompt in ("prompt c", "prompt a"):  # c taken as checked; a, forgotten, hashed again and kept (b forgotten)
        (tmp_path / prompt).mkdir()
        read_records(_file(tmp_path / prompt, [prompt]), False, view=prompts)
    assert [text for text in hashed if text.startswith("prompt")] == ["prompt a"]
    assert list(prompts) == [sha256_text("prompt c"), sha256_text("prompt a")] and prompts.held == 20
    path.write_bytes(path.read_bytes().replace(b'"prompt":"prompt c"', b'"prompt":"prompt C"'))
    assert "is not the sha256 of the prompt" in _refusal(path, view=prompts)  # held, yet other bytes: refused
    prompts.clear()
    assert (dict(prompts), prompts.held) == ({}, 0)


def test_a_prompt_checked_in_one_run_serves_the_others_an_analysis_reads_and_is_forgotten_after(tmp_path, monkeypatch):
    from kit.analysis import collect, findings  # noqa: PLC0415
    from kit.record.manifest import Manifest  # noqa: PLC0415

    import kit.record.model as model  # noqa: PLC0415

    hashed: list[str] = []
    monkeypatch.setattr(model, "sha256_text", lambda text: hashed.append(text) or sha256_text(text))
    episodes = {"a": [("shared prompt", [position(11, 2.0, 12, 2)], 0)]}
    runs = []
    for name in ("grid-one", "grid-two"):  # two runs whose passes send the same prompt
        write_grid_like(tmp_path / name, {"on1": {"arm": "on", "order": ["a"], "episodes": episodes},
                                          "off1": {"arm": "off", "order": ["a"], "episodes": episodes}}, depth=2)
        runs.append(collect.RunFolder(tmp_path / name, Manifest.load(tmp_path / name).run, "grid"))
    for run in runs:
        run.ok_passes = dict(run.manifest.passes)
        with run.reading({"on1": False, "off1": False}):
            assert run.records("records/on1.jsonl", False)[0]["prompt_sha256"] == sha256_text("shared prompt")
    assert hashed.count("shared prompt") == 1 and list(collect.checked_prompts) == [sha256_text("shared prompt")]
    findings.compute([tmp_path / "grid-one"], findings.Settings(block_bootstrap_replicates=20, cluster_replicates=20,
                                                                sweep_replicates=20, workers=1))
    assert (dict(collect.checked_prompts), collect.checked_prompts.held) == ({}, 0)  # forgotten when compute ends


def test_a_chat_prompt_is_checked_on_its_canonical_json(tmp_path):
    messages = [{"role": "user", "content": "é \"q\""}]
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        writer.answered(ResetRecord, answer([position(1, 0.5, 2, 2)], body={"model": "m", "messages": messages},
                                            endpoint="/v1/chat/completions"),
                        unit="i", step=0, gate=Gate(True), phase="cold", phase_index=0, expect="cold")
    (record,) = read_records(path, False, view=CheckedPrompts()).records
    assert record["prompt_sha256"] == sha256_text(canonical_json(messages)) and "messages" not in record["request"]["body"]
    path.write_bytes(path.read_bytes().replace(b'\\"q\\"', b'\\"Q\\"'))
    refused = _refusal(path, view=CheckedPrompts())
    assert "is not the sha256 of the prompt" in refused and refused == _refusal(path)


# A completion's `logprobs` array as the mechanism reads it (kit.record.view.positions, through
# kit.protocols.passes.Margins): (token key, top-two margin) of each entry as the full parse gives them.
LEAN = [b'[{"token":" a","logprob":-0.5,"id":7,"top":[{"token":" a","logprob":-0.5,"id":7},'
        b'{"token":" b","logprob":-1.25,"id":8},{"token":" c","logprob":-3.0,"id":9}]}]',
        b'[{"token":"x","top":[{"logprob":-2},{"logprob":-1}],"extra":{"nested":[1,2]}}]',  # ints, no id
        b'[{"token":"x","id":null,"top":null},{"token":"y","id":"s","top":[]}]',  # no alternatives
        b'[{"token":"\xc3\xa9","id":3,"id":4,"top":[{"logprob":-0.1},{"logprob":-0.1}]}]',  # a repeated key
        b'[]']
FULL_ONLY = [b'[{"token":"x","top":[{"logprob":NaN},{"logprob":-1}]}]',  # json's NaN
             b'[{"token":"x","top":[{"logprob":true},{"logprob":-1}]}]',  # a bool: float() of it
             b'[{"id":5,"top":[{"logprob":-1},{"logprob":-2}]}]',  # no token, an id
             b'[{"token":"x","top":[{"logprob":"-1.5"},{"logprob":-2}]}]',  # a string float() reads
             b'[{"token":"x","top":{"logprob":-1}}]']  # alternatives that are not an array


def _margins(raw: bytes, deferred: bool) -> list | str:
    """The margins of the array, read deferred or parsed in full first; or the error the read meets."""
    from kit.protocols.passes import Margins  # noqa: PLC0415
    from kit.record.files import DeferredLogprobs, _loads  # noqa: PLC0415

    try:
        return list(Margins(DeferredLogprobs(raw, "f:1") if deferred else _loads(raw)))
    except Exception as exc:  # noqa: BLE001 - the same error either way (an array whose alternatives are no array)
        return f"{type(exc).__name__}: {exc}"


def _same(a: list | str, b: list | str) -> bool:
    def shown(margins: list | str) -> Any:
        return margins if isinstance(margins, str) else [(k, repr(m)) for k, m in margins]  # repr: NaN equals NaN
    return shown(a) == shown(b)


@pytest.mark.parametrize("raw", LEAN + FULL_ONLY)
def test_the_mechanisms_lean_decode_gives_the_full_parses_margins(raw):
    from kit.record.view import positions  # noqa: PLC0415

    assert (positions(raw) is not None) == (raw in LEAN)  # the lean decode is taken where it fits, and only there
    assert _same(_margins(raw, deferred=True), _margins(raw, deferred=False))


@pytest.mark.parametrize("raw", [b'[{"token":"x","top":[{"logprob":-1}', b'[{"token":"\xff","top":[]}]'],
                         ids=["cut", "not UTF-8"])
def test_an_array_the_lean_decode_cannot_read_is_refused_as_the_full_parse_refuses_it(raw):
    from kit.protocols.passes import Margins  # noqa: PLC0415
    from kit.record.files import DeferredLogprobs  # noqa: PLC0415
    from kit.record.view import positions  # noqa: PLC0415

    assert positions(raw) is None
    with pytest.raises(DamagedRecords) as refused:
        list(Margins(DeferredLogprobs(raw, "f:1")))
    with pytest.raises(DamagedRecords) as full:
        DeferredLogprobs(raw, "f:1").load()
    assert str(refused.value) == str(full.value)


def test_paired_margins_decode_the_same_bytes_once_and_otherwise_each_side():
    from kit.protocols.passes import Margins  # noqa: PLC0415
    from kit.record.files import DeferredLogprobs  # noqa: PLC0415

    hit, recompute = Margins(DeferredLogprobs(LEAN[0], "f:1")), Margins(DeferredLogprobs(LEAN[0], "f:2"))
    hit.pair(recompute)
    assert hit.entries is recompute.entries and _same(list(hit), _margins(LEAN[0], deferred=False))
    for other in (LEAN[1], FULL_ONLY[0]):  # another array: each side its own, through the full parse where needed
        hit, recompute = Margins(DeferredLogprobs(LEAN[0], "f:1")), Margins(DeferredLogprobs(other, "f:2"))
        hit.pair(recompute)
        assert hit.entries is not recompute.entries
        assert _same(list(hit), _margins(LEAN[0], False)) and _same(list(recompute), _margins(other, False))
