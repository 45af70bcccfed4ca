"""Reliability and security of the server in process (issue findings 1-7, 9, 10): no 500 from bad
input and the connection stays usable, bounded bodies, tool schemas and unoffered tools, admission
under a burst (only 200 and 429, with Retry-After), the permanent 503, the request guard, the drain's
refusals and /openapi.json."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from tokenizers import Tokenizer

from helios.runtime.limits import AdmissionLimits
from helios.server.guard import GuardPolicy
from tests.frontend import tinyfront
from tests.runtime.scripted import ScriptedEngine
from tests.server.inprocess import serving

TOKENIZER = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
EOS = tinyfront.token_id("<|im_end|>")
CHAT = "/v1/chat/completions"
LONE = "a\\ud800b"


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def post_raw(client: httpx.Client, path: str, text: str) -> httpx.Response:
    return client.post(path, content=text.encode(), headers={"Content-Type": "application/json"})


BAD_BODIES = [  # (path, JSON text, the param the 400 names)
    (CHAT, '{"messages": [{"role": "user", "content": "@"}], "max_tokens": 4}'.replace("@", LONE), "messages.0.content"),
    ("/v1/completions", '{"prompt": "@", "max_tokens": 4}'.replace("@", LONE), "prompt"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "stop": "@"}'.replace("@", LONE), "stop"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": '
           '{"name": "@"}}]}'.replace("@", LONE), "tools.0.function.name"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": '
           '{"name": "f", "description": "@"}}]}'.replace("@", LONE), "tools.0.function.description"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", '
           '"json_schema": {"schema": {"type": "object", "description": "@"}}}}'.replace("@", LONE),
     "response_format.json_schema.schema.description"),
    (CHAT, '{"messages": ' + "[" * 1000 + "]" * 1000 + "}", None),
    (CHAT, '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}", None),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "temperature"),
    ("/v1/completions", '{"prompt": [1, 100000], "max_tokens": 2}', "prompt.1"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": '
           '"function", "function": {"name": "f", "arguments": "[1]"}}]}]}', "messages.1.tool_calls.0.function.arguments"),
]  # fmt: skip


def test_bad_bodies_are_400_naming_the_field_and_the_connection_stays_usable() -> None:
    engine = ScriptedEngine(ids("ok") + [EOS])
    with serving(engine) as (base, _), httpx.Client(base_url=base, timeout=20) as client:
        for path, text, param in BAD_BODIES:
            response = post_raw(client, path, text)
            assert response.status_code == 400, (param, response.text)
            error = response.json()["error"]
            assert error["param"] is not None and "\n" not in error["message"]
            if param is not None:
                assert error["param"] == param, (param, error)
            else:  # the depth cases
                assert "deeper than" in error["message"]
            # the same keep-alive connection answers the next request
            again = client.post(path, json={"messages": [{"role": "user", "content": "x"}], "prompt": "x",
                                            "max_tokens": 3})  # fmt: skip
            assert again.status_code == 200, again.text
        assert engine.released == len(BAD_BODIES)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "lookup"}}])
@pytest.mark.parametrize("parameters, param", [
    ({"type": "object", "properties": ["city"]}, "tools.0.function.parameters.properties"),
    ({"type": "object", "properties": {"city": {"type": "string"}}, "required": 5}, "tools.0.function.parameters.required"),
])  # fmt: skip
def test_malformed_tool_schemas_with_a_forced_call_are_400(choice, parameters, param: str) -> None:
    with serving(ScriptedEngine([EOS])) as (base, _):
        body = {"messages": [{"role": "user", "content": "x"}], "tool_choice": choice,
                "tools": [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]}  # fmt: skip
        response = httpx.post(base + CHAT, json=body, timeout=20)
        assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_a_call_of_an_unoffered_function_is_content() -> None:
    call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n</parameter>\n</function>\n</tool_call>"
    offered = {"type": "function", "function": {"name": "weather_lookup",
                                                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}  # fmt: skip
    with serving(ScriptedEngine(ids(call) + [EOS])) as (base, _):
        body = {"messages": [{"role": "user", "content": "weather?"}], "tools": [offered]}
        choice = httpx.post(base + CHAT, json=body, timeout=20).json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["tool_calls"] is None
        assert choice["message"]["content"] == call


def test_a_burst_past_capacity_gets_only_200_and_429_with_retry_after() -> None:
    """Finding 6: 216 concurrent requests against a capacity of 72 (max_active 8, queue_capacity 64):
    every admitted request is answered 200 (none is refused for queue space), the rest 429."""
    engine = ScriptedEngine(ids("Hello there, a reply of a few tokens.") + [EOS], delay_s=0.002)
    limits = AdmissionLimits(max_active=8, queue_capacity=64)
    with serving(engine, limits=limits) as (base, state):

        async def burst() -> list[httpx.Response]:
            pool = httpx.Limits(max_connections=300, max_keepalive_connections=300)
            async with httpx.AsyncClient(base_url=base, timeout=60, limits=pool) as client:
                body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12}
                return list(await asyncio.gather(*(client.post(CHAT, json=body) for _ in range(216))))

        responses = asyncio.run(burst())
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 429}, sorted(set(codes))
        assert codes.count(200) >= limits.http_capacity and codes.count(429) > 0
        for response in responses:
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1
        assert state.admission.in_use == 0 and state.runtime.metrics().requests_rejected == 0


def test_the_ingress_channel_makes_submitters_wait_instead_of_refusing() -> None:
    """The reference worker's ingress channel and pending deque hold queue_capacity each; with the
    worker busy, more admitted submitters than that wait for room and all complete."""
    from helios.engine.sequential import SequentialRuntime
    from helios.runtime.events import Finished
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.request import GenerationRequest, SamplingParams

    engine = ScriptedEngine([5, 6, EOS], delay_s=0.005)
    runtime = SequentialRuntime(engine, AdmissionLimits(max_active=1, queue_capacity=2), context_tokens=64,
                                vocab_size=300)  # fmt: skip

    async def main() -> list[object]:
        runtime.start()

        async def one(index: int) -> object:
            await runtime.wait_for_ingress()
            request = PreparedRequest(f"r{index}", GenerationRequest((1, 2), max_tokens=3, sampling=SamplingParams()))
            stream = runtime.submit(request)
            return [event async for event in stream][-1]

        try:
            return list(await asyncio.gather(*(one(i) for i in range(7))))  # 7 > 1 + 2 + 2
        finally:
            runtime.shutdown()

    finals = asyncio.run(main())
    assert all(isinstance(event, Finished) for event in finals), finals
    assert engine.released == 7 and runtime.metrics().requests_rejected == 0


def test_guard_host_api_key_content_type_and_size() -> None:
    policy = GuardPolicy.for_address("127.0.0.1", api_key="s3cret", max_request_bytes=4096)
    with serving(ScriptedEngine(ids("ok") + [EOS]), policy=policy) as (base, _):
        key = {"Authorization": "Bearer s3cret"}
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        with httpx.Client(base_url=base, timeout=20) as client:
            rebinding = client.post(CHAT, json=body, headers={**key, "Host": "attacker.example:8000"})
            assert rebinding.status_code == 403 and rebinding.json()["error"]["param"] == "Host"
            assert client.get("/v1/models", headers={**key, "Host": "evil.example"}).status_code == 403
            missing = client.post(CHAT, json=body)
            assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
            assert missing.json()["error"]["param"] == "Authorization"
            assert client.post(CHAT, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
            for path in ("/v1/models", "/metrics", "/openapi.json"):
                assert client.get(path).status_code == 401 and client.get(path, headers=key).status_code == 200
            assert client.get("/health").status_code == 200  # the one endpoint without the key
            assert client.post(CHAT, json=body, headers={**key, "Host": "localhost:1234"}).status_code == 200
            simple = client.post(CHAT, content=json.dumps(body), headers={**key, "Content-Type": "text/plain"})
            assert simple.status_code == 415 and simple.json()["error"]["param"] == "Content-Type"
            assert client.post(CHAT, content=json.dumps(body), headers=key).status_code == 415  # none given
            big = {**body, "messages": [{"role": "user", "content": "x" * 5000}]}
            too_large = client.post(CHAT, json=big, headers=key)
            assert too_large.status_code == 413 and too_large.json()["error"]["param"] == "body"

            def chunked():  # no Content-Length: refused while reading
                for _ in range(10):
                    yield b" " * 1000

            streamed = client.post(CHAT, content=chunked(), headers={**key, "Content-Type": "application/json"})
            assert streamed.status_code == 413
    public = GuardPolicy.for_address("127.0.0.1", api_key="s3cret", public_metrics=True)
    with serving(ScriptedEngine([EOS]), policy=public) as (base, _):
        assert httpx.get(base + "/metrics").status_code == 200
        assert httpx.get(base + "/v1/models").status_code == 401


def test_default_hosts_follow_the_bound_address() -> None:
    assert GuardPolicy.for_address("127.0.0.1").allowed_hosts == {"127.0.0.1", "localhost"}
    assert GuardPolicy.for_address("::1").allowed_hosts == {"::1", "localhost"}
    assert GuardPolicy.for_address("0.0.0.0").allowed_hosts is None
    assert GuardPolicy.for_address("0.0.0.0", allowed_hosts=["api.example"]).allowed_hosts == {"api.example"}


def test_draining_refuses_new_requests_with_retry_after() -> None:
    with serving(ScriptedEngine(ids("ok") + [EOS])) as (base, state):
        assert httpx.post(base + CHAT, json={"messages": [{"role": "user", "content": "Hi"}]}).status_code == 200
        state.drain.begin()
        refused = httpx.post(base + CHAT, json={"messages": [{"role": "user", "content": "Hi"}]})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        assert int(refused.headers["retry-after"]) >= 1
        assert httpx.get(base + "/health").status_code == 503


def test_openapi_describes_the_request_schemas() -> None:
    with serving(ScriptedEngine([EOS]), context_tokens=512) as (base, _):
        document = httpx.get(base + "/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) >= {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"}
    chat = document["components"]["schemas"]["ChatCompletionRequest"]
    assert chat["required"] == ["messages"] and "tools" in chat["properties"] and "stop" in chat["properties"]
    assert chat["properties"]["max_tokens"]["anyOf"][0]["maximum"] == 511
    assert "503" in document["paths"]["/v1/chat/completions"]["post"]["responses"]
