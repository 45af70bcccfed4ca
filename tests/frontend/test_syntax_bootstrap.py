"""Bootstrap with every syntax: the new parsers load, their one-token delimiters (XTML tags, the
recipient header controls) become markers, XTML think follows the prompt's reasoning state, and
syntax data a parser needs is required."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from helios.frontend.bootstrap import Bootstrap, InvalidFrontendContract
from helios.frontend.syntaxes import frontend_for
from helios.frontend.syntaxes.recipient import BODY, FrameState, initial_frame_state
from tests.frontend import tinyfront

CONTROLS = ["<|start|>", "<|message|>", "<|eom|>", "<|end|>", "<xtml:think>", "</xtml:think>", "<xtml:tool_calls>",
            "</xtml:tool_calls>"]  # fmt: skip


def tokenizer_json() -> str:
    tokenizer = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
    tokenizer.add_special_tokens(CONTROLS)
    return tokenizer.to_str()


def bootstrap(tools: str, reasoning: str, **changes) -> Bootstrap:
    frontend = frontend_for(tools, reasoning)
    frontend.eos_token_ids.append(Tokenizer.from_str(tokenizer_json()).token_to_id("<|end|>"))
    for path, value in changes.items():
        message, name = path.split(".")
        setattr(getattr(frontend, message), name, value)
    return Bootstrap(tokenizer_json=tokenizer_json(), chat_template="{{ messages[0].content }}", frontend=frontend)


@pytest.mark.parametrize("tools, reasoning", [("glm", "think"), ("dsml", "think"), ("xtml", "xtml"),
                                              ("atem", "recipient"), ("dsml", "none")])  # fmt: skip
def test_every_syntax_loads(tools: str, reasoning: str) -> None:
    assert bootstrap(tools, reasoning).frontend.tool_syntax.opener


def test_markers_of_xtml_and_recipient_frames() -> None:
    assert set(bootstrap("xtml", "xtml").delimiter_markers().values()) == {
        "<xtml:think>", "</xtml:think>", "<xtml:tool_calls>", "</xtml:tool_calls>"}  # fmt: skip
    assert set(bootstrap("atem", "recipient").delimiter_markers().values()) == {"<|start|>", "<|message|>", "<|eom|>"}


def test_xtml_think_prompt_state() -> None:
    b = bootstrap("xtml", "xtml", **{"prompt_syntax.assistant_open": "<|im_start|>assistant\n",
                                     "prompt_syntax.message_end": "<|im_end|>"})  # fmt: skip
    assert b.prompt_opens_reasoning("<|im_start|>assistant\n<xtml:think>")
    assert not b.prompt_opens_reasoning("<|im_start|>assistant\n<xtml:think>x</xtml:think>")
    # a template resuming the assistant turn after an embedded tool response: only the text after the
    # last message end can open reasoning
    resumed = "<|im_start|>assistant\n<xtml:think>a</xtml:think>call<|im_end|>\n<tool_response>r</tool_response>"
    assert not b.prompt_opens_reasoning("<|im_start|>assistant\n<xtml:think>a<|im_end|>\nresumed")
    assert b.prompt_opens_reasoning(resumed + "<|im_end|>\n<xtml:think>")
    assert initial_frame_state("<|start|>assistant to=self<|message|>", bootstrap("atem", "recipient").frontend) == \
        FrameState(BODY, "assistant to=self")


@pytest.mark.parametrize("tools, reasoning, change", [
    ("glm", "think", {"tool_syntax.value_close": ""}),
    ("dsml", "think", {"tool_syntax.string_flag": ""}),
    ("xtml", "xtml", {"tool_syntax.invoke_close": ""}),
    ("xtml", "xtml", {"reasoning_syntax.close": ""}),
    ("atem", "recipient", {"prompt_syntax.header_message": ""}),
    ("atem", "recipient", {"reasoning_syntax.tool_recipient": ""}),
])  # fmt: skip
def test_missing_syntax_data_is_rejected(tools: str, reasoning: str, change: dict) -> None:
    with pytest.raises(InvalidFrontendContract):
        bootstrap(tools, reasoning, **change)
