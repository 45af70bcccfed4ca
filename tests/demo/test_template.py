"""The demo chat template: ChatML turns, Qwen3-Coder tool declarations, think reasoning, function-tag
tool calls, tool turns; the same text through jinja2 here and through transformers."""

from __future__ import annotations

import json

import pytest

from helios.demo import CHECKPOINT_DIR, TEMPLATE_PATH
from helios.demo.template import ChatTemplate, TemplateRenderError, default_template
from helios.demo.tools import TOOL_SCHEMAS

WEATHER = TOOL_SCHEMAS["get_weather"]
CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}


def test_generation_prompt_and_plain_turns():
    text = default_template().render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], add_generation_prompt=True
    )
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_tools_reasoning_tool_calls_and_tool_turns():
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "reasoning_content": "I will call get_weather.", "tool_calls": [CALL]},
        {"role": "tool", "content": '{"temperature_c": 3}'},
    ]
    text = default_template().render(messages, [WEATHER], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n")
    assert "<function>\n<name>get_weather</name>\n<description>Get the current weather in a city.</description>" in text
    assert '<required>["city"]</required>' in text
    assert (
        "<|im_start|>assistant\n<think>\nI will call get_weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
        '<|im_start|>tool\n{"temperature_c": 3}<|im_end|>\n<|im_start|>assistant\n'
    ) in text


def test_malformed_conversations_are_rejected():
    template = default_template()
    with pytest.raises(TemplateRenderError, match="unknown message role"):
        template.render([{"role": "robot", "content": "x"}])
    string_arguments = {**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    with pytest.raises(TemplateRenderError, match="must be an object"):
        template.render([{"role": "assistant", "content": None, "tool_calls": [string_arguments]}])
    with pytest.raises(TemplateRenderError, match="must be a string"):
        template.render([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
    with pytest.raises(TemplateRenderError, match="line"):
        ChatTemplate("{% if %}")


def test_checkpoint_carries_the_package_template():
    source = TEMPLATE_PATH.read_text(encoding="utf-8")
    assert (CHECKPOINT_DIR / "chat_template.jinja").read_text(encoding="utf-8") == source
    config = json.loads((CHECKPOINT_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == source


def test_transformers_renders_the_same_text(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT_DIR)
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "{}"},
    ]
    ours = default_template().render(messages, [WEATHER], add_generation_prompt=True)
    theirs = tokenizer.apply_chat_template(messages, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert theirs == ours
