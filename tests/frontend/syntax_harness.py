"""Test helper for the syntax tests: run a frontend's OutputPipeline over pieces, check a parsed
result exactly, and split text into random deltas (hypothesis) for streamed-equals-one-shot."""

from __future__ import annotations

import itertools
import json

from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.pipeline import Delta, OutputAccumulator, OutputPipeline, ParsedOutput

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "metric": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "options": {"type": "object"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "f"}},  # no schema: values stay strings unless flagged
]

TYPED_ARGUMENTS = {
    "city": 'Paris "x"', "days": 3, "ratio": 2.5, "metric": True, "tags": ["a", "b"],
    "options": {"x": 1, "y": [None]}, "note": None,
}  # fmt: skip


def counter_ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def run(frontend, pieces, *, tools=TOOLS, token_only=frozenset(), reasoning_open=False, frame=None,
        parse_tools=True, structured=False) -> tuple[ParsedOutput, list[Delta]]:  # fmt: skip
    pipeline = OutputPipeline(frontend, tools=tools, token_only=token_only, reasoning_open=reasoning_open,
                              frame=frame, parse_tools=parse_tools, structured=structured,
                              id_factory=counter_ids())  # fmt: skip
    deltas: list[Delta] = []
    for piece in pieces:
        deltas.extend(pipeline.feed([piece]))
    deltas.extend(pipeline.finish())
    accumulator = OutputAccumulator()
    accumulator.add(deltas)
    return accumulator.result(), deltas


def text_pieces(text: str, markers=()) -> list[Piece]:
    """`text` as pieces, each occurrence of a marker string as its own marker piece."""
    pieces: list[Piece] = []
    rest = text
    while rest:
        hits = [(rest.find(m), m) for m in markers if m in rest]
        if not hits:
            pieces.append(Piece(rest))
            break
        index, marker = min(hits, key=lambda h: (h[0], -len(h[1])))
        if index:
            pieces.append(Piece(rest[:index]))
        pieces.append(Piece(marker, marker=True))
        rest = rest[index + len(marker) :]
    return pieces


def check(result: ParsedOutput, reasoning, content, calls) -> None:
    """Reasoning, content and tool calls exactly: calls as [(name, arguments dict)]; the arguments
    text is the canonical JSON of the dict (so fragments concatenated to exactly that object)."""
    assert result.reasoning == reasoning
    assert result.content == content
    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [(n, a) for n, a in calls]
    for call, (_, arguments) in zip(result.tool_calls, calls, strict=True):
        assert call.arguments == json.dumps(arguments, ensure_ascii=False)
    assert [c.id for c in result.tool_calls] == [f"call_{i}" for i in range(len(calls))]


def check_whole_and_per_character(frontend, text: str, reasoning, content, calls) -> None:
    """`check` of `text` run as one piece, then as one piece a character."""
    check(run(frontend, [Piece(text)])[0], reasoning, content, calls)
    check(run(frontend, [Piece(c) for c in text])[0], reasoning, content, calls)


@st.composite
def splittings(draw, pieces: list[Piece]) -> list[Piece]:
    """The same pieces with every text piece cut at random points (marker pieces stay whole); some
    deltas carry many characters at once, some one."""
    out: list[Piece] = []
    for piece in pieces:
        if piece.marker or len(piece.text) < 2:
            out.append(piece)
            continue
        cuts = sorted(draw(st.sets(st.integers(1, len(piece.text) - 1), max_size=min(12, len(piece.text) - 1))))
        bounds = [0, *cuts, len(piece.text)]
        out.extend(Piece(piece.text[a:b]) for a, b in itertools.pairwise(bounds))
    return out


VALUE_CHARS = list('ab é"\\\n<>/{}[]=0123|｜:_-')


def value_text():
    return st.text(st.sampled_from(VALUE_CHARS), max_size=12)


def assert_streaming_equal(frontend, pieces: list[Piece], split: list[Piece], **options) -> None:
    one_shot, _ = run(frontend, [Piece("".join(p.text for p in pieces))] if not any(p.marker for p in pieces)
                      else pieces, **options)  # fmt: skip
    streamed, _ = run(frontend, split, **options)
    whole, _ = run(frontend, pieces, **options)
    assert streamed == whole == one_shot
