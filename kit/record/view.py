"""The record as analysis reads it: a typed, partial view of kit.record.model's `RequestRecord`.

`kit analyze` reads gigabytes of records and uses a few of each record's fields; most of a record's bytes are its
prompt (needed only for its digest), its log-probabilities (needed only by some comparisons) and the engine's raw
answer (never). `parse` decodes one line with msgspec into `AnalysisRecord`, a dict holding only the fields below
(those the record has), each the value the full read (kit.record.files.read_records) gives it; the rest of the
line is parsed for its JSON syntax and dropped unread. The full record stays the reference: tests hold the view's
values equal to the full read's, on the fixtures and on generated records (tests/test_record_view.py).

Integrity is the full read's: the record's digests are checked as the full read checks them
(kit.record.model.digest_problem), the prompt decoded for it and then dropped, and once per run for the prompts
its passes share (`CheckedPrompts`); the whole line must be JSON. msgspec checks the UTF-8 of the strings it
decodes only, so `read_records` takes the view only for a file whose bytes are all valid UTF-8. A line the view
does not fit (another schema, a value of another type than the view's) gives None: the full read reads that line
and says what is wrong with it where something is, so that the view refuses what the full read refuses.

Log-probabilities are kept as their bytes (kit.record.files.DeferredLogprobs parses them on use) or dropped. The
mechanism reads of each log-probability record only its token, id and alternatives' log-probabilities: `positions`
decodes those (`PositionView`) in half the time of the full parse, or gives None where they do not fit the view's
types (the full parse then reads the array, and refuses it where it refuses it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

import msgspec

from kit.record.model import SCHEMA, digest_problem


class BodyView(TypedDict, total=False):
    """`request.body`: the top-k the request asked for; its prompt is read for its digest only (`parse`)."""

    prompt: msgspec.Raw  # the JSON of each, decoded only where its digest is checked (`CheckedPrompts`)
    messages: msgspec.Raw
    n_probs: Any
    logprobs: Any


class RequestSentView(TypedDict, total=False):
    body: BodyView


class CompletionView(TypedDict, total=False):
    """`completion`, less what analysis never reads (timings, token counts of prefill and decode)."""

    text: Any
    token_ids: Any
    tokens: Any
    logprobs: msgspec.Raw  # its bytes: `parse` keeps or drops them
    finish_reason: Any
    cached_tokens: Any
    prompt_tokens: Any
    outcome: Any


class AnalysisRecord(TypedDict, total=False):
    """What analysis reads of a request record (kit.record.model.RequestRecord and its procedures' fields)."""

    schema: str
    run_id: Any
    pass_id: Any
    protocol: Any
    unit: Any
    step: Any
    seq: Any
    phase: Any
    phase_index: Any
    expect: Any
    action: Any
    prompt_sha256: Any
    output_sha256: Any
    text: Any  # an imported record's output text (it has no completion)
    request: RequestSentView | None
    completion: CompletionView | None


FIELDS = {"": AnalysisRecord.__annotations__.keys(), "request": RequestSentView.__annotations__.keys(),
          "request.body": BodyView.__annotations__.keys() - {"prompt", "messages"},
          "completion": CompletionView.__annotations__.keys()}  # what a view holds, where the record has it

_DECODER = msgspec.json.Decoder(AnalysisRecord)


class TopView(msgspec.Struct, gc=False):
    """One alternative of a log-probability record (kit.record.completion.TopLogprob): its log-probability."""

    logprob: int | float  # as parsed: the reader takes float() of it, as of the full parse's value


class PositionView(msgspec.Struct, gc=False):
    """A log-probability record (kit.record.completion.TokenLogprob) as the mechanism reads it: the emitted token,
    its id (None where the engine gave none) and its alternatives (None where it has none). Neither view is
    tracked by the cyclic garbage collector (gc=False: a third faster to make): values decoded from JSON hold no
    cycle."""

    token: Any
    id: Any = None
    top: list[TopView] | None = None


_POSITIONS = msgspec.json.Decoder(list[PositionView])


def positions(raw: bytes) -> list[PositionView] | None:
    """A completion's `logprobs` array (its JSON bytes) as `PositionView`s, or None where the view does not fit
    (not UTF-8, not JSON, another shape or type, NaN): the full parse reads that array and says what is wrong."""
    if not utf8(raw):
        return None  # msgspec checks the UTF-8 of the strings it decodes only; the full parse refuses bad bytes
    try:
        return _POSITIONS.decode(raw)
    except msgspec.MsgspecError:
        return None


def utf8(data: bytes) -> bool:
    """Whether the bytes are valid UTF-8 (as every JSON text the full read accepts is)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_PROMPT = ("prompt", "messages")  # what kit.record.completion.prompt_text takes the prompt from


class CheckedPrompts(dict):
    """prompt_sha256 -> the JSON (bytes) of the `prompt` and `messages` of a request body whose prompt was found to
    have that digest. A later record that claims the digest for a body with the same JSON sends the same prompt, so
    its digest holds without hashing it again: the passes of a run send the same prompts until they diverge, and
    so do the runs of a sweep (its formats and histories). The digest of given bytes is the same whatever run they
    are in, so one of these may serve every run a process reads (kit.analysis.collect.checked_prompts). With a
    `budget` (bytes of prompts held), the earliest prompts checked are forgotten past it: checked again if met."""

    def __init__(self, budget: int | None = None):
        super().__init__()
        self.budget = budget
        self.held = 0  # bytes of the prompts held

    def check(self, record: dict[str, Any]) -> str | None:
        """kit.record.model.digest_problem of the record; its body's `prompt` and `messages` are taken out."""
        body = (record.get("request") or {}).get("body")
        sent = tuple(bytes(body.pop(k)) if k in body else None for k in _PROMPT) if body is not None else None
        claimed = record.get("prompt_sha256")
        if sent is None or not any(sent) or (isinstance(claimed, str) and self.get(claimed) == sent):
            return digest_problem(record)  # its text's digest; the prompt's holds
        assert body is not None
        for key, value in zip(_PROMPT, sent):
            if value is not None:
                body[key] = msgspec.json.decode(value)
        try:
            problem = digest_problem(record)
        finally:
            for key in _PROMPT:
                body.pop(key, None)
        if problem is None and isinstance(claimed, str):
            self._keep(claimed, sent)
        return problem

    def _keep(self, digest: str, sent: tuple[bytes | None, ...]) -> None:
        self.held += sum(len(part or b"") for part in sent) - sum(len(part or b"") for part in self.pop(digest, ()))
        self[digest] = sent
        while self.budget is not None and self.held > self.budget and len(self) > 1:
            self.held -= sum(len(part or b"") for part in self.pop(next(iter(self))))  # the earliest checked

    def clear(self) -> None:
        super().clear()
        self.held = 0


def parse(line: bytes | memoryview, deferred: Callable[[bytes], Any] | None,
          prompts: CheckedPrompts) -> tuple[dict[str, Any], str | None] | None:
    """(the view of the record in `line`, what is wrong with its digests or None: kit.record.model.digest_problem,
    checked through `prompts`), or None where the view does not fit the line (the full read reads it).
    `completion.logprobs` is None, or with `deferred` what it makes of the array's bytes
    (kit.record.files.DeferredLogprobs, which parses them on use)."""
    try:
        decoded = _DECODER.decode(line)
    except msgspec.MsgspecError:
        return None
    record = cast(dict[str, Any], decoded)  # an AnalysisRecord until its logprobs are replaced below
    if record.get("schema") != SCHEMA:
        return None  # an episode line, or an older schema the full read upgrades
    completion = record.get("completion")
    if completion is not None and "logprobs" in completion:
        raw = bytes(completion["logprobs"])
        completion["logprobs"] = deferred(raw) if deferred and raw != b"null" else None
    elif completion is not None and deferred is None:
        completion["logprobs"] = None  # as the full read without log-probabilities gives it
    try:
        return record, prompts.check(record)
    except (ValueError, TypeError):  # msgspec's DecodeError is a ValueError
        return None  # the full read says what is wrong (e.g. chat messages orjson cannot write)
