"""Incremental detokenization: equals a whole-sequence decode, never splits a character, and keeps
delimiter tokens as marker pieces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from helios.frontend.detokenize import IncrementalDetokenizer, Piece, join_text
from tests.frontend import tinyfront

BYTE_LEVEL = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
FALLBACK = Tokenizer.from_str(tinyfront.byte_fallback_tokenizer_json())


def pieces_of(tokenizer: Tokenizer, ids: list[int], markers=None) -> list[Piece]:
    detokenizer = IncrementalDetokenizer(tokenizer, markers)
    out: list[Piece] = []
    for token in ids:
        out.extend(detokenizer.push(token))
    return out + detokenizer.flush()


@settings(max_examples=120, deadline=None)
@given(st.text(st.sampled_from(list("hello wrd é日本😀ß\n<>")), max_size=30))
def test_incremental_equals_whole_decode_and_never_splits_characters(text: str) -> None:
    for tokenizer in (BYTE_LEVEL, FALLBACK):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        pieces = pieces_of(tokenizer, ids)
        assert join_text(pieces) == tokenizer.decode(ids, skip_special_tokens=False)
        assert all("\ufffd" not in piece.text for piece in pieces)


def test_byte_fallback_tokens_are_joined_into_characters() -> None:
    ids = FALLBACK.encode("w日", add_special_tokens=False).ids
    assert FALLBACK.encode("w日", add_special_tokens=False).tokens == ["▁", "w", "<0xE6>", "<0x97>", "<0xA5>"]
    detokenizer = IncrementalDetokenizer(FALLBACK)
    assert [detokenizer.push(t) for t in ids] == [[], [Piece("w")], [], [], [Piece("日")]]


def test_an_incomplete_character_is_released_by_flush() -> None:
    ids = FALLBACK.encode("日", add_special_tokens=False).ids
    detokenizer = IncrementalDetokenizer(FALLBACK)
    assert len(ids) == 4  # "▁" and three byte tokens
    assert [detokenizer.push(t) for t in ids[:3]] == [[], [], []]
    assert join_text(detokenizer.flush()) == "\ufffd\ufffd"


def test_complete_characters_before_a_partial_one_are_emitted() -> None:
    ids = BYTE_LEVEL.encode(" 日", add_special_tokens=False).ids
    detokenizer = IncrementalDetokenizer(BYTE_LEVEL)
    first = detokenizer.push(ids[0])
    assert join_text(first) == " "
    rest = [p for t in ids[1:] for p in detokenizer.push(t)]
    assert join_text(rest) == "日"


@pytest.mark.parametrize("text", ["a<think>b</think>\nc", "é<think>日</think>"])
def test_delimiter_tokens_are_marker_pieces(text: str) -> None:
    think, close = tinyfront.token_id("<think>"), tinyfront.token_id("</think>")
    ids = BYTE_LEVEL.encode(text, add_special_tokens=False).ids
    assert think in ids and close in ids
    pieces = pieces_of(BYTE_LEVEL, ids, {think: "<think>"})
    assert join_text(pieces) == text
    assert [p.text for p in pieces if p.marker] == ["<think>"]  # only declared delimiters are markers
