"""The contract's frontend pairings, through PreparedContract: every syntax pairs with think tags
except where the specification pairs them (XTML think needs the XTML tools; recipient-header
reasoning and ATEM only together), the terminal marker must be the tool opener, and the syntax data
of every named syntax survives the typed contract's round trip."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract
from helios.contract import errors as e
from helios.contract.codec import frontend_from_proto, frontend_to_proto
from helios.frontend.syntaxes import IncompatibleSyntaxes, frontend_for
from helios.proto import contract_pb2 as c
from tests.contract import valid

VALID_PAIRINGS = [("qwen-coder", "think"), ("glm", "think"), ("dsml", "think"), ("xtml", "think"),
                  ("glm", "none"), ("xtml", "xtml"), ("atem", "recipient"), ("none", "think")]  # fmt: skip


def serving_with(frontend: c.FrontendContract) -> c.ServingContract:
    serving = valid.serving()
    eos = list(serving.model.frontend.eos_token_ids)
    serving.model.frontend.tool_parser = frontend.tool_parser
    serving.model.frontend.reasoning_parser = frontend.reasoning_parser
    serving.model.frontend.tool_syntax.CopyFrom(frontend.tool_syntax)
    serving.model.frontend.reasoning_syntax.CopyFrom(frontend.reasoning_syntax)
    serving.model.frontend.prompt_syntax.CopyFrom(frontend.prompt_syntax)
    assert list(serving.model.frontend.eos_token_ids) == eos
    return serving


@pytest.mark.parametrize("tools, reasoning", VALID_PAIRINGS)
def test_valid_pairings_decode(tools: str, reasoning: str) -> None:
    frontend = frontend_for(tools, reasoning)
    contract = PreparedContract.decode(serving_with(frontend), valid.manifest())
    assert frontend_to_proto(contract.frontend).tool_syntax == frontend.tool_syntax
    again = frontend_to_proto(frontend_from_proto(frontend))
    for part in ("tool_syntax", "reasoning_syntax", "prompt_syntax"):
        assert getattr(again, part) == getattr(frontend, part)


INVALID = [
    ("XTML think with Qwen Coder tools", "qwen-coder", "think", c.REASONING_PARSER_XTML_THINK, None,
     "model.frontend.reasoning_parser"),
    ("XTML think with GLM tools", "glm", "think", c.REASONING_PARSER_XTML_THINK, None, "model.frontend.reasoning_parser"),
    ("XTML think with DSML tools", "dsml", "think", c.REASONING_PARSER_XTML_THINK, None,
     "model.frontend.reasoning_parser"),
    ("recipient headers with XTML tools", "xtml", "xtml", c.REASONING_PARSER_RECIPIENT_HEADER, None,
     "model.frontend.reasoning_parser"),
    ("recipient headers with GLM tools", "glm", "think", c.REASONING_PARSER_RECIPIENT_HEADER, None,
     "model.frontend.reasoning_parser"),
    ("ATEM tools with think reasoning", "glm", "think", None, c.TOOL_PARSER_ATEM, "model.frontend.tool_parser"),
]  # fmt: skip


@pytest.mark.parametrize("case", INVALID, ids=[case[0] for case in INVALID])
def test_invalid_pairings_are_rejected(case) -> None:
    _, tools, reasoning, reasoning_parser, tool_parser, path = case
    serving = serving_with(frontend_for(tools, reasoning))
    if reasoning_parser is not None:
        serving.model.frontend.reasoning_parser = reasoning_parser
    if tool_parser is not None:
        serving.model.frontend.tool_parser = tool_parser
    problems = PreparedContract.check(serving, valid.manifest())
    assert any(type(p) is e.IncompatibleFrontend and p.path == path for p in problems), problems
    with pytest.raises(e.IncompatibleFrontend):
        PreparedContract.decode(serving, valid.manifest())


@pytest.mark.parametrize("tools", ["qwen-coder", "glm", "dsml", "xtml"])
def test_terminal_marker_must_be_the_tool_opener(tools: str) -> None:
    serving = serving_with(frontend_for(tools, "xtml" if tools == "xtml" else "think"))
    serving.model.frontend.reasoning_syntax.terminal_marker = "<other>"
    with pytest.raises(e.TerminalMarkerMismatch):
        PreparedContract.decode(serving, valid.manifest())


def test_named_pairings_refuse_what_the_contract_refuses() -> None:
    for tools, reasoning in [("glm", "xtml"), ("atem", "think"), ("qwen-coder", "recipient")]:
        with pytest.raises(IncompatibleSyntaxes):
            frontend_for(tools, reasoning)
