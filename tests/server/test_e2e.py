"""End to end: `helios prepare` a tiny random Qwen3-shaped checkpoint, start `helios serve` as a real
process on a loopback port, and drive it with the official openai client and httpx: chat with and
without streaming, include_usage, tools rendered into the prompt, stop, return_token_ids, 400, 429,
503, a dropped connection that cancels its request, /metrics and a clean shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from helios.cli import main
from tests.server.cases import INVALID
from tests.server.inprocess import free_port, wait_healthy

pytestmark = pytest.mark.slow

# ChatML with think tags and Qwen Coder tool calls, compact enough for a byte-level tokenizer.
TEMPLATE = """\
{%- if tools %}<|im_start|>system
Tools:{% for tool in tools %} {{ tool.function.name }}{% endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}<|im_start|>assistant
{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content or '' }}
{%- for tc in message.tool_calls or [] %}<tool_call>
<function={{ tc.function.name }}>
{% for key, value in tc.function.arguments | items %}<parameter={{ key }}>
{{ value }}
</parameter>
{% endfor %}</function>
</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
USER = [{"role": "user", "content": "Hi"}]
CONTEXT = 192


@pytest.fixture(scope="module")
def prepared_core(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    checkpoint = root / "tiny-tools"
    shutil.copytree(tiny_checkpoint("qwen3"), checkpoint)
    (checkpoint / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    key = root / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    core = root / "tiny.hcore"
    assert main(["prepare", str(checkpoint), "--out", str(core), "--publisher", "acme/tests", "--key", str(key),
                 "--served-id", "tiny-qwen", "--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2",
                 "--prefill-capacities", "8,32", "--context-tokens", str(CONTEXT)]) == 0  # fmt: skip
    return root, checkpoint, key, core


def start_server(prepared_core, *extra: str, log_name: str = "server.log") -> tuple[str, subprocess.Popen, Path]:
    """Start `helios serve` on the prepared core as a real process; wait for /health."""
    root, _, key, core = prepared_core
    port = free_port()
    log = root / log_name
    command = [sys.executable, "-m", "helios", "serve", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub",
               "--port", str(port), *extra]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, process, log, timeout_s=120, what="helios serve")
    return base, process, log


@pytest.fixture(scope="module")
def server(prepared_core):
    base, process, log = start_server(prepared_core, "--max-active", "1", "--queue-capacity", "1",
                                      "--frontend-workers", "1")
    tokenizer = Tokenizer.from_file(str(prepared_core[1] / "tokenizer.json"))
    yield base, process, log, tokenizer
    if process.poll() is None:
        process.kill()
        process.wait()


def api(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def metrics(base: str) -> dict[tuple[str, tuple], float]:
    values = {}
    for family in text_string_to_metric_families(httpx.get(base + "/metrics").text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def wait_for(predicate, timeout=30.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "condition not reached"
        time.sleep(0.05)


def test_chat_json_stream_usage_and_token_ids(server) -> None:
    base, _, _, tokenizer = server
    client = api(base)
    assert [m.id for m in client.models.list().data] == ["tiny-qwen"]
    response = client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=8, temperature=0,
                                              extra_body={"return_token_ids": True})  # fmt: skip
    choice = response.choices[0]
    token_ids = choice.model_extra["token_ids"]
    assert choice.finish_reason in ("stop", "length") and 1 <= len(token_ids) <= 8
    assert response.usage.completion_tokens == len(token_ids)
    prompt = tokenizer.decode(response.model_extra["prompt_token_ids"], skip_special_tokens=False)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    # the same greedy request streamed gives the same ids and the same text
    chunks = list(client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=8, temperature=0,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body={"return_token_ids": True}))  # fmt: skip
    streamed_ids = [c.choices[0].model_extra["token_ids"][0] for c in chunks
                    if c.choices and c.choices[0].model_extra.get("token_ids")]  # fmt: skip
    assert streamed_ids == token_ids
    streamed_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed_text == (choice.message.content or "")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(token_ids)


def test_tools_are_rendered_and_the_shape_is_right(server) -> None:
    base, _, _, tokenizer = server
    response = api(base).chat.completions.create(model="tiny-qwen", messages=USER, tools=[WEATHER], max_tokens=4,
                                                 temperature=0, extra_body={"return_token_ids": True})  # fmt: skip
    prompt = tokenizer.decode(response.model_extra["prompt_token_ids"], skip_special_tokens=False)
    assert prompt.startswith("<|im_start|>system\nTools: get_weather<|im_end|>\n")
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.tool_calls is None or all(c.type == "function" for c in choice.message.tool_calls)


def test_stop_string(server) -> None:
    base, _, _, tokenizer = server
    client = api(base)
    free = client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=12, temperature=0,
                                          extra_body={"ignore_eos": True})  # fmt: skip
    text = free.choices[0].message.content
    assert text and len(text) >= 3
    stop = text[1:3]
    stopped = client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=12, temperature=0,
                                             stop=[stop], extra_body={"ignore_eos": True})  # fmt: skip
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[: text.find(stop)]


def test_400_429_and_503(server) -> None:
    base, _, _, _ = server
    client = api(base)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="tiny-qwen", messages=USER, temperature=5)
    assert error.value.body["param"] == "temperature"
    for change, param in INVALID:  # every invalid field, each a 400 naming it
        body = {k: v for k, v in {"model": "tiny-qwen", "messages": USER, **change}.items() if v is not None}
        response = httpx.post(base + "/v1/chat/completions", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, (
            param,
            response.text,
        )
    # an output limit beyond the served context: scheduler admission rejects it
    with pytest.raises(openai.InternalServerError) as error:
        client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=CONTEXT)
    assert error.value.status_code == 503
    # saturate admission: queue_capacity + max_active = 2 long streams that nobody reads
    body = {"model": "tiny-qwen", "messages": USER, "max_tokens": 150, "ignore_eos": True, "stream": True}
    streams = [httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) for _ in range(2)]
    for stream in streams:
        assert stream.__enter__().status_code == 200
    try:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=2)
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
    wait_for(lambda: metrics(base)[("helios_http_admission_in_use", ())] == 0)
    assert httpx.get(base + "/health").status_code == 200


def test_dropped_connection_cancels_and_releases(server) -> None:
    base, _, _, _ = server
    before = metrics(base).get(("helios_requests_finished_total", (("termination", "cancelled"),)), 0)
    body = {"model": "tiny-qwen", "messages": USER, "max_tokens": 150, "ignore_eos": True, "stream": True,
            "return_token_ids": True}  # fmt: skip
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(4)]
    assert any(line.startswith("data: ") for line in received)
    wait_for(
        lambda: (
            metrics(base)[("helios_requests_finished_total", (("termination", "cancelled"),))] == before + 1
        )
    )
    values = metrics(base)
    assert values[("helios_requests_active", ())] == 0
    assert values[("helios_http_admission_in_use", ())] == 0
    # every cache page of the cancelled request is free again
    pages = values[("helios_capacity", (("resource", "pages"),))]
    assert pages > 0 and values[("helios_available", (("resource", "pages"),))] == pages
    assert values[("flare_mixed_grammar_decode_steps_total", ())] == 0
    assert values[("flare_constrained_max_inflight", ())] == 0


def test_production_runtime_serves_the_reference_tokens(prepared_core, server) -> None:
    """`helios serve --runtime production` (the batching scheduler over the production executor; Triton
    kernels run interpreted on CPU) answers with the reference runtime's tokens, streamed or not."""
    reference = server[0]
    base, process, log = start_server(prepared_core, "--runtime", "production", "--max-active", "2",
                                      log_name="server-production.log")
    try:
        request = {"model": "tiny-qwen", "messages": USER, "max_tokens": 6, "temperature": 0,
                   "return_token_ids": True}
        expected = httpx.post(reference + "/v1/chat/completions", json=request, timeout=60).json()
        produced = httpx.post(base + "/v1/chat/completions", json=request, timeout=120).json()
        assert produced["choices"][0]["token_ids"] == expected["choices"][0]["token_ids"]
        assert produced["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
        streamed = api(base).chat.completions.create(model="tiny-qwen", messages=USER, max_tokens=6, temperature=0,
                                                     stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
        assert text == (expected["choices"][0]["message"]["content"] or "")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    assert "Traceback" not in log.read_text()


def test_request_log_and_shutdown(server) -> None:
    base, process, log, _ = server
    httpx.post(base + "/v1/chat/completions", json={"model": "tiny-qwen", "messages": USER, "max_tokens": 2})
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0
    lines = log.read_text().splitlines()
    assert any("/v1/chat/completions 200" in line for line in lines)
    assert any("/v1/chat/completions 429" in line for line in lines)
    assert "Traceback" not in log.read_text()


def test_interleaved_requests_equal_sequential_ones(prepared_core) -> None:
    """The worker interleaves requests in distinct slots: greedy outputs equal those of one at a time."""
    import asyncio

    from helios.cli.compose import ServeOptions, load_state
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.request import GenerationRequest, SamplingParams

    _, _, key, core = prepared_core
    prompts = [tuple(range(40, 52)), tuple(range(60, 65))]

    def run(max_active: int) -> list[list[int]]:
        options = ServeOptions(core=core, accept="acme/tests", trust=(f"{key}.pub",), max_active=max_active)
        state, opened = load_state(options)
        runtime = state.runtime
        assert runtime.limits.max_active == max_active

        async def main() -> list[list[int]]:
            runtime.start()
            try:
                streams = [
                    runtime.submit(PreparedRequest(f"r{i}", GenerationRequest(
                        prompt, max_tokens=12, sampling=SamplingParams(temperature=0.0), ignore_eos=True),
                        observe_tokens=True))
                    for i, prompt in enumerate(prompts)
                ]  # fmt: skip
                results = []
                for stream in streams:
                    events = [event async for event in stream]
                    assert isinstance(events[-1], Finished)
                    results.append([e.token_id for e in events if isinstance(e, TokenEvent)])
                return results
            finally:
                runtime.shutdown()
                opened.close()

        return asyncio.run(main())

    together, alone = run(2), run(1)
    assert together == alone and all(len(tokens) == 12 for tokens in together)


def test_serve_cli_errors_are_one_line(prepared_core, capsys) -> None:
    _, _, key, core = prepared_core
    trust = ["--accept", "acme/tests", "--trust", f"{key}.pub"]
    assert main(["serve", str(core), *trust, "--max-active", "64"]) == 2  # beyond the core's 2 slots
    assert "request slots" in capsys.readouterr().err
    assert main(["serve", str(core), "--accept", "someone/else", "--trust", f"{key}.pub"]) != 0
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--queue-capacity" in capsys.readouterr().out

