"""Reusable preparation declarations: buffers registered once, the text inputs' bindings, the
completion record, history regions, and frontend detection from template text."""

from __future__ import annotations

import pytest

from helios.ignition.preparation.contract import (
    DeclarationConflict,
    Declarations,
    TextGeometry,
    completion_layout,
    paged_history,
    paged_text_inputs,
)
from helios.ignition.preparation.frontend import frontend_contract, prompt_syntax
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2
GEOMETRY = TextGeometry(slots=4, page_tokens=16, max_pages=8, sampled_tokens=100, logits_width=128)


def test_geometry_is_validated():
    assert GEOMETRY.mask_words == 4 and GEOMETRY.histogram_width == 128
    with pytest.raises(ValueError, match="logits_width"):
        TextGeometry(slots=1, page_tokens=1, max_pages=1, sampled_tokens=10, logits_width=8)


def test_a_buffer_is_registered_once_and_conflicts_are_refused():
    decl = Declarations()
    decl.buffer("x", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (4,))
    decl.buffer("x", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (4,))
    assert list(decl.buffers) == ["x"]
    with pytest.raises(DeclarationConflict, match="'x'"):
        decl.buffer("x", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (8,))


def test_paged_text_inputs_share_buffers_of_equal_extent():
    decl = Declarations()
    first = paged_text_inputs(decl, GEOMETRY, ProgramBuilder("a"), 16)
    paged_text_inputs(decl, GEOMETRY, ProgramBuilder("b"), 16)
    paged_text_inputs(decl, GEOMETRY, ProgramBuilder("c"), 4)
    assert sorted(decl.buffers) == sorted(["lane_page_table", *(f"{w}_p{p}" for p in (4, 16) for w in (
        "tokens", "positions", "next_positions", "token_lane"))])
    tokens = [b for b in first.bindings if b.destination == "tokens_p16"]
    assert {b.source for b in tokens} == {C.VALUE_SOURCE_PROMPT_TOKENS, C.VALUE_SOURCE_PENDING_TOKEN}
    assert all(b.padding == -1 for b in tokens)
    lanes = next(b for b in first.bindings if b.destination == "token_lane_p16")
    assert (lanes.source, lanes.indexing, lanes.padding) == (C.VALUE_SOURCE_SLOT, C.INDEXING_PACKED_TOKEN, -1)


def test_completion_layout_has_one_buffer_per_field():
    decl = Declarations()
    layout = completion_layout(decl, GEOMETRY)
    fields = [slot.field for slot in layout.fields]
    assert len(fields) == len(set(fields)) == 9
    assert all(decl.buffers[slot.buffer].role == M.BUFFER_ROLE_COMPLETION for slot in layout.fields)
    assert list(decl.buffers["completion.sampled_ids"].shape) == [4, 1]


def test_history_regions():
    decl = Declarations()
    full = paged_history(decl, GEOMETRY, layer=0, kv_heads=2, head_dim=8, dtype=M.DTYPE_BF16)
    window = paged_history(decl, GEOMETRY, layer=1, kv_heads=2, head_dim=8, dtype=M.DTYPE_BF16, window_tokens=32)
    assert full.region.kind == C.HISTORY_KIND_PAGED_KEY_VALUE and list(full.region.planes) == ["layer0.key",
                                                                                                 "layer0.value"]
    assert window.region.kind == C.HISTORY_KIND_SLIDING_WINDOW and window.region.window_tokens == 32
    assert list(decl.buffers["layer1.key"].shape) == [0, 16, 2, 8]


def test_prompt_syntax_from_rendering():
    chatml = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    syntax = prompt_syntax(chatml, bos="", eos="<|im_end|>")
    assert (syntax.assistant_open, syntax.message_end) == ("<|im_start|>assistant\n", "<|im_end|>")
    broken = prompt_syntax("{{ raise_exception('no') }}", bos="", eos="")
    assert (broken.assistant_open, broken.message_end) == ("", "")


def test_parsers_are_none_unless_the_template_shows_their_syntax():
    plain = frontend_contract(chat_template="{{ messages[0]['content'] }}", vocabulary={}, special_tokens={},
                              eos_token_ids=(2,), bos_text="", eos_text="")
    assert (plain.tool_parser, plain.reasoning_parser) == (C.TOOL_PARSER_NONE, C.REASONING_PARSER_NONE)
    assert (plain.image_preparation, plain.image_layout) == (C.IMAGE_PREPARATION_NONE, C.IMAGE_LAYOUT_NONE)
    # JSON tool calls inside <tool_call> are not the function-tag syntax.
    hermes = frontend_contract(chat_template="<tool_call>{{ tool | tojson }}</tool_call><think></think>",
                               vocabulary={"<think>": 5}, special_tokens={"<think>": 5}, eos_token_ids=(2,),
                               bos_text="", eos_text="")
    assert hermes.tool_parser == C.TOOL_PARSER_NONE and hermes.reasoning_parser == C.REASONING_PARSER_THINK
    assert [(t.text, t.id) for t in hermes.template_tokens] == [("<think>", 5)]
