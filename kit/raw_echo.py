"""The engine's raw answer as a record keeps it: everything except the fields that only echo what the
record already holds, which are replaced by their sha256 digests under `raw_dropped`.

llama-server echoes the whole prompt (`prompt`, identical to `request.body.prompt`), the emitted ids
(`tokens`, identical to `completion.token_ids`) and the log-probabilities (`completion_probabilities`,
the entries of `completion.logprobs` plus each token's UTF-8 `bytes`); Ollama echoes the
log-probabilities as `logprobs`. Keeping them doubled every record. A field is dropped only when it
agrees with the record; one that disagrees stays in `raw` verbatim, as evidence.

Digests: a string's is sha256 of its UTF-8 bytes (so `raw_dropped.prompt == prompt_sha256` shows the
echo agreed); anything else's is sha256 of `canonical_json` of the parsed value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from kit.engines.base import Completion


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII kept: the text a non-string echo's digest is taken over."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def echo_sha256(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _entry_key(entry: dict[str, Any]) -> tuple:
    """What a normalized log-probability entry keeps of an entry (raw or normalized): no `bytes`."""
    top = entry.get("top_logprobs", entry.get("top")) or ()
    return (entry.get("id"), entry.get("token", ""), entry.get("logprob"),
            tuple((t.get("id"), t.get("token", ""), t.get("logprob")) for t in top))


def _same_logprobs(raw_entries: Any, normalized: Any) -> bool:
    if not isinstance(raw_entries, list) or not isinstance(normalized, (list, tuple)) \
            or len(raw_entries) != len(normalized):
        return False
    return all(isinstance(r, dict) and _entry_key(r) == _entry_key(n) for r, n in zip(raw_entries, normalized))


def _same_tokens(raw_tokens: Any, token_ids: Any) -> bool:
    return isinstance(raw_tokens, list) and token_ids is not None and list(token_ids) == raw_tokens


# raw field -> does it agree with (request body, normalized completion)?
ECHOES: dict[str, Callable[[Any, dict[str, Any], dict[str, Any]], bool]] = {
    "prompt": lambda value, body, completion: isinstance(value, str) and value == body.get("prompt"),
    "tokens": lambda value, body, completion: _same_tokens(value, completion.get("token_ids")),
    "completion_probabilities": lambda value, body, completion: _same_logprobs(value, completion.get("logprobs")),
    "logprobs": lambda value, body, completion: _same_logprobs(value, completion.get("logprobs")),
}


def record_raw(raw: dict[str, Any], body: dict[str, Any], completion: dict[str, Any]) -> dict[str, Any]:
    """The record's `raw` (the engine's answer less its agreeing echoes) and `raw_dropped` (field -> sha256)."""
    kept: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    for key, value in raw.items():
        agrees = ECHOES.get(key)
        if agrees is not None and agrees(value, body, completion):
            dropped[key] = echo_sha256(value)
        else:
            kept[key] = value
    return {"raw": kept, "raw_dropped": dropped}


def completion_json(completion: Completion) -> dict[str, Any]:
    """The normalized answer as a record stores it (without the raw body)."""
    data = completion.to_json()
    data.pop("raw", None)
    return data


def answer_fields(completion: Completion, body: dict[str, Any]) -> dict[str, Any]:
    """A record's `completion`, `raw` and `raw_dropped` for an answer to the request `body`."""
    normalized = completion_json(completion)
    return {"completion": normalized, **record_raw(completion.raw, body, normalized)}
