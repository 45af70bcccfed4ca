"""Stops: string stops over incremental decoded text, stop token ids and sequences, StopSpec limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from helios.frontend.detokenize import join_text
from helios.frontend.errors import IncompatibleOptions, InvalidStop
from helios.frontend.stops import OutputFilter, StopSpec
from tests.frontend import tinyfront

TOKENIZER = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
FALLBACK = Tokenizer.from_str(tinyfront.byte_fallback_tokenizer_json())


def run(text: str, stops: StopSpec, tokenizer: Tokenizer = TOKENIZER, markers=None) -> tuple[str, bool, int]:
    """Feed `text`'s tokens one at a time; returns (visible text, stopped, tokens consumed)."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    output = OutputFilter(tokenizer, stops, markers)
    pieces = []
    for count, token in enumerate(ids, start=1):
        step = output.push(token)
        pieces.extend(step.pieces)
        if step.stopped:
            return join_text(pieces), True, count
    pieces.extend(output.finish())
    return join_text(pieces), False, len(ids)


def reference(text: str, stops: tuple[str, ...], tokenizer: Tokenizer = TOKENIZER) -> tuple[str, bool, int]:
    """The reference semantics: decode the whole output after each token and search it."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    for count in range(1, len(ids) + 1):
        full = tokenizer.decode(ids[:count], skip_special_tokens=False)
        found = [(full.find(s) + len(s), full.find(s)) for s in stops if s in full]
        if found:
            return full[: min(found)[1]], True, count
    return tokenizer.decode(ids, skip_special_tokens=False), False, len(ids)


def test_stop_split_across_tokens() -> None:
    ids = TOKENIZER.encode("hello world", add_special_tokens=False).ids
    assert len(ids) > 3
    visible, stopped, used = run("hello world", StopSpec(strings=("lo wo",)))
    assert (visible, stopped) == ("hel", True)
    assert used < len(ids)  # the crossing token was consumed; later ones never were


def test_match_and_suffix_in_the_same_token_are_removed() -> None:
    tokens = TOKENIZER.encode("hello", add_special_tokens=False).tokens
    assert "el" in tokens  # "e" and its suffix "l" arrive in one token
    assert run("hello", StopSpec(strings=("e",)))[:2] == ("h", True)


@pytest.mark.parametrize("tokenizer", [TOKENIZER, FALLBACK], ids=["byte-level", "byte-fallback"])
def test_stop_inside_a_multibyte_character(tokenizer: Tokenizer) -> None:
    # "é" and "日本" span several byte tokens in both tokenizers
    assert run("wé日本x", StopSpec(strings=("本",)), tokenizer)[:2] == ("wé日", True)
    assert run("wé日本x", StopSpec(strings=("é",)), tokenizer)[:2] == ("w", True)


def test_overlapping_stop_prefixes() -> None:
    assert run("xabcd", StopSpec(strings=("abcx", "bcd")))[:2] == ("xa", True)
    assert run("aaab", StopSpec(strings=("aab",)))[:2] == ("a", True)
    # the match completing first wins, even though another starts earlier
    assert run("abcd", StopSpec(strings=("abcd", "bc")))[:2] == ("a", True)


def test_stop_inside_reasoning() -> None:
    text = "<think>\nplan STOP more</think>answer"
    markers = {tinyfront.token_id("<think>"): "<think>", tinyfront.token_id("</think>"): "</think>"}
    assert run(text, StopSpec(strings=("STOP",)), markers=markers)[:2] == ("<think>\nplan ", True)
    # a stop may match the delimiters themselves
    assert run(text, StopSpec(strings=("</think>",)), markers=markers)[:2] == (
        "<think>\nplan STOP more",
        True,
    )


def test_unmatched_prefix_is_flushed_at_the_end() -> None:
    assert run("abc", StopSpec(strings=("cd",))) == ("abc", False, len(TOKENIZER.encode("abc").ids))
    assert run("日本", StopSpec(strings=("本x",)), FALLBACK)[:2] == ("日本", False)


def test_no_stops_passes_text_through() -> None:
    assert run("hello wé日本😀", StopSpec())[:2] == ("hello wé日本😀", False)


def test_stop_token_ids_and_sequences() -> None:
    ids = TOKENIZER.encode("hello world again", add_special_tokens=False).ids
    target = ids[3]
    output = OutputFilter(TOKENIZER, StopSpec(token_ids=(target,)))
    visible = []
    for token in ids:
        step = output.push(token)
        visible.extend(step.pieces)
        if step.stopped:
            break
    assert join_text(visible) == TOKENIZER.decode(ids[:3])  # the stop token is omitted
    # a sequence: a pending prefix is held, then released when it cannot complete
    a, b, c = ids[1], ids[2], ids[3]
    output = OutputFilter(TOKENIZER, StopSpec(token_sequences=((b, c),)))
    assert output.push(a).pieces and output.push(b).pieces == ()  # b held: it may begin (b, c)
    step = output.push(a)  # (b, a) cannot complete: b and a are released in order
    assert join_text(list(step.pieces)) == TOKENIZER.decode([b, a]) and not step.stopped
    output.push(b)
    step = output.push(c)
    assert step.stopped and step.pieces == ()
    # at the end, a held prefix is flushed
    output = OutputFilter(TOKENIZER, StopSpec(token_sequences=((b, c),)))
    output.push(a)
    output.push(b)
    assert join_text(output.finish()) == TOKENIZER.decode([b])


def test_stop_spec_limits() -> None:
    with pytest.raises(InvalidStop, match="at most 4"):
        StopSpec(strings=("a", "b", "c", "d", "e"))
    with pytest.raises(InvalidStop, match="non-empty"):
        StopSpec(strings=("",))
    with pytest.raises(InvalidStop, match="4097 UTF-8 bytes"):
        StopSpec(strings=("é" * 2000, "x" * 97))
    StopSpec(strings=("é" * 2000, "x" * 96))  # exactly 4096 bytes is accepted
    with pytest.raises(InvalidStop, match="at most 16"):
        StopSpec(token_sequences=tuple((i,) for i in range(17)))
    with pytest.raises(InvalidStop, match="stop_token_sequences.0"):
        StopSpec(token_sequences=(tuple(range(65)),))
    with pytest.raises(IncompatibleOptions) as error:
        StopSpec(strings=("x",), token_ids=(1,))
    assert error.value.param == "stop_token_ids"
    with pytest.raises(InvalidStop, match="outside the vocabulary"):
        StopSpec(token_ids=(10**6,)).check_vocabulary(TOKENIZER.get_vocab_size())


ALPHABET = st.sampled_from(list("ab é日本<>/\n"))


@settings(max_examples=150, deadline=None)
@given(text=st.text(ALPHABET, min_size=1, max_size=24), data=st.data())
def test_incremental_matching_equals_whole_text_search(text: str, data: st.DataObject) -> None:
    stops = tuple(
        data.draw(st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=4, unique=True))
    )
    for tokenizer in (TOKENIZER, FALLBACK):
        assert run(text, StopSpec(strings=stops), tokenizer) == reference(text, stops, tokenizer)
