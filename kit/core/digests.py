"""Digests the kit records: sha256 of text, and of values through their canonical JSON.

- `sha256_text(text)`: hex sha256 of the text's UTF-8 bytes (prompts, outputs, chat templates).
- `sha256_base64(text)`: the same digest in base64, as a Content-Security-Policy source names a style sheet.
- `canonical_json(value)`: sorted keys, no spaces, non-ASCII kept, as orjson writes it. Strings
  are written exactly as Python's `json.dumps(..., ensure_ascii=False, separators=(",", ":"),
  sort_keys=True)` writes them; floats may be spelled differently (orjson writes 1e-05 as 0.00001).
  Records of schema `kit.record/1` took their digests over the `json.dumps` form.
- `sha256_json(value)`: a string's `sha256_text`, anything else's sha256 of its canonical JSON.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson


def _sha256(text: str) -> Any:
    return hashlib.sha256(text.encode("utf-8"))


def sha256_text(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of `text`."""
    return _sha256(text).hexdigest()


def sha256_base64(text: str) -> str:
    """Base64 of the sha256 of the UTF-8 bytes of `text` (a CSP hash source: `'sha256-<this>'`)."""
    return base64.b64encode(_sha256(text).digest()).decode("ascii")


def _canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII kept: the text a non-string value's digest is taken over."""
    return _canonical_bytes(value).decode("utf-8")


def sha256_json(value: Any) -> str:
    """A string's sha256 of its UTF-8 bytes; any other value's sha256 of its canonical JSON."""
    if isinstance(value, str):
        return sha256_text(value)
    return hashlib.sha256(_canonical_bytes(value)).hexdigest()
