"""The toy engine's adapter: its server answers `POST /generate` with `{"text", "tokens", "finish"}` and
`GET /toy/version` with `{"toy": VERSION}` (the dialect tests/protocols/test_add_an_engine.py serves)."""

from __future__ import annotations

from typing import Any

from kit.engines.base import Capabilities, Completion, CompletionRequest, refuse_unsupported
from kit.engines.http import Answer, answer, client, post_timed
from kit.engines.identify import Prober, Proof

FIX = "check that the toy server runs at that URL"


class Generated(Answer):
    """The answer of `POST /generate`."""

    text: str
    tokens: list[str]
    finish: str


class ToyEngine:
    """A toy server at `base_url`: one prompt in, its text out, each token with log-probability 0."""

    name = "Toy engine"
    capabilities = Capabilities(raw_prompts=True)

    def __init__(self, base_url: str, transport: Any = None):
        self.base_url = base_url.rstrip("/")
        self._http = client(self.base_url, transport)

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_unsupported(self, request)
        body = {"prompt": request.prompt, "max_tokens": request.max_tokens, "seed": request.seed}
        response, sent = post_timed(self._http, "/generate", body, who=self.name, fix=FIX, tokens=request.max_tokens)
        got = answer(response, Generated, who=self.name, what="/generate", fix=FIX)
        entries = tuple({"token": token, "logprob": 0.0, "id": None, "top": []} for token in got.tokens)
        return Completion(text=got.text, token_ids=None, tokens=tuple(got.tokens), logprobs=entries,
                          finish_reason=got.finish, cached_tokens=None, prompt_tokens=None, prefill_tokens=None,
                          prefill_ms=None, decode_tokens=len(got.tokens), decode_ms=None, raw=response.json(),
                          sent=sent)

    def info(self) -> dict[str, Any]:
        return {"engine": self.name, "url": self.base_url}

    def close(self) -> None:
        self._http.close()


def proof(probe: Prober) -> Proof | None:
    """A toy server answers `GET /toy/version` with its version."""
    info = probe.json("/toy/version")
    return Proof(str(info["toy"]), "GET /toy/version") if info and "toy" in info else None
