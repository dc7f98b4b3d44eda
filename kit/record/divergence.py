"""Comparing emitted token sequences: identical, or where they first differ."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence


def first_difference(a: Sequence, b: Sequence) -> int | None:
    """Index of the first position where `a` and `b` differ (a length difference counts), else None."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


TOKEN_IDS, TOKEN_STRINGS = "token_ids", "token_strings"  # the two levels two passes are compared on


def comparison_level(every_request_has_ids: bool) -> str:
    """Two passes are compared on token ids where every request of both carries them (llama.cpp, vLLM with
    `return_token_ids`), else on token strings (the paper's vLLM level): never ids against strings."""
    return TOKEN_IDS if every_request_has_ids else TOKEN_STRINGS


def level_note(level: str) -> dict[str, str]:
    """What a results entry says of its comparison level: `compared_on: token_strings` where it was made on
    strings; nothing on ids, so results of runs made before the level was recorded recompute unchanged."""
    return {} if level == TOKEN_IDS else {"compared_on": level}


def completion_emitted(completion) -> list:
    """The emitted tokens of a Completion: ids where the engine gave them, else token strings."""
    return list(completion.token_ids) if completion.token_ids is not None else list(completion.tokens)


def emitted(record: dict) -> list:
    """The emitted tokens of a record: ids where the engine gave them, else token strings."""
    completion = record["completion"]
    ids = completion.get("token_ids")
    return list(ids) if ids is not None else list(completion.get("tokens") or ())


@dataclass(frozen=True)
class EpisodeDivergence:
    """Where two passes of one episode part: the first request whose prompt or emitted tokens differ,
    or a different number of requests. `kind` is None when the two are identical."""

    diverged: bool
    kind: str | None = None  # "prompt", "tokens" or "length"
    request_index: int | None = None
    token_index: int | None = None

    def to_json(self) -> dict:
        return asdict(self)


def episode_divergence(a: Sequence[tuple[str, Sequence]], b: Sequence[tuple[str, Sequence]]) -> EpisodeDivergence:
    """Walk two passes of an episode request by request; each request is (prompt sha256, emitted tokens)."""
    for index, ((prompt_a, tokens_a), (prompt_b, tokens_b)) in enumerate(zip(a, b)):
        if prompt_a != prompt_b:
            return EpisodeDivergence(True, "prompt", index, None)
        token = first_difference(tokens_a, tokens_b)
        if token is not None:
            return EpisodeDivergence(True, "tokens", index, token)
    if len(a) != len(b):
        return EpisodeDivergence(True, "length", min(len(a), len(b)), None)
    return EpisodeDivergence(False)
