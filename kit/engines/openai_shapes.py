"""Pieces of the OpenAI response shape that several engines share (vLLM, OpenAI-compatible servers;
Ollama's log-probability entries have the same shape), as the pydantic models their answers are validated
against (kit.engines.http.Answer)."""

from __future__ import annotations

from kit.engines.base import TokenLogprob
from kit.engines.http import Answer, Count, Finite


class _Top(Answer):
    token: str = ""
    logprob: Finite


class LogprobEntry(_Top):
    """A `{token, logprob, bytes, top_logprobs}` entry (these engines give no token ids)."""

    top_logprobs: list[_Top] | None = None


def logprob_entry(item: LogprobEntry) -> TokenLogprob:
    """A validated entry, normalized."""
    return {"token": item.token, "logprob": item.logprob, "id": None,
            "top": [{"token": t.token, "logprob": t.logprob, "id": None} for t in item.top_logprobs or ()]}


class _Details(Answer):
    cached_tokens: Count | None = None


class Usage(Answer):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    prompt_tokens_details: _Details | None = None

    @property
    def cached_tokens(self) -> int | None:
        """`prompt_tokens_details.cached_tokens`, or None when absent or null (never read as 0)."""
        return self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details else None



class _Model(Answer):
    id: str


class ModelsAnswer(Answer):
    """`GET /v1/models`: the served models (the kit reads the first one's id)."""

    data: list[_Model]
