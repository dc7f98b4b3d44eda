"""The engine's raw answer as a record keeps it: everything except the fields that only echo what the
record already holds, which are replaced by their sha256 digests under `raw_dropped`.

llama-server echoes the whole prompt (`prompt`, identical to `request.body.prompt`), the emitted ids
(`tokens`, identical to `completion.token_ids`) and the log-probabilities (`completion_probabilities`,
the entries of `completion.logprobs` plus each token's UTF-8 `bytes`); Ollama echoes the
log-probabilities as `logprobs`. Keeping them doubled every record. A field is dropped only when it
agrees with the record; one that disagrees stays in `raw` verbatim, as evidence.

Digests (kit.core.digests.sha256_json): a string's is sha256 of its UTF-8 bytes (so `raw_dropped.prompt ==
prompt_sha256` shows the echo agreed); anything else's is sha256 of its canonical JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kit.core.digests import sha256_json
from kit.record.completion import NormalizedCompletion, TokenLogprob


def _same_entry(raw: Any, entry: TokenLogprob) -> bool:
    """Does a raw log-probability entry carry the normalized entry's id, token, log-probability and
    alternatives (its `bytes` aside)?"""
    if not isinstance(raw, dict) or raw.get("id") != entry["id"] or raw.get("token", "") != entry["token"] \
            or raw.get("logprob") != entry["logprob"]:
        return False
    top, normalized_top = raw.get("top_logprobs") or (), entry["top"]
    if len(top) != len(normalized_top):
        return False
    for alternative, normalized in zip(top, normalized_top):
        if alternative.get("id") != normalized["id"] or alternative.get("token", "") != normalized["token"] \
                or alternative.get("logprob") != normalized["logprob"]:
            return False
    return True


def _same_logprobs(raw_entries: Any, normalized: tuple[TokenLogprob, ...] | None) -> bool:
    if not isinstance(raw_entries, list) or normalized is None or len(raw_entries) != len(normalized):
        return False
    return all(map(_same_entry, raw_entries, normalized))


def _same_tokens(raw_tokens: Any, token_ids: tuple[int, ...] | None) -> bool:
    return isinstance(raw_tokens, list) and token_ids is not None and list(token_ids) == raw_tokens


# raw field -> does it agree with (request body, normalized completion)?
ECHOES: dict[str, Callable[[Any, dict[str, Any], NormalizedCompletion], bool]] = {
    "prompt": lambda value, body, completion: isinstance(value, str) and value == body.get("prompt"),
    "tokens": lambda value, body, completion: _same_tokens(value, completion.token_ids),
    "completion_probabilities": lambda value, body, completion: _same_logprobs(value, completion.logprobs),
    "logprobs": lambda value, body, completion: _same_logprobs(value, completion.logprobs),
}


def record_raw(raw: dict[str, Any], body: dict[str, Any],
               completion: NormalizedCompletion) -> tuple[dict[str, Any], dict[str, str]]:
    """A record's `raw` (the engine's answer less its agreeing echoes) and `raw_dropped` (field -> sha256)."""
    kept: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    for key, value in raw.items():
        agrees = ECHOES.get(key)
        if agrees is not None and agrees(value, body, completion):
            dropped[key] = sha256_json(value)
        else:
            kept[key] = value
    return kept, dropped
