"""Records of schema `kit.record/1`, upgraded to schema 2 as they are read: every reader sees one shape.

What changed from /1 to /2, and what the upgrade does about it (the files are never rewritten):
- `schema` becomes `kit.record/2` (a BFCL pass's episode lines, which also said `kit.record/1`,
  become `kit.episode/1`); `legacy.schema` keeps the old value.
- Grid passes stamped `started` after the answer was received and decoded, and wrote no
  `wall_seconds`: `started` and `wall_seconds` become null, the old stamp moves to `legacy.started`.
- Chat requests (pinning on Ollama or an OpenAI-compatible URL) hashed a Python repr of the messages as
  `prompt_sha256`: it becomes the sha256 of the canonical JSON of `request.body.messages` (what schema 2
  hashes), the old digest moves to `legacy.prompt_sha256`.
- Fields schema 2 added get their values where the record holds them (`output_sha256` from the
  completion's text; a pinning call's `unit` from `measured`), else null.
"""

from __future__ import annotations

from typing import Any

from kit.core.digests import sha256_text
from kit.record.completion import prompt_text
from kit.record.model import EPISODE_SCHEMA, SCHEMA

V1 = "kit.record/1"
_ADDED = ("protocol_name", "protocol_kind", "unit", "step", "raw_dropped", "gate", "error", "output_sha256", "started", "wall_seconds")


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """The schema-2 form of a `kit.record/1` line (changed in place and returned)."""
    if "prompt_sha256" not in record:  # an episode summary of a BFCL pass
        record["schema"] = EPISODE_SCHEMA
        return record
    legacy: dict[str, Any] = {"schema": V1}
    record["schema"] = SCHEMA
    if record.get("protocol") == "grid":
        legacy["started"] = record.get("started")
        record["started"] = None
        record["wall_seconds"] = None
    body = (record.get("request") or {}).get("body") or {}
    if isinstance(body.get("messages"), list) and not isinstance(body.get("prompt"), str):
        legacy["prompt_sha256"] = record["prompt_sha256"]
        record["prompt_sha256"] = sha256_text(prompt_text(body))
    completion = record.get("completion")
    if "output_sha256" not in record and isinstance(completion, dict) and isinstance(completion.get("text"), str):
        record["output_sha256"] = sha256_text(completion["text"])
    if record.get("protocol") == "pinning" and "unit" not in record:
        record["unit"] = "measured" if record.get("measured") else "other"
    for key in _ADDED:
        record.setdefault(key, None)
    record["legacy"] = legacy
    return record
