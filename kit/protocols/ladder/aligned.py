"""The chunk-aligned cache, arranged from the client side: the prompt's prefix that ends on its last
chunk boundary, as text the engine tokenizes to exactly that many tokens.

Sent with reuse off it is recomputed whole, in the chunks a miss of the full prompt uses; the full prompt
sent next with reuse on then reuses exactly that prefix and computes the rest from the boundary on, in
the miss's own chunks (llama.cpp splits a batch into ubatches from its first position).
"""

from __future__ import annotations



from kit.engines.base import Engine, PromptTools, require


def boundary(prompt_tokens: int, chunk: int, offset: int) -> int | None:
    """The last multiple of `chunk` that leaves at least one prompt token to compute and holds at least
    one token of the text (`offset`: tokens the engine adds before the text, e.g. BOS)."""
    last = (prompt_tokens - 1) // chunk * chunk
    return last if last > offset else None


def aligned_prefix(engine: Engine, prompt: str, prompt_tokens: int | None, chunk: int) -> tuple[str, int] | None:
    """(prefix text, boundary in the engine's prompt tokens), or None when the prompt has no boundary before
    its last token or no text prefix tokenizes to exactly the tokens before it."""
    tools: PromptTools = require(engine, "tokenization", "the ladder's chunk-aligned cache")
    ids = tools.tokenize(prompt)
    if prompt_tokens is None:
        return None
    offset = prompt_tokens - len(ids)
    edge = boundary(prompt_tokens, chunk, offset)
    while edge is not None:
        wanted = ids[:edge - offset]
        text = _prefix_of(tools, prompt, wanted)
        if text is not None:
            return text, edge
        edge = edge - chunk if edge - chunk > offset else None
    return None


def _prefix_of(tools: PromptTools, prompt: str, wanted: list[int]) -> str | None:
    """The shortest prefix of `prompt` that tokenizes to exactly `wanted` (tokens may merge across a cut, so
    a few cuts past the first long enough one are tried)."""
    low, high = 0, len(prompt)
    while low < high:  # the shortest cut with at least len(wanted) tokens
        middle = (low + high) // 2
        if len(tools.tokenize(prompt[:middle])) >= len(wanted):
            high = middle
        else:
            low = middle + 1
    for cut in range(low, min(low + 8, len(prompt)) + 1):
        if tools.tokenize(prompt[:cut]) == wanted:
            return prompt[:cut]
    return None
