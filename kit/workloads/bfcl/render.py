"""Prompt rendering per model family: a message list in, the exact prompt text out.

Messages are dicts with `role` ("system", "user", "assistant" or "tool") and `content` (text).
Every renderer ends with the opening of an assistant turn (the generation prompt). These mirror
the chat templates the paper's harness used through BFCL's prompting handlers:

- `render_chatml`: SmolLM2's template as stored in its GGUF (`tokenizer.chat_template`): every
  message as `<|im_start|>{role}\\n{content}<|im_end|>\\n`, roles verbatim (tool results stay
  `tool`), and SmolLM2's default system message when the first message is not a system one.
- `render_qwen25`: Qwen2.5's template without a tools block (the function docs live in BFCL's
  system prompt): ChatML, with each run of consecutive tool results rendered as one user turn of
  `<tool_response>` blocks (also what BFCL's Qwen prompting handler builds).
- `render_llama31`: BFCL's Llama 3 prompting handler: `<|begin_of_text|>`, then every message as
  a header/`content.strip()`/`<|eot_id|>` block, tool results under the `ipython` role.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Message = dict
Renderer = Callable[[Sequence[Message]], str]

SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def render_chatml(messages: Sequence[Message]) -> str:
    """SmolLM2-135M-Instruct's chat template (plain ChatML) with the generation prompt."""
    parts = []
    if messages and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_qwen25(messages: Sequence[Message]) -> str:
    """Qwen2.5-Instruct's chat template (no tools block) with the generation prompt."""
    parts = []
    if messages and messages[0]["role"] == "system":
        parts.append(f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n")
        rest_start = 1
    else:
        parts.append(f"<|im_start|>system\n{QWEN25_DEFAULT_SYSTEM}<|im_end|>\n")
        rest_start = 0
    for i in range(rest_start, len(messages)):
        m = messages[i]
        role = m["role"]
        if role == "tool":
            if i == 0 or messages[i - 1]["role"] != "tool":
                parts.append("<|im_start|>user")
            parts.append(f"\n<tool_response>\n{m['content']}\n</tool_response>")
            if i == len(messages) - 1 or messages[i + 1]["role"] != "tool":
                parts.append("<|im_end|>\n")
        else:
            parts.append(f"<|im_start|>{role}\n{m['content']}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_llama31(messages: Sequence[Message]) -> str:
    """Llama-3.1-Instruct as BFCL's Llama prompting handler renders it (tool results as ipython)."""
    parts = ["<|begin_of_text|>"]
    for m in messages:
        role = "ipython" if m["role"] == "tool" else m["role"]
        parts.append(f"<|start_header_id|>{role}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>")
    parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


RENDERERS: dict[str, Renderer] = {
    "chatml": render_chatml,
    "smollm2": render_chatml,
    "qwen25": render_qwen25,
    "llama31": render_llama31,
}
