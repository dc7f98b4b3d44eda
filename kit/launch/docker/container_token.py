"""Which containers this kit started: a token only the kit's own cache can give.

`kit resume` removes the containers a killed kit left. It finds them by their run's label (`kit.run_id`),
but a label is text anyone can write, and the run id comes from a run folder that may be a stranger's: a
label alone never decides. Every container the kit starts also carries `kit.token`, an HMAC-SHA256 of its
run label under a key kept in the kit's cache (`KIT_CACHE_DIR/container-key`: 32 random bytes, readable by
its user only, made on first use). A container is removed only when its `kit.token` is the one this key
gives for the run's label, so neither a run folder nor another container's labels can name one (the key is
never written anywhere else; the manifest records the token label redacted).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Any

from kit.core.atomic_file import create_private
from kit.core.errors import KitError
from kit.core.paths import cache_dir
from kit.core.regular_file import read_regular

LABEL_TOKEN = "kit.token"
KEY_NAME = "container-key"
KEY_BYTES = 32
_FIX = "remove it; the kit makes a new one (containers started with the old key are then left running)"


def _key() -> bytes:
    """The cache's container key, made (whole, at once: a link of a finished file) where there is none."""
    path = cache_dir() / KEY_NAME
    if not os.path.lexists(path):
        create_private(path, secrets.token_bytes(KEY_BYTES))  # False: another kit made it meanwhile, that one is it
    key = read_regular(path, "the kit's container key", KEY_BYTES, _FIX)
    if len(key) != KEY_BYTES:
        raise KitError(f"the kit's container key {path} is {len(key)} bytes, not {KEY_BYTES}", _FIX)
    return key


def token_for(run_label: str) -> str:
    """The `kit.token` label of a container this kit starts for `run_label`."""
    return hmac.new(_key(), run_label.encode("utf-8"), hashlib.sha256).hexdigest()


def labels_of(container: Any) -> dict[str, str]:
    """A container's labels as `docker inspect` gives them (the SDK's `labels` where attrs lack them)."""
    labels = (container.attrs.get("Config") or {}).get("Labels") or getattr(container, "labels", {}) or {}
    return labels if isinstance(labels, dict) else {}


def started_here(container: Any, run_label: str) -> bool:
    """True when `container` carries this kit's token for `run_label` (compared in constant time)."""
    token = labels_of(container).get(LABEL_TOKEN)
    return isinstance(token, str) and hmac.compare_digest(token, token_for(run_label))
