"""Tiny frontend assets for host tests: a byte-level BPE tokenizer trained in milliseconds, a
byte-fallback (sentencepiece-style) tokenizer, a ChatML chat template with think tags and Qwen Coder
tool calls, and the matching FrontendContract. No download, no model."""

from __future__ import annotations

import functools
import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from helios.frontend.syntaxes import qwen_coder
from helios.proto import contract_pb2

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

CORPUS = [
    "Hello world! The weather in Paris is sunny today. é è ü ñ ß — 日本語 テスト 😀 🚀",
    "def add(a, b):\n    return a + b\n",
    '{"city": "Paris", "unit": "celsius", "days": 3}',
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
    "user assistant system tool response reasoning answer question think about it",
    "0123456789 +-*/=<>()[]{}.,;:!?'\"\n\t",
]

CHAT_TEMPLATE = """\
{%- if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

Call a function as <tool_call>
<function=NAME>
<parameter=KEY>
VALUE
</parameter>
</function>
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'user' %}
<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}
<|im_start|>assistant
{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content or '' }}
{%- for tc in message.tool_calls or [] %}
<tool_call>
<function={{ tc.function.name }}>
{% for key, value in tc.function.arguments | items %}<parameter={{ key }}>
{{ value if value is string else value | tojson }}
</parameter>
{% endfor %}</function>
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking %}<think>
{% endif %}
{%- endif %}
"""


@functools.cache
def byte_level_tokenizer_json() -> str:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer=trainer)
    tokenizer.add_tokens(ADDED)
    return tokenizer.to_str()


@functools.cache
def byte_fallback_tokenizer_json() -> str:
    """Sentencepiece-style: Metaspace pieces, `<0xNN>` byte tokens for anything else."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    for piece in ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "▁hello", "▁world", "ll", "he", "▁he"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("h", "e"), ("l", "l"), ("▁", "he")]
    model = models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.add_special_tokens(["<s>", "</s>"])
    return tokenizer.to_str()


def token_id(text: str) -> int:
    value = Tokenizer.from_str(byte_level_tokenizer_json()).token_to_id(text)
    assert value is not None, text
    return value


def frontend_contract(
    *, tools: bool = True, reasoning: bool = True, terminal_marker: bool = True
) -> contract_pb2.FrontendContract:
    frontend = contract_pb2.FrontendContract(
        tool_parser=contract_pb2.TOOL_PARSER_QWEN_CODER if tools else contract_pb2.TOOL_PARSER_NONE,
        reasoning_parser=contract_pb2.REASONING_PARSER_THINK
        if reasoning
        else contract_pb2.REASONING_PARSER_NONE,
        image_preparation=contract_pb2.IMAGE_PREPARATION_NONE,
        image_layout=contract_pb2.IMAGE_LAYOUT_NONE,
        eos_token_ids=[token_id("<|im_end|>"), token_id("<|endoftext|>")],
    )
    if tools:
        frontend.tool_syntax.CopyFrom(qwen_coder.PUBLIC_SYNTAX)  # the public Qwen Coder function tags
    if reasoning:
        frontend.reasoning_syntax.CopyFrom(
            contract_pb2.ReasoningSyntax(
                open="<think>",
                close="</think>",
                terminal_marker="<tool_call>" if (terminal_marker and tools) else "",
                wrapping_newlines=True,
            )
        )
    frontend.prompt_syntax.CopyFrom(
        contract_pb2.PromptSyntax(assistant_open="<|im_start|>assistant\n", message_end="<|im_end|>")
    )
    return frontend


def serving_defaults(**fields: int) -> contract_pb2.ServingDefaults:
    defaults = contract_pb2.ServingDefaults(**fields)
    defaults.sampling.temperature = 0.0
    return defaults


def make_bootstrap(**contract_options: bool):
    from helios.frontend.bootstrap import Bootstrap

    return Bootstrap(
        tokenizer_json=byte_level_tokenizer_json(),
        chat_template=CHAT_TEMPLATE,
        frontend=frontend_contract(**contract_options),
        defaults=serving_defaults(max_output_tokens=64),
    )


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "hours": {"type": "array", "items": {"type": "number"}},
            },
            "required": ["city"],
        },
    },
}

__all__ = ["json"]
