"""Bootstrap: tokenizer and template loading, rendering, encoding, contract validation and the
prompt's initial reasoning state."""

from __future__ import annotations

import pytest

from helios.contract import ContractError
from helios.frontend.bootstrap import (
    Bootstrap,
    InvalidFrontendContract,
    InvalidTokenizer,
    MissingFrontendResource,
    UnsupportedFrontend,
    initial_reasoning_open,
)
from helios.frontend.template import InvalidChatTemplate, TemplateRenderError
from helios.proto import contract_pb2, core_pb2
from tests.frontend import tinyfront


def test_render_and_encode_round_trip() -> None:
    bootstrap = tinyfront.make_bootstrap()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi é 日本"}]
    prompt = bootstrap.render_chat(messages, tools=[tinyfront.WEATHER_TOOL])
    assert prompt.endswith("<|im_start|>assistant\n")
    assert '"name": "get_weather"' in prompt  # tools rendered through tojson, non-ASCII kept
    ids = bootstrap.encode(prompt)
    assert bootstrap.decode(ids) == prompt
    assert ids.count(tinyfront.token_id("<|im_start|>")) == 3  # special tokens encode as their ids
    assert bootstrap.eos_token_ids == (tinyfront.token_id("<|im_end|>"), tinyfront.token_id("<|endoftext|>"))


def test_template_kwargs_reach_the_template() -> None:
    bootstrap = tinyfront.make_bootstrap()
    messages = [{"role": "user", "content": "x"}]
    assert bootstrap.render_chat(messages, enable_thinking=True).endswith("assistant\n<think>\n")
    assert bootstrap.render_chat(messages, add_generation_prompt=False).endswith("x<|im_end|>\n")


def test_template_helpers_and_sandbox() -> None:
    source = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson(indent=None) }}"
        "{% endfor %}{{ strftime_now('%Y')|length }}"
        "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}"
    )
    bootstrap = Bootstrap(tinyfront.byte_level_tokenizer_json(), source, tinyfront.frontend_contract())
    assert bootstrap.render_chat([{"role": "user", "content": "é"}]) == '{"role": "user", "content": "é"}4'
    with pytest.raises(TemplateRenderError, match="one message only"):
        bootstrap.render_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    escape = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(TemplateRenderError):
        Bootstrap(tinyfront.byte_level_tokenizer_json(), escape, tinyfront.frontend_contract()).render_chat(
            []
        )


def test_single_token_delimiters() -> None:
    bootstrap = tinyfront.make_bootstrap()
    assert bootstrap.single_token_id("<think>") == tinyfront.token_id("<think>")
    assert bootstrap.single_token_id("<function=") is None
    assert bootstrap.single_token_id("") is None


def test_invalid_assets_are_rejected() -> None:
    with pytest.raises(InvalidTokenizer):
        Bootstrap("{not json", tinyfront.CHAT_TEMPLATE, tinyfront.frontend_contract())
    with pytest.raises(InvalidChatTemplate):
        Bootstrap(tinyfront.byte_level_tokenizer_json(), "{% for %}", tinyfront.frontend_contract())


def test_contract_validation() -> None:
    tokenizer = tinyfront.byte_level_tokenizer_json()
    unspecified = tinyfront.frontend_contract()
    unspecified.tool_parser = contract_pb2.TOOL_PARSER_UNSPECIFIED
    with pytest.raises(UnsupportedFrontend, match="TOOL_PARSER_UNSPECIFIED"):
        Bootstrap(tokenizer, tinyfront.CHAT_TEMPLATE, unspecified)
    no_eos = tinyfront.frontend_contract()
    del no_eos.eos_token_ids[:]
    with pytest.raises(InvalidFrontendContract, match="eos_token_ids"):
        Bootstrap(tokenizer, tinyfront.CHAT_TEMPLATE, no_eos)
    bad_marker = tinyfront.frontend_contract()
    bad_marker.reasoning_syntax.terminal_marker = "<call>"
    with pytest.raises(InvalidFrontendContract, match="terminal_marker"):
        Bootstrap(tokenizer, tinyfront.CHAT_TEMPLATE, bad_marker)
    missing = tinyfront.frontend_contract()
    missing.tool_syntax.parameter_close = ""
    with pytest.raises(InvalidFrontendContract, match="parameter_close"):
        Bootstrap(tokenizer, tinyfront.CHAT_TEMPLATE, missing)
    wrong_template_token = tinyfront.frontend_contract()
    wrong_template_token.template_tokens.add(text="<|im_start|>", id=3)
    with pytest.raises(InvalidFrontendContract, match="template_tokens"):
        Bootstrap(tokenizer, tinyfront.CHAT_TEMPLATE, wrong_template_token)


class _FakeCore:
    """The opened-core surface Bootstrap.from_core reads: contract, resources, read()."""

    def __init__(self, resources: dict[str, tuple[int, bytes]]) -> None:
        from tests.contract.valid import manifest, serving

        self.contract = serving()
        self.contract.model.frontend.CopyFrom(tinyfront.frontend_contract())
        self.contract.defaults.max_active = 3
        self.manifest = manifest()
        self.resources = [core_pb2.ExecutableResource(id=k, kind=kind) for k, (kind, _) in resources.items()]
        self._data = {k: data for k, (_, data) in resources.items()}

    def read(self, resource_id: str) -> bytes:
        return self._data[resource_id]


def test_from_core() -> None:
    core = _FakeCore(
        {
            "tokenizer": (core_pb2.RESOURCE_KIND_TOKENIZER, tinyfront.byte_level_tokenizer_json().encode()),
            "template": (core_pb2.RESOURCE_KIND_CHAT_TEMPLATE, tinyfront.CHAT_TEMPLATE.encode()),
        }
    )
    bootstrap = Bootstrap.from_core(core)
    assert bootstrap.defaults.max_active == 3
    assert bootstrap.render_chat([{"role": "user", "content": "x"}]).endswith("assistant\n")
    with pytest.raises(MissingFrontendResource, match="chat template"):
        Bootstrap.from_core(_FakeCore({"t": (core_pb2.RESOURCE_KIND_TOKENIZER, b"{}")}))
    # an inconsistent prepared contract fails before any frontend asset is read
    broken = _FakeCore({})
    broken.contract.model.frontend.tool_parser = contract_pb2.TOOL_PARSER_UNSPECIFIED
    with pytest.raises(ContractError):
        Bootstrap.from_core(broken)


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", False),
        ("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>\nhm\n</think>\n\n", False),
        ("<|im_start|>assistant\n<think>\nhm <tool_call>\n", False),  # terminal marker ends it
        # a completed assistant message does not leave reasoning open
        ("<|im_start|>assistant\n<think>\nhm<|im_end|>\n", False),
        # completed user messages cannot open reasoning, even with a literal <think>
        ("<|im_start|>user\n<think>\n<|im_end|>\n", False),
        ("<|im_start|>user\n<think>", False),  # no assistant envelope at all
        # resumed assistant turn after an embedded tool response: only text after the last end counts
        (
            "<|im_start|>assistant\n<think>\nx</think><tool_call>..<|im_end|>\n<tool_response>r<|im_end|>\n",
            False,
        ),
        (
            "<|im_start|>assistant\n</think>..<|im_end|>\n<tool_response>r</tool_response><|im_end|>\n<think>\n",
            True,
        ),
    ],
)
def test_initial_reasoning_state(prompt: str, expected: bool) -> None:
    assert initial_reasoning_open(prompt, tinyfront.frontend_contract()) is expected


def test_initial_reasoning_needs_a_reasoning_parser() -> None:
    prompt = "<|im_start|>assistant\n<think>\n"
    assert not initial_reasoning_open(prompt, tinyfront.frontend_contract(reasoning=False))
