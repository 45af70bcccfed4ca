"""The HTTP server in process, driven by the official openai client and httpx: shapes, streaming,
observation, tools, reasoning, stops and every status code, over a scripted engine."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from helios.runtime.limits import AdmissionLimits
from tests.frontend import tinyfront
from tests.runtime.scripted import ScriptedEngine
from tests.server.cases import INVALID
from tests.server.inprocess import ALIASES, SERVED_ID, serving

TOKENIZER = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
EOS = tinyfront.token_id("<|im_end|>")
USER = [{"role": "user", "content": "Hi there"}]


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=20)


def metric_values(base: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(base + "/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def wait_for(predicate, timeout=10.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def test_chat_json_and_stream_with_usage() -> None:
    engine = ScriptedEngine(ids("Hello world!") + [EOS])
    with serving(engine) as (base, _):
        api = client(base)
        response = api.chat.completions.create(model=SERVED_ID, messages=USER)
        assert response.object == "chat.completion" and response.model == SERVED_ID
        choice = response.choices[0]
        assert choice.message.content == "Hello world!" and choice.finish_reason == "stop"
        assert choice.message.role == "assistant" and choice.message.tool_calls is None
        assert response.usage.completion_tokens == len(ids("Hello world!")) + 1
        assert response.usage.prompt_tokens == len(engine.started[0])
        chunks = list(api.chat.completions.create(model="tiny", messages=USER, stream=True,
                                                  stream_options={"include_usage": True}))  # fmt: skip
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello world!"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert (
            chunks[-1].choices == []
            and chunks[-1].usage.completion_tokens == response.usage.completion_tokens
        )
        assert all(c.usage is None for c in chunks[:-1])
        # without include_usage, an unobserved stream carries no usage
        chunks = list(api.chat.completions.create(model=SERVED_ID, messages=USER, stream=True))
        assert all(c.usage is None for c in chunks)


def test_models_and_health() -> None:
    with serving(ScriptedEngine([EOS])) as (base, _):
        models = client(base).models.list()
        assert [m.id for m in models.data] == [SERVED_ID, *ALIASES]
        assert httpx.get(base + "/health").json()["status"] == "ok"


def test_return_token_ids_json_and_stream() -> None:
    output = ids("Hey") + [EOS]
    engine = ScriptedEngine(output)
    with serving(engine) as (base, _):
        api = client(base)
        response = api.chat.completions.create(
            model=SERVED_ID, messages=USER, extra_body={"return_token_ids": True}
        )
        extra = response.model_extra
        assert extra["prompt_token_ids"] == list(engine.started[0])
        assert response.choices[0].model_extra["token_ids"] == output  # EOS included
        assert extra["reused_prompt_tokens"] == 0 and "performance" not in extra
        chunks = list(api.chat.completions.create(model=SERVED_ID, messages=USER, stream=True,
                                                  extra_body={"return_token_ids": True}))  # fmt: skip
        assert chunks[0].model_extra["prompt_token_ids"] == list(engine.started[1])
        metadata = [c for c in chunks if c.choices and c.choices[0].model_extra.get("token_ids")]
        assert [c.choices[0].model_extra["token_ids"][0] for c in metadata] == output
        for chunk in metadata:
            delta = chunk.choices[0].delta
            assert delta.content is None and delta.role is None and not delta.tool_calls
        text_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
        assert all("token_ids" not in c.choices[0].model_extra for c in text_chunks)
        terminal = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
        assert terminal.usage.completion_tokens == len(
            output
        )  # an observed stream: usage on the terminal chunk


def test_timestamps_and_performance() -> None:
    output = ids("abc") + [EOS]
    with serving(ScriptedEngine(output)) as (base, _):
        body = {
            "model": SERVED_ID,
            "messages": USER,
            "return_token_ids": True,
            "return_token_timestamps": True,
        }
        data = httpx.post(base + "/v1/chat/completions", json=body).json()
        stamps = data["choices"][0]["token_timestamps_ns"]
        assert len(stamps) == len(output) and stamps == sorted(stamps)
        performance = data["performance"]
        assert 0 <= performance["ingress_ns"] <= performance["enqueue_ns"] <= stamps[0]
        assert performance["reused_prompt_tokens"] == 0
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        with httpx.stream("POST", base + "/v1/chat/completions", json=body) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        timed = [e for e in events if e["choices"] and "token_timestamps_ns" in e["choices"][0]]
        assert len(timed) == len(output)
        assert events[-1]["choices"] == [] and "performance" in events[-1]


def test_tools_rendered_and_tool_calls_parsed() -> None:
    text = "<think>\nNeed weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"  # noqa: E501
    engine = ScriptedEngine(ids(text) + [EOS])
    with serving(engine) as (base, _):
        api = client(base)
        response = api.chat.completions.create(model=SERVED_ID, messages=USER, tools=[tinyfront.WEATHER_TOOL])
        prompt = TOKENIZER.decode(list(engine.started[0]), skip_special_tokens=False)
        assert '"name": "get_weather"' in prompt  # the tools reached the chat template
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.model_extra["reasoning_content"] == "Need weather."
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}
        chunks = list(api.chat.completions.create(model=SERVED_ID, messages=USER, tools=[tinyfront.WEATHER_TOOL],
                                                  stream=True))  # fmt: skip
        deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        assert [d.function.name for d in deltas if d.function.name] == ["get_weather"]
        assert len([d for d in deltas if d.id]) == 1
        assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
        reasoning = "".join(
            c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
        )
        assert reasoning == "Need weather."
        # tool_choice "none": the same text is content
        response = api.chat.completions.create(model=SERVED_ID, messages=USER, tools=[tinyfront.WEATHER_TOOL],
                                               tool_choice="none")  # fmt: skip
        assert (
            response.choices[0].message.tool_calls is None
            and "<tool_call>" in response.choices[0].message.content
        )


def test_assistant_history_with_tool_calls_renders() -> None:
    engine = ScriptedEngine(ids("Sunny.") + [EOS])
    messages = USER + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]  # fmt: skip
    with serving(engine) as (base, _):
        response = client(base).chat.completions.create(model=SERVED_ID, messages=messages)
        assert response.choices[0].message.content == "Sunny."
        prompt = TOKENIZER.decode(list(engine.started[0]), skip_special_tokens=False)
        assert "<parameter=city>\nParis\n</parameter>" in prompt and "<tool_response>\nsunny" in prompt


def test_string_stop() -> None:
    engine = ScriptedEngine(ids("Hello world again") + [EOS])
    with serving(engine) as (base, _):
        api = client(base)
        response = api.chat.completions.create(model=SERVED_ID, messages=USER, stop=["o w"])
        assert response.choices[0].message.content == "Hell" and response.choices[0].finish_reason == "stop"
        chunks = list(api.chat.completions.create(model=SERVED_ID, messages=USER, stop="o w", stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hell"
        response = api.chat.completions.create(model=SERVED_ID, messages=USER, stop=[])  # disables stops
        assert response.choices[0].message.content == "Hello world again"


def test_stop_token_that_is_eos() -> None:
    output = ids("ok") + [EOS]
    with serving(ScriptedEngine(output)) as (base, _):
        body = {"model": SERVED_ID, "messages": USER, "stop_token_ids": [EOS], "return_token_ids": True}
        data = httpx.post(base + "/v1/chat/completions", json=body).json()
        choice = data["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["content"] == "ok"
        assert choice["token_ids"] == output and data["usage"]["completion_tokens"] == len(output)


def test_completions_endpoint() -> None:
    engine = ScriptedEngine(ids(" there") + [EOS])
    with serving(engine) as (base, _):
        api = client(base)
        response = api.completions.create(model=SERVED_ID, prompt="Hello", max_tokens=8)
        assert response.choices[0].text == " there" and response.choices[0].finish_reason == "stop"
        assert list(engine.started[0]) == ids("Hello")
        chunks = list(api.completions.create(model=SERVED_ID, prompt="Hello", max_tokens=2, stream=True))
        assert "".join(c.choices[0].text for c in chunks) == TOKENIZER.decode(ids(" there")[:2])
        assert chunks[-1].choices[0].finish_reason == "length"


def test_invalid_fields_are_400_naming_the_field() -> None:
    with serving(ScriptedEngine([EOS]), context_tokens=512) as (base, _):
        for change, param in INVALID:
            body = {"model": SERVED_ID, "messages": USER, **change}
            body = {k: v for k, v in body.items() if v is not None}
            response = httpx.post(base + "/v1/chat/completions", json=body)
            assert response.status_code == 400, (param, response.text)
            error = response.json()["error"]
            assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_a_request_opts_out_of_speculation_through_extra_body() -> None:
    engine = ScriptedEngine(ids("x") + [EOS])
    with serving(engine) as (base, _):
        api = client(base)
        api.chat.completions.create(model=SERVED_ID, messages=USER, extra_body={"speculation": False})
        api.chat.completions.create(model=SERVED_ID, messages=USER, extra_body={"speculation": None})
        api.completions.create(model=SERVED_ID, prompt="Hi", max_tokens=2, extra_body={"speculation": False})
        api.chat.completions.create(model=SERVED_ID, messages=USER)
    assert engine.speculation == [False, True, False, True]


def test_null_flags_mean_false_and_bad_json_is_400() -> None:
    with serving(ScriptedEngine(ids("x") + [EOS])) as (base, _):
        body = {"model": SERVED_ID, "messages": USER, "return_token_ids": None, "stream_options": None}
        data = httpx.post(base + "/v1/chat/completions", json=body).json()
        assert "prompt_token_ids" not in data
        response = httpx.post(base + "/v1/chat/completions", content=b"{not json",
                              headers={"content-type": "application/json"})  # fmt: skip
        assert response.status_code == 400 and response.json()["error"]["param"] == "body"
        with pytest.raises(openai.BadRequestError):
            client(base).chat.completions.create(model=SERVED_ID, messages=[])


def test_429_when_admission_is_full() -> None:
    engine = ScriptedEngine([5] * 400 + [EOS], delay_s=0.01)
    limits = AdmissionLimits(max_active=1, queue_capacity=1)
    with serving(engine, limits=limits) as (base, state):
        held = []
        for _ in range(2):  # queue_capacity + max_active streams hold every permit
            stream = httpx.stream("POST", base + "/v1/chat/completions",
                                  json={"model": SERVED_ID, "messages": USER, "stream": True, "max_tokens": 400}, timeout=30)  # fmt: skip
            response = stream.__enter__()
            held.append((stream, response))
        assert state.admission.in_use == 2
        with pytest.raises(openai.RateLimitError):
            client(base).chat.completions.create(model=SERVED_ID, messages=USER)
        assert (
            metric_values(base)[("helios_http_responses_total", (("code", "429"), ("endpoint", "chat")))] == 1
        )
        for stream, _ in held:
            stream.__exit__(None, None, None)
        wait_for(lambda: state.admission.in_use == 0)


def test_503_for_admission_rejection() -> None:
    from tests.runtime.scripted import ShortOfPages

    # the engine can never fit a prompt of more than 3 tokens: a scheduler admission rejection
    engine = ScriptedEngine([EOS], reject=lambda request, _: len(request.prompt_token_ids) > 3)
    with serving(engine, rejections=(ShortOfPages,)) as (base, _):
        with pytest.raises(openai.InternalServerError) as error:
            client(base).chat.completions.create(model=SERVED_ID, messages=USER)
        assert error.value.status_code == 503 and error.value.body["code"] == "admission_rejected"
        assert error.value.response.headers.get("retry-after") is None  # it can never fit: permanent
        body = {"model": SERVED_ID, "messages": USER, "stream": True}
        with httpx.stream("POST", base + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert "error" in json.loads(lines[-1][6:]) and "[DONE]" not in lines[-1]
        assert json.loads(lines[-1][6:])["error"]["code"] == "admission_rejected"
        assert httpx.get(base + "/health").json()["status"] == "ok"  # rejection leaves the model healthy


def test_max_tokens_past_the_context_is_a_permanent_503_naming_the_field() -> None:
    """Finding 7: the specification's admission failure, with the field, the limit and the value,
    no Retry-After, and `x-should-retry: false` so the official client does not retry it."""
    with serving(ScriptedEngine([EOS]), context_tokens=256) as (base, state):
        retrying = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=3, timeout=20)
        with pytest.raises(openai.InternalServerError) as error:
            retrying.chat.completions.create(model=SERVED_ID, messages=USER, max_tokens=250)
        response = error.value.response
        assert response.status_code == 503 and "retry-after" not in response.headers
        prompt = 256 - error.value.body["limit"]
        assert error.value.body["param"] == "max_tokens" and error.value.body["value"] == 250 and prompt > 6
        assert error.value.body["code"] == "context_length_exceeded" and "max_tokens" in error.value.body["message"]
        assert state.counters.responses[("chat", 503)] == 1  # one request: the client did not retry
        for stream in (False, True):  # rejected before any SSE header: a 503 either way
            response = httpx.post(base + "/v1/completions", json={"prompt": "Hi", "max_tokens": 256, "stream": stream})
            assert response.status_code == 503 and response.json()["error"]["param"] == "max_tokens"


def test_500_for_execution_failure() -> None:
    engine = ScriptedEngine([5, 6, 7, EOS], fail_at=1)
    with serving(engine) as (base, _):
        with pytest.raises(openai.InternalServerError) as error:
            client(base).chat.completions.create(model=SERVED_ID, messages=USER)
        assert error.value.status_code == 500
        body = {"model": SERVED_ID, "messages": USER, "stream": True}
        with httpx.stream("POST", base + "/v1/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert json.loads(lines[-1][6:])["error"]["code"] == "execution_failed"
        assert not any("[DONE]" in line for line in lines)


def test_dropped_stream_cancels_and_releases() -> None:
    engine = ScriptedEngine([5] * 2000 + [EOS], delay_s=0.005)
    with serving(engine) as (base, state):
        body = {"model": SERVED_ID, "messages": USER, "stream": True, "max_tokens": 2000}
        with httpx.stream("POST", base + "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()
            for _ in range(6):
                next(lines)
        # the connection is closed mid-stream
        wait_for(lambda: engine.released == 1)
        values = metric_values(base)
        assert values[("helios_requests_finished_total", (("termination", "cancelled"),))] == 1
        assert values[("helios_requests_active", ())] == 0
        assert values[("helios_http_admission_in_use", ())] == 0
        assert values[("helios_http_client_cancellations_total", ())] == 1


def test_dropped_json_request_cancels() -> None:
    engine = ScriptedEngine([5] * 2000 + [EOS], delay_s=0.005)
    with serving(engine) as (base, state):

        def send():
            try:
                httpx.post(
                    base + "/v1/chat/completions",
                    json={"model": SERVED_ID, "messages": USER, "max_tokens": 2000},
                    timeout=0.3,
                )
            except httpx.TimeoutException:
                pass

        thread = threading.Thread(target=send)
        thread.start()
        thread.join()
        wait_for(lambda: engine.released == 1)
        wait_for(lambda: state.admission.in_use == 0)
        assert state.runtime.metrics().requests_finished["cancelled"] == 1


def test_finished_response_keeps_its_permit_until_read() -> None:
    """A reader that does not take the response: generation finishes and frees its slot, the HTTP
    admission permit stays held until the response has been delivered."""
    import asyncio

    from helios.engine.sequential import SequentialRuntime
    from helios.frontend.preparation import Preparer
    from helios.server.app import create_app
    from helios.server.state import ServerState
    from tests.frontend import tinyfront as tf

    engine = ScriptedEngine(ids("Hello world again and again") + [EOS])
    bootstrap = tf.make_bootstrap()
    runtime = SequentialRuntime(engine, AdmissionLimits(), context_tokens=2048, vocab_size=bootstrap.vocab_size)
    state = ServerState(
        runtime=runtime, preparer=Preparer(bootstrap, served_id=SERVED_ID, context_tokens=2048)
    )
    app = create_app(state)
    body = json.dumps({"model": SERVED_ID, "messages": USER, "stream": True}).encode()

    async def main() -> None:
        reader_ready = asyncio.Event()
        sent: list[dict] = []
        body_delivered = False

        async def receive() -> dict:
            nonlocal body_delivered
            if not body_delivered:
                body_delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays connected

        async def send(message: dict) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and len(sent) == 2:
                await reader_ready.wait()  # the reader pauses after the first chunk

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
            "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
        }  # fmt: skip
        async with app.app.router.lifespan_context(app.app):  # the FastAPI app inside the request guard
            task = asyncio.create_task(app(scope, receive, send))
            for _ in range(500):
                if runtime.metrics().requests_finished["eos"] == 1:
                    break
                await asyncio.sleep(0.01)
            assert runtime.metrics().requests_finished["eos"] == 1 and runtime.metrics().requests_active == 0
            assert state.admission.in_use == 1  # finished, but not yet read
            reader_ready.set()
            await asyncio.wait_for(task, 10)
            assert state.admission.in_use == 0
            assert b"[DONE]" in b"".join(m.get("body", b"") for m in sent)

    asyncio.run(main())


def test_metrics_parse_and_carry_the_flare_metrics() -> None:
    with serving(ScriptedEngine(ids("x") + [EOS])) as (base, _):
        client(base).chat.completions.create(model=SERVED_ID, messages=USER)
        values = metric_values(base)
        assert values[("flare_mixed_grammar_decode_steps_total", ())] == 0
        assert values[("flare_constrained_max_inflight", ())] == 0
        assert values[("helios_requests_finished_total", (("termination", "eos"),))] == 1
        assert values[("helios_graph_launches_total", (("operation", "prefill"),))] == 1
        assert values[("helios_capacity", (("resource", "http_admission"),))] == 4
        for name, labels in values:
            assert all(
                key in ("termination", "operation", "resource", "endpoint", "code") for key, _ in labels
            ), name


@pytest.mark.slow
def test_shutdown_drains_for_five_seconds_then_ends_the_stream() -> None:
    """A stream still generating at shutdown keeps the server up for the five-second drain, then it
    ends with its terminal error event and its request is cancelled."""
    import uvicorn

    from helios.engine.sequential import SequentialRuntime
    from helios.frontend.preparation import Preparer
    from helios.server.app import create_app
    from helios.server.serve import CONNECTION_CLOSE_S, SHUTDOWN_DRAIN_S, HeliosServer
    from helios.server.state import ServerState
    from tests.server.inprocess import free_port

    engine = ScriptedEngine([5] * 5000 + [EOS], delay_s=0.005)
    bootstrap = tinyfront.make_bootstrap()
    runtime = SequentialRuntime(engine, AdmissionLimits(), context_tokens=8192, vocab_size=bootstrap.vocab_size)
    state = ServerState(
        runtime=runtime, preparer=Preparer(bootstrap, served_id=SERVED_ID, context_tokens=8192)
    )
    port = free_port()
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=SHUTDOWN_DRAIN_S + CONNECTION_CLOSE_S)  # fmt: skip
    server = HeliosServer(config, state)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    body = {"model": SERVED_ID, "messages": USER, "stream": True, "max_tokens": 5000}
    with httpx.stream(
        "POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30
    ) as response:
        lines = response.iter_lines()
        next(lines)
        began = time.monotonic()
        server.should_exit = True
        rest = [line for line in lines if line.startswith("data: ")]
        thread.join(20)
        elapsed = time.monotonic() - began
    assert not thread.is_alive()
    assert 4.5 <= elapsed <= 6, elapsed
    assert json.loads(rest[-1][6:])["error"]["code"] == "shutting_down"
    assert runtime.metrics().requests_finished["cancelled"] == 1 and engine.released == 1


def test_an_image_part_sent_by_the_openai_client_to_a_text_only_model_is_400_naming_the_part() -> None:
    import base64
    import io

    import openai
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 12), (200, 30, 90)).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    engine = ScriptedEngine([EOS])
    with serving(engine) as (base, _):
        with pytest.raises(openai.BadRequestError) as caught:
            client(base).chat.completions.create(model=SERVED_ID, messages=[{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": url}}]}])  # fmt: skip
    error = caught.value.body
    assert caught.value.status_code == 400 and error["param"] == "messages.0.content.1"
    assert "no vision" in error["message"] and not engine.started
