"""Scored prefill end to end (issue #19's acceptance): a tiny core of every family served over HTTP by
each runtime, asked with the official openai client for `completions.create(echo=True, logprobs=5,
max_tokens=0)` and for chat `prompt_logprobs`, gives each prompt token's log-probability and its top
alternatives equal to Hugging Face transformers' log-softmax of the prompt within 1e-4 (fp32). The
prompts span two SCORED_PREFILL chunks (capacities 8 and 16 tokens); the chat path runs on every
family in the reference runtime and on one in production. Bad input is a 400 that
names the field: more alternatives than the core scores, generated-token logprobs, a stream, and a
core prepared without SCORED_PREFILL graphs, which still loads and serves everything else."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import openai
import pytest
import torch

from helios.frontend.bootstrap import Bootstrap
from helios.frontend.preparation import Preparer
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from helios.runtime.scores import core_prompt_score_width
from helios.server.guard import GuardPolicy
from helios.server.state import ServerState
from tests.fixtures.checkpoints import FAMILIES
from tests.fixtures.hf_oracle import load_hf_model
from tests.server.inprocess import serving_state

OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(8, 16),
                             context_tokens=64, prompt_score_top=6)
PROMPT = "Each token, given its"  # 21 byte tokens: SCORED_PREFILL chunks of 16 and 5 (in the 8-token graph)
TOLERANCE = 1e-4


@contextlib.contextmanager
def served(core, runtime: str) -> Iterator[openai.OpenAI]:
    """`core` behind the real app and the named runtime, on a loopback port."""
    limits = AdmissionLimits(max_active=core.contract.max_concurrency, queue_capacity=4)
    if runtime == "reference":
        from helios.reference import load_runtime
    else:
        from helios.production import load_runtime
    engine = load_runtime(core, RuntimeOptions(limits, device="cpu") if runtime == "production"
                          else RuntimeOptions(limits))
    serving = core.contract
    preparer = Preparer(Bootstrap.from_core(core), served_id=serving.served_id, context_tokens=serving.context_tokens,
                        sampled_tokens=serving.model.vocabulary.sampled_tokens,
                        prompt_score_width=core_prompt_score_width(serving, core.manifest))
    state = ServerState(runtime=engine, preparer=preparer, policy=GuardPolicy.for_address("127.0.0.1"))
    with serving_state(state) as (base, _):
        yield openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


def hf_log_softmax(model, ids: list[int]) -> np.ndarray:
    """[len(ids), vocab] FP32 log-softmax of the model's logits at every prompt position."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1).numpy()


def check_top(entries: dict[int, float], row: np.ndarray, k: int) -> None:
    """`entries` (id -> log-probability) holds the k most likely ids of `row` with HF's values."""
    order = np.argsort(-row, kind="stable")[:k]
    assert set(order.tolist()) <= set(entries), (sorted(entries), order.tolist())
    for i in order.tolist():
        assert abs(entries[i] - row[i]) < TOLERANCE


@pytest.fixture(scope="module")
def family_cores(tiny_checkpoint):
    built = {}

    def core(family: str):
        if family not in built:
            directory = tiny_checkpoint(family)
            built[family] = (prepare_checkpoint(directory, OPTIONS), load_hf_model(directory))
        return built[family]

    return core


@pytest.fixture(scope="module")
def clients(family_cores):
    """`clients(family, runtime)` -> an openai client of that family's core served by that runtime,
    started once per module (a production load lowers every graph)."""
    with contextlib.ExitStack() as stack:
        started = {}

        def client(family: str, runtime: str) -> openai.OpenAI:
            if (family, runtime) not in started:
                started[family, runtime] = stack.enter_context(served(family_cores(family)[0], runtime))
            return started[family, runtime]

        yield client


@pytest.mark.parametrize("runtime", ["reference", "production"])
@pytest.mark.parametrize("family", FAMILIES)
def test_scored_prefill_equals_hf_log_softmax_through_the_openai_client(family_cores, clients, family, runtime):
    core, model = family_cores(family)
    bootstrap = Bootstrap.from_core(core)
    ids = bootstrap.encode(PROMPT)
    expected = hf_log_softmax(model, ids)
    client = clients(family, runtime)
    completion = client.completions.create(model=core.contract.served_id, prompt=PROMPT, echo=True, logprobs=5,
                                           max_tokens=0)
    choice = completion.choices[0]
    assert choice.text == PROMPT and completion.usage.completion_tokens == 0
    logprobs = choice.logprobs
    assert logprobs.tokens == [bootstrap.decode([t]) for t in ids]
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert logprobs.text_offset == [int(x) for x in np.cumsum([0] + [len(t) for t in logprobs.tokens[:-1]])]
    texts: dict[str, list[int]] = {}  # the legacy object names alternatives by text: a text's ids
    for token in range(core.contract.model.vocabulary.sampled_tokens):
        texts.setdefault(bootstrap.decode([token]), []).append(token)
    for i in range(1, len(ids)):
        assert abs(logprobs.token_logprobs[i] - expected[i - 1, ids[i]]) < TOLERANCE
        likely = set(np.argsort(-expected[i - 1], kind="stable")[:5].tolist()) | {ids[i]}
        top = logprobs.top_logprobs[i]
        assert 1 <= len(top) <= 6
        for text, value in top.items():  # each entry is a likely id's (or the prompt token's) HF value
            assert any(t in likely and abs(expected[i - 1, t] - value) < TOLERANCE for t in texts[text])
        best = int(np.argmax(expected[i - 1]))
        if len(texts[bootstrap.decode([best])]) == 1:
            assert abs(top[bootstrap.decode([best])] - expected[i - 1, best]) < TOLERANCE

    if runtime == "production" and family != "qwen3":
        return  # the chat path is the runtime's same scored rounds: once in production (interpreted kernels are slow)
    # chat: vLLM's prompt_logprobs beside a generated reply, the rendered prompt's ids observed
    chat = client.chat.completions.create(
        model=core.contract.served_id, messages=[{"role": "user", "content": "Score me."}],
        max_tokens=2, temperature=0, extra_body={"prompt_logprobs": 3, "return_token_ids": True})
    rendered = chat.model_extra["prompt_token_ids"]
    scores = chat.model_extra["prompt_logprobs"]
    assert scores[0] is None and len(scores) == len(rendered) and len(chat.choices[0].token_ids) == 2
    expected = hf_log_softmax(model, rendered)
    for i in range(1, len(rendered)):
        entries = {int(k): v for k, v in scores[i].items()}
        own = entries[rendered[i]]
        assert abs(own["logprob"] - expected[i - 1, rendered[i]]) < TOLERANCE
        if own["rank"] is not None:
            assert own["rank"] == 1 + int((expected[i - 1] > expected[i - 1, rendered[i]] + TOLERANCE).sum())
        check_top({k: v["logprob"] for k, v in entries.items()}, expected[i - 1], 3)


def _error(call) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_bad_score_requests_are_400s_naming_the_field(family_cores, clients, runtime):
    core, _ = family_cores("qwen3")
    client = clients("qwen3", runtime)
    served_id = core.contract.served_id
    too_many = _error(lambda: client.completions.create(model=served_id, prompt="abc", echo=True, logprobs=7,
                                                        max_tokens=0))
    assert too_many.body["param"] == "logprobs" and "6 alternatives" in too_many.body["message"]
    generated = _error(lambda: client.completions.create(model=served_id, prompt="abc", logprobs=2))
    assert generated.body["param"] == "logprobs" and "generated tokens" in generated.body["message"]
    with_output = _error(lambda: client.completions.create(model=served_id, prompt="abc", echo=True,
                                                           logprobs=2, max_tokens=4))
    assert with_output.body["param"] == "logprobs"
    streamed = _error(lambda: client.chat.completions.create(
        model=served_id, messages=[{"role": "user", "content": "x"}], stream=True,
        extra_body={"prompt_logprobs": 1}))
    assert streamed.body["param"] == "prompt_logprobs"
    chat_logprobs = _error(lambda: client.chat.completions.create(
        model=served_id, messages=[{"role": "user", "content": "x"}], logprobs=True))
    assert chat_logprobs.body["param"] == "logprobs"
    # echo alone returns the prompt before the completion
    echoed = client.completions.create(model=served_id, prompt="abc", echo=True, max_tokens=2, temperature=0)
    assert echoed.choices[0].text.startswith("abc") and echoed.usage.completion_tokens == 2


@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_a_core_without_scored_prefill_loads_and_refuses_scores_naming_the_capability(tiny_checkpoint, runtime):
    core = prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(8,), context_tokens=32,
        prompt_score_top=0))
    assert core_prompt_score_width(core.contract, core.manifest) == 0
    with served(core, runtime) as client:
        served_id = core.contract.served_id
        refused = _error(lambda: client.completions.create(model=served_id, prompt="abc", echo=True, logprobs=1,
                                                           max_tokens=0))
        assert refused.body["param"] == "logprobs" and "SCORED_PREFILL" in refused.body["message"]
        refused = _error(lambda: client.chat.completions.create(
            model=served_id, messages=[{"role": "user", "content": "x"}], extra_body={"prompt_logprobs": 0}))
        assert refused.body["param"] == "prompt_logprobs" and "SCORED_PREFILL" in refused.body["message"]
        served_plainly = client.completions.create(model=served_id, prompt="abc", max_tokens=3, temperature=0)
        assert served_plainly.usage.completion_tokens == 3
