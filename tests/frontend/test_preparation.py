"""Request parsing and preparation: normalized messages, sampling precedence (request, core
defaults, runtime), the output limit, prompt length, reasoning state and delimiter markers."""

from __future__ import annotations

import pytest

from helios.frontend.errors import (
    ImagesNotServed,
    IncompatibleOptions,
    InvalidFieldValue,
    OutsideCapacity,
    PromptTooLong,
    UnknownModel,
)
from helios.frontend.openai_request import parse_chat_request, parse_completion_request
from helios.frontend.preparation import Preparer
from tests.frontend import tinyfront

USER = [{"role": "user", "content": "hi"}]


def preparer(context_tokens: int = 4096) -> Preparer:
    return Preparer(
        tinyfront.make_bootstrap(), served_id="tiny", aliases=("t",), context_tokens=context_tokens
    )


def test_messages_are_normalized_for_the_template() -> None:
    request = parse_chat_request({
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
        ]
    })  # fmt: skip
    system, assistant, tool = request.messages
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert tool["tool_call_id"] == "c1"
    with pytest.raises(InvalidFieldValue) as error:
        parse_chat_request({"messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]})  # fmt: skip
    assert error.value.param == "messages.0.tool_calls.0.function.arguments"
    # image parts stay parts for the template ({"type": "image"} in place); the core decides on them
    with_image = parse_chat_request({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]})  # fmt: skip
    assert with_image.messages[0]["content"] == [{"type": "text", "text": "what is this?"}, {"type": "image"}]
    assert [(part.param, part.url[:15]) for part in with_image.images] == [("messages.0.content.1", "data:image/png;")]
    with pytest.raises(ImagesNotServed, match="no vision: image content parts are not accepted") as error:
        preparer().prepare_chat(with_image, "r0")  # a text-only core
    assert error.value.param == "messages.0.content.1"
    with pytest.raises(InvalidFieldValue, match="only user messages carry image parts") as error:
        parse_chat_request({"messages": [{"role": "system", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]})  # fmt: skip
    assert error.value.param == "messages.0.content.0"
    with pytest.raises(InvalidFieldValue, match="only text and image_url content parts") as error:
        parse_chat_request({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})
    assert error.value.param == "messages.0.content.0"


def test_sampling_precedence_and_output_limit() -> None:
    prep = preparer()
    prepared = prep.prepare_chat(parse_chat_request({"messages": USER, "top_p": 0.5, "seed": 7}), "r1")
    sampling = prepared.runtime_request.generation.sampling
    # request values win; the core's temperature 0 fills the rest; runtime defaults after that
    assert (sampling.top_p, sampling.temperature, sampling.top_k, sampling.seed) == (0.5, 0.0, 0, 7)
    assert prepared.runtime_request.generation.max_tokens == 64  # the core's max_output_tokens
    assert parse_chat_request({"messages": USER, "top_k": -1}).sampling.top_k == 0
    small = preparer(context_tokens=len(prepared.prompt_token_ids) + 5)
    assert (
        small.prepare_chat(parse_chat_request({"messages": USER}), "r2").runtime_request.generation.max_tokens
        == 5
    )
    # an explicit output limit past the room the prompt leaves: outside the prepared capacities (503)
    with pytest.raises(OutsideCapacity) as outside:
        small.prepare_chat(parse_chat_request({"messages": USER, "max_tokens": 50}), "r3")
    assert (outside.value.param, outside.value.limit, outside.value.value) == ("max_tokens", 5, 50)
    assert small.prepare_chat(parse_chat_request({"messages": USER, "max_tokens": 5}), "r4").runtime_request \
        .generation.max_tokens == 5
    with pytest.raises(PromptTooLong) as error:
        preparer(context_tokens=len(prepared.prompt_token_ids)).prepare_chat(
            parse_chat_request({"messages": USER}), "r"
        )
    assert error.value.param == "messages"


def test_models_and_aliases() -> None:
    prep = preparer()
    assert prep.check_model(None) == prep.check_model("t") == "tiny"
    with pytest.raises(UnknownModel):
        prep.check_model("other")


def test_reasoning_state_markers_and_observation_flags() -> None:
    prep = preparer()
    body = {"messages": USER, "chat_template_kwargs": {"enable_thinking": True}, "return_token_ids": True,
            "return_token_timestamps": True, "stop": ["x"]}  # fmt: skip
    prepared = prep.prepare_chat(parse_chat_request(body), "r")
    assert prepared.prompt.endswith("<think>\n")
    request = prepared.runtime_request
    assert request.observe_tokens and request.observe_timestamps and request.host_stop
    # the prompt opened reasoning: output starts in it
    from helios.frontend.detokenize import Piece
    from helios.frontend.pipeline import OutputAccumulator

    close = Piece("</think>", marker=True)
    accumulator = OutputAccumulator()
    accumulator.add(prepared.pipeline.feed([Piece("plan\n"), close, Piece("\n\nok")]) + prepared.pipeline.finish())
    assert (accumulator.result().reasoning, accumulator.result().content) == ("plan", "ok")
    assert set(prep.bootstrap.delimiter_markers().values()) == {"<think>", "</think>", "<tool_call>"}
    with pytest.raises(IncompatibleOptions):
        parse_chat_request({"messages": USER, "return_token_timestamps": True})


def test_completion_requests() -> None:
    prep = preparer()
    request = parse_completion_request({"prompt": [5, 6, 7], "max_tokens": 3})
    prepared = prep.prepare_completion(request, "c")
    assert prepared.prompt_token_ids == (5, 6, 7) and prepared.runtime_request.generation.max_tokens == 3
    assert parse_completion_request({"prompt": "x"}).max_tokens == 16
    echoed = prep.prepare_completion(parse_completion_request({"prompt": [5, 6], "echo": True, "max_tokens": 0}), "e")
    assert echoed.echo == prep.bootstrap.decode([5, 6]) and echoed.scores_only
    assert echoed.runtime_request.generation.max_tokens == 1 and echoed.runtime_request.prompt_logprobs is None
    with pytest.raises(IncompatibleOptions) as error:  # echo is returned in whole responses only
        parse_completion_request({"prompt": "x", "echo": True, "stream": True})
    assert error.value.param == "echo"
    with pytest.raises(InvalidFieldValue) as error:  # max_tokens 0 means the prompt alone, with echo
        parse_completion_request({"prompt": "x", "max_tokens": 0})
    assert error.value.param == "max_tokens"
    with pytest.raises(InvalidFieldValue) as error:  # a core without scored prefill: the missing graphs named
        prep.prepare_completion(parse_completion_request({"prompt": "x", "echo": True, "logprobs": 1,
                                                          "max_tokens": 0}), "s")
    assert error.value.param == "logprobs" and "SCORED_PREFILL" in str(error.value)
    scoring = Preparer(prep.bootstrap, served_id="tiny-chat", context_tokens=64, prompt_score_width=4)
    prepared = scoring.prepare_chat(parse_chat_request({"messages": USER, "prompt_logprobs": 4}), "p")
    assert prepared.runtime_request.prompt_logprobs == 4
    with pytest.raises(InvalidFieldValue) as error:
        scoring.prepare_chat(parse_chat_request({"messages": USER, "prompt_logprobs": 5}), "p")
    assert error.value.param == "prompt_logprobs" and "4 alternatives" in str(error.value)


def test_the_speculation_extension_reaches_the_prepared_request() -> None:
    from helios.frontend.errors import InvalidFieldType

    prep = preparer()
    for value, expected in ((None, True), (True, True), (False, False)):
        body = {"messages": USER} if value is None else {"messages": USER, "speculation": value}
        assert prep.prepare_chat(parse_chat_request(body), "r").runtime_request.speculation is expected
        completion = parse_completion_request({"prompt": "hi"} if value is None else {"prompt": "hi", "speculation": value})
        assert prep.prepare_completion(completion, "c").runtime_request.speculation is expected
    for bad in ("false", 0, [False]):
        with pytest.raises(InvalidFieldType) as error:
            parse_chat_request({"messages": USER, "speculation": bad})
        assert error.value.param == "speculation"
