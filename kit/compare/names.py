"""Model, format and engine names as both sides write them, reduced to one spelling for matching.

A run's model label comes from its model file or registry name (`qwen2.5-7b-instruct`, a vLLM
checkpoint `Qwen/Qwen2.5-7B-Instruct`, `Meta-Llama-3.1-8B-Instruct`); the paper writes `Qwen2.5-7B`
and `Llama-3.1-8B`. All of them reduce to a key (`qwen2.5-7b`, `llama3.1-8b`).
"""

from __future__ import annotations

import re

from kit.engines import registry

KNOWN_MODELS = {"smollm2-135m": "SmolLM2-135M", "gemma-3-270m": "Gemma-3-270M"}


def model_key(label: str) -> str:
    """`Qwen/Qwen2.5-7B-Instruct`, `qwen2.5-7b-instruct` and `Qwen2.5-7B` all give `qwen2.5-7b`."""
    name = str(label).strip().rsplit("/", 1)[-1].lower()
    name = re.sub(r"\.gguf$", "", name)
    name = re.sub(r"^meta-", "", name)
    name = re.sub(r"[-_.]instruct$", "", name)
    return re.sub(r"^llama-(\d)", r"llama\1", name)


def model_display(label: str, published: dict[str, str]) -> str:
    """How to print a run's model: the paper's spelling when it is one of the paper's models
    (`published`: key -> the paper's name), a known short name, else the label as recorded."""
    key = model_key(label)
    return published.get(key) or KNOWN_MODELS.get(key) or str(label)


def format_key(label: str) -> str:
    return "+".join(part.strip().upper() for part in str(label).split("+"))


def engine_key(label: str | None) -> str | None:
    if label is None:
        return None
    engine = registry.said_in(label)
    return engine.name if engine else str(label).lower()
