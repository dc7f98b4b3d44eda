"""The documented limit of every count, size and range a protocol file or a command-line option sets.

One table (docs/protocols.md) lists these; the protocol models use the annotated types below and the
command line uses the same constants, so a value is refused the same way wherever it comes from. Counts
are strict integers: `true`, `1.5` or `"3"` is refused where a number of things is meant.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from kit.core.limits import (  # noqa: F401 - re-exported for the protocol models
    SEED_MAX,
    PORT_MIN,
    PORT_MAX,
    THREADS_MAX,
    CTX_MIN,
    CTX_MAX,
    CACHE_RAM_MAX,
    ITEMS_MAX,
    FIRST_ITEM_MAX,
    SESSIONS_MAX,
    EPISODES_MAX,
    HISTORIES_MAX,
    ORDER_MAX,
    ORDERS_MAX,
    REQUESTS_PER_EPISODE_MAX,
    FUNCTION_DOCS_MAX,
    TOP_LOGPROBS_MAX,
    CALLS_MAX,
    ROUNDS_MAX,
    REPLICATES_MAX,
    WORKERS_MAX,
    UNLOAD_TIMEOUT_MAX,
)


def count(low: int, high: int, default: Any = ..., **extra) -> Any:
    """A strict integer field within [low, high] (booleans, floats and strings are refused); `default`: an int,
    None, or ... (required)."""
    return Field(default, strict=True, ge=low, le=high, **extra)


Seed = Annotated[int, Field(strict=True, ge=0, le=SEED_MAX)]
CtxSize = Annotated[int, Field(strict=True, ge=CTX_MIN, le=CTX_MAX)]
MaxTokens = Annotated[int, Field(strict=True, ge=1, le=CTX_MAX)]
CacheRam = Annotated[int, Field(strict=True, ge=0, le=CACHE_RAM_MAX)]
Tokens = Annotated[int, Field(strict=True, ge=0, le=CTX_MAX)]
OrderIndex = Annotated[int, Field(strict=True, ge=0, le=ORDER_MAX)]


def _unique(values: tuple) -> tuple:
    repeated = sorted({repr(v) for v in values if list(values).count(v) > 1})
    if repeated:
        raise ValueError(f"entries must be unique; repeated: {', '.join(repeated)}")
    return values


UNIQUE = AfterValidator(_unique)
