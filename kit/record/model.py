"""The record: one request the kit sent and what came back, typed (schema `kit.record/2`).

A `RequestRecord` holds what every record has; each procedure's records add their own fields
(`ResetRecord`, `BfclRecord`, `PinningRecord`). `answered()` is the one way a record is made from an
engine's answer: `started` is when the request was sent, `wall_seconds` how long the answer took
(both from `Completion.sent`), `request` the exact endpoint and body sent, `prompt_sha256` the sha256
of the exact prompt bytes sent, `completion` the normalized answer and `raw` the engine's response less
the echoes that agree with the record (kit.record.raw_echo). A BFCL pass also writes one `EpisodeSummary`
per episode. Files of records are written and read by kit.record.files; records of `kit.record/1` are
upgraded on reading (kit.record.v1).

`protocol` names the procedure (and so the record class: kit.protocols.kinds.record_classes, from the kind
registry); `protocol_name` and `protocol_kind` say which protocol file and which kind ran it (a `sweep` pass
of `dequant-cpu` writes `grid` records). Records written before those two fields read with both null.

Which fields are required: every record, whoever made it, has `schema`, `run_id`, `pass_id`,
`protocol`, `seq` and `prompt_sha256`. The rest are optional in the model so that records imported
from another harness (hashes and text, no request body) and hash-only records of a live proxy fit it
too; the kit itself always writes `request`, `completion`, `output_sha256`, `raw`, `raw_dropped`,
`started` and `wall_seconds`. docs/records.md's field tables are generated from these classes
(kit.record.docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from kit.core.digests import sha256_text
from kit.record.completion import Completion, NormalizedCompletion, prompt_text
from kit.record.completion import documented as _field
from kit.record.raw_echo import record_raw

SCHEMA = "kit.record/2"
EPISODE_SCHEMA = "kit.episode/1"


@dataclass(frozen=True)
class RequestSent:
    """`request`: what the engine client sent."""

    endpoint: str = _field("the path the request was POSTed to (e.g. `/completion`, `/api/chat`)")
    body: dict[str, Any] = _field("the exact JSON body sent (prompt or chat messages, `seed`, token limit, top-k, "
                                  "cache switch)")


@dataclass(frozen=True)
class Gate:
    """`gate`: did the telemetry show the cache state the request had to show?"""

    ok: bool = _field("true when it did")
    reason: str | None = _field("why not (null when `ok`)", None)


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """One request and its answer: the fields every record has."""

    # a procedure's records, as the heading of their table in docs/records.md names them (kit.record.docs)
    TITLE: ClassVar[str]

    schema: Literal["kit.record/2"] = _field("`kit.record/2`", SCHEMA, required=True)
    run_id: str = _field("the run (its folder name)")
    pass_id: str = _field("the pass (session) within the run")
    protocol: str = _field("the procedure that wrote it, which says its record class: `reset`, `grid` (every BFCL "
                           "pass, whatever its kind) or `pinning`; `harness` for imported records")
    protocol_name: str | None = _field(
        "the protocol's own name: its file's (`sentinel`, `dequant-cpu`, `demo`), `determinism-harness` for "
        "imported records; null in records written before it (the run's manifest has it: `protocol.name`)", None)
    protocol_kind: str | None = _field(
        "the protocol's kind, a name in kit.protocols.kinds.KINDS (`grid`, `sweep`, ...: docs/protocols.md); "
        "null in records written before it (the run's manifest has it: `protocol.kind`)", None)
    unit: str | None = _field("the item or episode served (pinning: `measured` or `other`, the prompt)", None)
    step: int | None = _field("the request's step within its unit (BFCL: request index in the episode, -1 for a "
                              "sentinel; reset: 0; pinning: null)", None)
    seq: int = _field("request index within the pass, in execution order, from 0")
    prompt_sha256: str = _field("sha256 of the exact prompt bytes sent: the UTF-8 of `request.body.prompt`, or for "
                                "a chat request of the canonical JSON of `request.body.messages` "
                                "(kit.core.digests.canonical_json)")
    request: RequestSent | None = _field("`endpoint` and the exact JSON `body` sent; always written by the kit, null "
                                         "in imported records that carry no body", None)
    completion: NormalizedCompletion | None = _field(
        "the normalized answer (see the next table); null only in hash-only records", None)
    output_sha256: str | None = _field("sha256 of `completion.text` as UTF-8: the identity of the output (a hash-only "
                                       "record has this and no completion)", None)
    raw: dict[str, Any] | None = _field("the engine's response body as received, less the fields that only echo what "
                                        "the record already holds (see `raw_dropped`)", None)
    raw_dropped: dict[str, str] | None = _field(
        "field -> sha256 of each echo left out of `raw` because it agreed with the record (see below)", None)
    started: str | None = _field("when the request was sent (ISO 8601, UTC, milliseconds); null in records upgraded "
                                 "from `kit.record/1` grid passes, which stamped it after the answer was decoded", None)
    wall_seconds: float | None = _field("seconds from sending the request until its answer was in; always written by "
                                        "the kit (null in upgraded `kit.record/1` grid records)", None)
    gate: Gate | None = _field("`ok` and `reason`: did the telemetry show the expected cache state? null where the "
                               "procedure has no per-request gate (pinning)", None)
    error: str | None = _field("null, or what went wrong with this request", None)
    legacy: dict[str, Any] | None = _field(
        "only in records upgraded from `kit.record/1` on reading: the old `schema` and the old values of fields "
        "whose meaning changed (`started` of grid passes; `prompt_sha256` of chat requests, which hashed a Python "
        "repr)", None)


@dataclass(frozen=True, kw_only=True)
class ResetRecord(RequestRecord):
    """A request of the restored-state control (`reset`, `demo`, `bridge`)."""

    TITLE = "Restored-state control records"

    reference: str | None = _field("the item's reference answer (GSM8K), if any", None)
    phase: str = _field("the phase's name (e.g. `cold`, `warm2`)")
    phase_index: int = _field("the phase's position in the protocol's phases")
    expect: Literal["cold", "warm"] = _field("the cache state the phase must show")


@dataclass(frozen=True, kw_only=True)
class LadderRecord(RequestRecord):
    """A request of the determinism ladder (`ladder`, `ladder-cpu`)."""

    TITLE = "Determinism ladder records"

    label: str = _field("what the request is in its pass: `miss` (reuse off), `hit` (reuse on after a miss), `prime` "
                        "and `aligned` (the chunk-aligned cache: a prefix recomputed whole, then the prompt), `alone`, "
                        "`batched` or `neighbour` (sent only to fill a batch); `step` is its index in the pass's "
                        "`steps` (manifest)")
    trial: int = _field("its position among its unit's requests of that label in the pass, from 0")
    boundary: int | None = _field("`prime` and `aligned`: the chunk boundary the cache must end on (tokens)", None)


@dataclass(frozen=True, kw_only=True)
class BfclRecord(RequestRecord):
    """A request of a BFCL pass (grid, sentinel, sweep, flag x order)."""

    TITLE = "BFCL pass records"

    arm: Literal["on", "off"] = _field("the pass's cache arm")
    action: str = _field("what the agent loop did with the answer: `execute`, `end_turn`, `force_quit`, "
                         "`context_overflow`, or `sentinel` for the cache-reset request before an episode")
    turn: int | None = _field("the user turn, from 0 (null for a sentinel)", None)
    turn_step: int | None = _field("the step within the turn, from 0 (null for a sentinel)", None)
    calls: list[str] | None = _field("the function calls the answer decoded to (null: it did not decode)", None)
    decode_error: str | None = _field("why the answer did not decode, if it did not", None)
    tool_results: list[str] | None = _field("what the executed calls returned", None)
    tool_refused: list[dict[str, Any]] | None = _field(
        "the calls the call policy kept from BFCL's executor (`index`, `call`, `reason`): never run; their tool "
        "result is BFCL's error text for a failed call (kit/workloads/bfcl/call_policy.py). Text the policy "
        "keeps from BFCL's decoder ends the turn with `decode_error` \"refused by the call policy: ...\"", None)
    prompt_tokens_counted: int | None = _field("prompt tokens counted with the engine's tokenizer before sending "
                                               "(they set the request's token limit)", None)


@dataclass(frozen=True, kw_only=True)
class PinningRecord(RequestRecord):
    """A call of the cache-instance protocol (`pinning`, `kit check`)."""

    TITLE = "Pinning records"

    phase: str = _field("`calibration`, `cycle`, `always_fresh` or `steady`")
    role: str = _field("the call's role in its pass (`burn_in`, `pure`, `other`, `contaminated`, `cal_fresh`, ...)")
    arm_index: int = _field("the call's index within its arm, from 1 (0 outside arms)")
    measured: bool = _field("whether it sent the measured prompt (else the different prompt)")
    state: dict[str, Any] = _field("the cache state as labelled during the run: `state`, `confidence`, `source` "
                                   "(`telemetry`, `timing` or `none`) and both labels; analysis re-derives it")


@dataclass(frozen=True, kw_only=True)
class EpisodeSummary:
    """One line of `records/<pass>.episodes.jsonl`: a BFCL episode as its pass finished it."""

    schema: Literal["kit.episode/1"] = _field("`kit.episode/1` (`kit.record/1` in folders written before it)",
                                              EPISODE_SCHEMA, required=True)
    run_id: str = _field("the run")
    pass_id: str = _field("the pass")
    protocol: str = _field("`grid`")
    protocol_name: str | None = _field("the protocol's own name, as in its records (null before it was written)", None)
    protocol_kind: str | None = _field("the protocol's kind, as in its records (null before it was written)", None)
    arm: Literal["on", "off"] = _field("the pass's cache arm")
    unit: str = _field("the episode")
    order_index: int = _field("its position in the pass's execution order")
    requests: int = _field("requests the episode took (sentinels not counted)")
    sentinels: int = _field("sentinel requests sent before it", 0)
    outcome: str = _field("`completed`, `force_quit`, `context_overflow` or `request_cap`")
    wall_seconds: float = _field("seconds the episode took")
    score: dict[str, Any] = _field("BFCL's verdict (`valid`, and what the checker said); `refused` lists the calls "
                                   "the checker got only as a failing stand-in (`turn`, `step`, `index`, `call`, "
                                   "`reason`)")


@dataclass(frozen=True, kw_only=True)
class HarnessRecord(RequestRecord):
    """A call imported from seed 002's determinism harness (`kit import determinism-harness`, protocol
    `harness`): hashes and text, no request body. Its `prompt_sha256` is the harness's `request_sha256`
    (the digest of the request it sent; its records hold no prompt text), `output_sha256` its
    `text_sha256` (checked against `text` on import), `started` its `sent_at_utc`, `wall_seconds` its
    `latency_ms` / 1000; `unit` is the harness's `cell`, and the pass holds every call in execution order."""

    TITLE = "Imported determinism-harness calls"

    source_line: int = _field("the call's line in the harness's JSONL file, from 1")
    source_file: str | None = _field("that file's name in `records/imported/` (a study of several boxes imports "
                                     "one file per box)", None)
    schedule_index: int = _field("the harness's execution order (`schedule_index`) within its file")
    box: str | None = _field("the machine that served the call: the harness's `box`, else `meta_hardware`, else "
                             "the box its run's manifest names", None)
    repeat: int | None = _field("the harness's `repeat`: the call's position among its cell's repeats", None)
    arm: str | None = _field("the arm: the harness's `meta_arm`, else the cell's `key=value` suffix (e.g. `cold` "
                             "of `prefill=cold`); null for a control", None)
    arm_key: str | None = _field("the key of that suffix (`prefill`, `timing`, `instance`, `arm`)", None)
    control: str | None = _field("`meta_control`: null for a measured call, else the control's name (`warmup`, "
                                 "`burnin`, `flusher`); controls are kept, never counted in an arm", None)
    cycle: int | None = _field("`meta_cycle`: the cycle, where the harness's mode has cycles", None)
    pre_unload_confirmed: bool | None = _field("whether the harness confirmed the model unloaded before the call "
                                               "(modes that unload)", None)
    unload_wait_ms: float | None = _field("how long it waited for that unload", None)
    prefill_ms: float | None = _field("`usage.prompt_eval_duration_ns` / 10^6: the engine's prompt time", None)
    text: str = _field("the output text as the harness recorded it")
    stop_reason: str | None = _field("the harness's `stop_reason` (`stop`, `length`, ...)", None)
    ok: bool = _field("the harness's `ok`: false for a call that failed")
    wire_sha256: str | None = _field("the harness's digest of the bytes on the wire", None)
    response_model: str | None = _field("the model the engine said answered", None)
    model_sent: str | None = _field("the model the harness asked for (`model_id_sent`)", None)
    usage: dict[str, Any] | None = _field("the harness's `usage` as recorded (Ollama's durations in ns, token "
                                          "counts)", None)
    logprob_margins: dict[str, Any] | None = _field("the harness's `logprob_margins` (margins mode: per token "
                                                    "[token, chosen, top1, top2 logprob], `min_top2_margin`, "
                                                    "`chosen_not_top1`)", None)


@dataclass(frozen=True, kw_only=True)
class WatchRecord(RequestRecord):
    """A call seen by `kit watch` (protocol `watch`): hashes, the cache state and its evidence, no body unless
    the proxy ran with `--store-bodies` (then `request` and `completion` are kept too). Its `prompt_sha256` is
    the sha256 of the prompt sent (`request.body.prompt`, or the canonical JSON of `messages`), `output_sha256`
    that of the normalized answer's text; `started` is when the proxy received the request and `wall_seconds`
    how long until the upstream's last byte. Authorization headers and URL credentials are never recorded."""

    TITLE = "Calls seen by `kit watch`"

    endpoint: str = _field("the path the client POSTed to (`/completion`, `/v1/chat/completions`, `/api/chat`, ...)")
    request_sha256: str = _field("sha256 of the canonical JSON of the endpoint and the request body less `stream`, "
                                 "`stream_options`, `cache_prompt`, `id_slot` and `keep_alive` (kit.watch.observe)")
    stream: bool = _field("whether the answer was streamed (server-sent events or JSON lines)")
    status: int | None = _field("the upstream's HTTP status; null when it did not answer")
    decoding: str | None = _field("`greedy` (temperature 0 or top-k 1), `seeded` (an integer seed) or null: only "
                                  "greedy and seeded calls raise alarms")
    tokens_sha256: str | None = _field("sha256 of the canonical JSON of the emitted token ids, where the answer "
                                       "carried them", None)
    state: dict[str, Any] = _field("the cache state that served the call: `state` (`full_eval`, `partial`, "
                                   "`full_kv`, a timing class, or null: unknown), `confidence`, `source` "
                                   "(`telemetry`, `timing` or `none`) and `detail`, the evidence in words")
    cached_tokens: int | None = _field("prompt tokens the engine reused, as it reported them (null: not said)", None)
    prompt_tokens: int | None = _field("the prompt's tokens, as the engine counted them", None)
    prefill_ms: float | None = _field("the engine's prompt time in ms, where it reports one", None)
    model: str | None = _field("the model the answer names, else the one the request asked for", None)
    engine_build: str | None = _field("the upstream's build or version, as it reported it when the proxy started",
                                      None)
    alarms: list[str] = _field("the alarms this call raised (kit.record.alarms): `state_mixture`, `determinism`, "
                               "`unexplained`, `state_jump`")
    gen_ai: dict[str, Any] = _field("the call's OpenTelemetry GenAI attributes, where a name exists "
                                    "(`gen_ai.request.model`, `gen_ai.usage.cache_read.input_tokens`, ...)")


R = TypeVar("R", bound=RequestRecord)


class RecordError(ValueError):
    """A record cannot be made: the answer does not say what was sent."""


def answered(kind: type[R], completion: Completion, **fields: Any) -> R:
    """The record of `completion` (with `Completion.sent` set by the engine) as a `kind`, with `fields`
    (run_id, pass_id, protocol, seq, unit, step, gate and the kind's own)."""
    sent = completion.sent
    if sent is None:
        raise RecordError("the completion does not say what was sent (Completion.sent is None); every engine's "
                          "complete() must set it")
    normalized = completion.normalized()
    raw, dropped = record_raw(completion.raw, sent.body, normalized)
    return kind(prompt_sha256=sent.prompt_sha256, request=RequestSent(sent.endpoint, sent.body),
                completion=normalized, output_sha256=sha256_text(normalized.text), raw=raw, raw_dropped=dropped,
                started=sent.started, wall_seconds=sent.wall_seconds, **fields)


def digest_problem(record: dict[str, Any]) -> str | None:
    """Which digest of a record (as read, schema 2) does not match the text it is the digest of, or None:
    `output_sha256` against `completion.text` (an imported record's `text`), `prompt_sha256` against the
    prompt of `request.body` (kit.record.completion.prompt_text). A digest whose text the record does not carry
    (a hash-only or imported record has no body) cannot be checked and is taken as it is."""
    digest = record.get("output_sha256")
    completion = record.get("completion")
    text = completion.get("text") if isinstance(completion, dict) else record.get("text")
    if isinstance(text, str) and digest is not None and digest != sha256_text(text):
        field = "completion.text" if isinstance(completion, dict) else "text"
        return f"output_sha256 {str(digest)[:12]}… is not the sha256 of its {field}"
    request = record.get("request")
    body = request.get("body") if isinstance(request, dict) else None
    if isinstance(body, dict):
        try:
            prompt = prompt_text(body)
        except ValueError:
            return None
        if record.get("prompt_sha256") != sha256_text(prompt):
            return f"prompt_sha256 {str(record.get('prompt_sha256'))[:12]}… is not the sha256 of the prompt of its " \
                   "request.body"
    return None


_adapters: dict[type, Any] = {}


def validate(record: dict[str, Any], kind: type[R]) -> R:
    """Check a record (as read) against the record class `kind`: the one its procedure writes
    (kit.protocols.kinds.validate_record finds it). Raises pydantic's ValidationError naming each field that
    does not fit."""
    from pydantic import TypeAdapter  # noqa: PLC0415 - only checks and schema export need pydantic here

    if kind not in _adapters:
        _adapters[kind] = TypeAdapter(kind)
    return _adapters[kind].validate_python(record)
