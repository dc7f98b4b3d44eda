"""Keeping secrets out of bundles.

Nothing that looks like an environment dump is copied, and every file going in is scanned for the
values of environment variables whose names look secret (HF_TOKEN, *_API_KEY, *_TOKEN, *_SECRET,
AWS_*, ...), for values assigned to such names (`NAME=value`, `"NAME": "value"`, also when this shell
does not hold the variable) and for well-known token shapes (Hugging Face, OpenAI, GitHub, AWS keys);
each hit is replaced by `[REDACTED:<name>]` and reported.

An environment variable's value is replaced wherever it appears, so only a value that could be a
secret counts (`plausible_secret`): at least MIN_SECRET_LENGTH characters, not a plain word
(`test`, `finished`, `Localhost`, `TRUE`), not only digits and punctuation (ports, addresses, versions)
and at least MIN_SECRET_ENTROPY bits of Shannon entropy per character. `API_KEY=test` or
`TOKEN=on` in the environment therefore never rewrites unrelated record fields.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Mapping

SECRET_NAME = re.compile(
    r"(^HF_TOKEN$|^HUGGING_?FACE.*TOKEN|API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_?KEY"
    r"|ACCESS_?KEY|^AWS_|^AZURE_|^GCP_|^GOOGLE_APPLICATION)", re.IGNORECASE)
# Variables whose names match but that hold no secret and whose values are common words or paths.
NOT_SECRET = {"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "TOKENIZERS_PARALLELISM"}
MIN_SECRET_LENGTH = 8
MIN_SECRET_ENTROPY = 2.0  # bits per character; "aaaaaaaa" has 0, "s3cr3t-value" about 2.9
PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+")
NO_LETTERS = re.compile(r"[^A-Za-z]*")
TOKEN_SHAPES = {
    "huggingface-token": re.compile(rb"\bhf_[A-Za-z0-9]{30,}"),
    "openai-key": re.compile(rb"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}"),
    "github-token": re.compile(rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
    "aws-access-key": re.compile(rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "private-key": re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}
# NAME=value and "NAME": "value" with an upper-case, environment-style NAME (so JSON keys like
# "bos_token" in engine responses are never touched).
ASSIGNMENTS = (re.compile(rb"\b([A-Z][A-Z0-9_]+)=([^\s\"',;&]+)"),
               re.compile(rb'"([A-Z][A-Z0-9_]+)"\s*:\s*"((?:[^"\\]|\\.)+)"'))
ENV_DUMP_NAMES = re.compile(r"(\.env$|^(env|environ|environment|printenv)([._-].*)?$)", re.IGNORECASE)


@dataclass(frozen=True)
class Redaction:
    """One secret-looking value found in a file going into a bundle (the value itself is never kept)."""

    file: str
    what: str
    count: int


def looks_secret(name: str) -> bool:
    return name.upper() not in NOT_SECRET and bool(SECRET_NAME.search(name))


def plausible_secret(value: str) -> bool:
    """Whether an environment value is long and random enough to be scrubbed wherever it appears."""
    if len(value) < MIN_SECRET_LENGTH or PLAIN_WORD.fullmatch(value) or NO_LETTERS.fullmatch(value):
        return False
    counts = [value.count(char) for char in set(value)]
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts)
    return entropy >= MIN_SECRET_ENTROPY


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """name -> value for environment variables whose names look secret and whose values could be secrets."""
    environ = os.environ if environ is None else environ
    found = {}
    for name, value in environ.items():
        if not looks_secret(name) or not plausible_secret(value):
            continue
        found[name] = value.encode("utf-8")
    return found


def is_env_dump(filename: str) -> bool:
    """True for files that look like a dump of environment variables (never bundled)."""
    return bool(ENV_DUMP_NAMES.search(filename))


def _forms(value: bytes) -> set[bytes]:
    """The ways a value can appear in a file: as is, and escaped inside a JSON string."""
    text = value.decode("utf-8", "replace")
    return {value, json.dumps(text)[1:-1].encode("utf-8"), json.dumps(text, ensure_ascii=False)[1:-1].encode()}


def scrub(data: bytes, file: str, secrets: Mapping[str, bytes]) -> tuple[bytes, list[Redaction]]:
    """The bytes with every secret value and token shape replaced, and what was replaced (by name)."""
    redactions = []
    for name, value in sorted(secrets.items(), key=lambda kv: -len(kv[1])):
        count = 0
        for form in sorted(_forms(value), key=len, reverse=True):
            count += data.count(form)
            data = data.replace(form, f"[REDACTED:{name}]".encode())
        if count:
            redactions.append(Redaction(file, name, count))
    for pattern in ASSIGNMENTS:
        data = _redact_assignments(pattern, data, file, redactions)
    for what, pattern in TOKEN_SHAPES.items():
        data, count = pattern.subn(f"[REDACTED:{what}]".encode(), data)
        if count:
            redactions.append(Redaction(file, what, count))
    return data, redactions


def _redact_assignments(pattern: re.Pattern[bytes], data: bytes, file: str, redactions: list[Redaction]) -> bytes:
    """Values assigned to secret-looking names, even when this shell does not hold that variable."""
    counts: dict[str, int] = {}

    def replace(match: re.Match[bytes]) -> bytes:
        name, value = match.group(1).decode(), match.group(2)
        if not looks_secret(name) or len(value) < MIN_SECRET_LENGTH or value.isdigit() or value.startswith(
                (b"[REDACTED", b"<redacted")):
            return match.group(0)
        counts[name] = counts.get(name, 0) + 1
        start, end = match.span(2)
        offset = match.start(0)
        whole = match.group(0)
        return whole[: start - offset] + f"[REDACTED:{name}]".encode() + whole[end - offset:]

    data = pattern.sub(replace, data)
    redactions.extend(Redaction(file, name, count) for name, count in sorted(counts.items()))
    return data
