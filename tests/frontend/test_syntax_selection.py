"""Parser selection: one tag engine reads every tag tool syntax and one think parser every think-tag
reasoning syntax; only their layouts, read from the contract's syntax data, differ."""

from __future__ import annotations

import pytest

from helios.frontend.detokenize import Piece
from helios.frontend.reasoning import REASONING, ThinkLayout, ThinkReasoningParser, think_layout
from helios.frontend.syntaxes import frontend_for, xtml
from helios.frontend.syntaxes.selection import reasoning_parser_for, tag_layout, tool_parser_for
from helios.frontend.syntaxes.tagged import TaggedToolParser

THINK_PAIRINGS = [("none", "think"), ("qwen-coder", "think"), ("glm", "think"), ("dsml", "think"),
                  ("xtml", "think"), ("xtml", "xtml")]  # fmt: skip


@pytest.mark.parametrize(("tools", "reasoning"), THINK_PAIRINGS)
def test_one_think_parser_serves_every_think_syntax(tools: str, reasoning: str) -> None:
    frontend = frontend_for(tools, reasoning)
    assert type(reasoning_parser_for(frontend)) is ThinkReasoningParser


@pytest.mark.parametrize("tools", ["qwen-coder", "glm", "dsml", "xtml"])
def test_one_tag_engine_serves_every_tag_syntax(tools: str) -> None:
    frontend = frontend_for(tools, "think")
    assert type(tool_parser_for(frontend)) is TaggedToolParser
    assert tag_layout(frontend).opener == frontend.tool_syntax.opener  # type: ignore[union-attr]


def test_atem_blocks_are_read_only_inside_recipient_frames() -> None:
    frontend = frontend_for("atem", "recipient")
    assert tag_layout(frontend) is not None  # the structured-output grammar writes its blocks
    assert tool_parser_for(frontend) is None  # the recipient frame parser reads them


def test_think_layouts() -> None:
    assert think_layout(frontend_for("qwen-coder", "think")) == ThinkLayout(
        open="<think>", close="</think>", terminal_marker="<tool_call>", wrapping_newlines=True
    )
    assert think_layout(frontend_for("none", "think")).terminal_marker == ""
    assert xtml.xtml_think_layout(frontend_for("xtml", "xtml")) == ThinkLayout(
        open="<xtml:think>", close="</xtml:think>", terminal_marker="<xtml:tool_calls>",
        tool_closer="</xtml:tool_calls>",
    )  # fmt: skip


def test_interleaved_thinking_is_layout_data() -> None:
    """The same tags with and without `tool_closer`: only the layout decides whether reasoning opens
    again after a tool block."""
    text = "<xtml:think>a</xtml:think><xtml:tool_calls>x</xtml:tool_calls><xtml:think>b</xtml:think>done"
    layout = xtml.xtml_think_layout(frontend_for("xtml", "xtml"))

    def channels(layout: ThinkLayout) -> tuple[str, str]:
        parser = ThinkReasoningParser(layout)
        routed = parser.feed(Piece(text)) + parser.finish()
        return ("".join(p.text for c, p in routed if c == REASONING),
                "".join(p.text for c, p in routed if c != REASONING))  # fmt: skip

    assert channels(layout) == ("ab", "<xtml:tool_calls>x</xtml:tool_calls>done")
    start_only = ThinkLayout(open=layout.open, close=layout.close, terminal_marker=layout.terminal_marker)
    assert channels(start_only) == ("a", "<xtml:tool_calls>x</xtml:tool_calls><xtml:think>bdone")
