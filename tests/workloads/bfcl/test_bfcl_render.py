"""Prompt renderers on a tiny transcript, against expected strings derived from the templates."""

from __future__ import annotations

import pytest

from kit.workloads.bfcl import RENDERERS, render_chatml, render_llama31, render_qwen25

TRANSCRIPT = [
    {"role": "system", "content": "SYS"},
    {"role": "user", "content": "U1"},
    {"role": "assistant", "content": "[f(a=1), g()]"},
    {"role": "tool", "name": "f(a=1)", "content": "R1"},
    {"role": "tool", "name": "g()", "content": "R2"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": " U2 \n"},
]

# tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf, verbatim.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)


def test_chatml_smollm2():
    assert render_chatml(TRANSCRIPT) == (
        "<|im_start|>system\nSYS<|im_end|>\n"
        "<|im_start|>user\nU1<|im_end|>\n"
        "<|im_start|>assistant\n[f(a=1), g()]<|im_end|>\n"
        "<|im_start|>tool\nR1<|im_end|>\n"
        "<|im_start|>tool\nR2<|im_end|>\n"
        "<|im_start|>assistant\ndone<|im_end|>\n"
        "<|im_start|>user\n U2 \n<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chatml_adds_smollm2_default_system_message():
    assert render_chatml([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("messages", [TRANSCRIPT, TRANSCRIPT[1:]])
def test_chatml_matches_the_gguf_template_rendered_by_jinja(messages):
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(SMOLLM2_TEMPLATE)
    assert render_chatml(messages) == template.render(messages=messages, add_generation_prompt=True)


def test_qwen25_groups_tool_results_in_one_user_turn():
    assert render_qwen25(TRANSCRIPT) == (
        "<|im_start|>system\nSYS<|im_end|>\n"
        "<|im_start|>user\nU1<|im_end|>\n"
        "<|im_start|>assistant\n[f(a=1), g()]<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response>"
        "<|im_end|>\n"
        "<|im_start|>assistant\ndone<|im_end|>\n"
        "<|im_start|>user\n U2 \n<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen25_tool_result_last_closes_the_turn():
    msgs = TRANSCRIPT[:4]
    assert render_qwen25(msgs).endswith(
        "<|im_start|>user\n<tool_response>\nR1\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_qwen25_default_system_message():
    assert render_qwen25([{"role": "user", "content": "hi"}]).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\nhi")


def test_llama31_uses_ipython_for_tool_results_and_strips_content():
    assert render_llama31(TRANSCRIPT) == (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nSYS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n[f(a=1), g()]<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\nR1<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\nR2<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\ndone<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_registry_names_each_family():
    assert RENDERERS["smollm2"] is render_chatml
    assert RENDERERS["qwen25"] is render_qwen25
    assert RENDERERS["llama31"] is render_llama31


def test_every_prompt_format_a_protocol_may_name_has_its_renderer():
    from typing import get_args

    from kit.protocols.bfcl_passes.model import FAMILY_RENDERERS, BfclWorkload

    named = set(get_args(BfclWorkload.model_fields["prompt_format"].annotation)) - {"auto"}
    assert named <= set(RENDERERS) and set(FAMILY_RENDERERS.values()) <= named
