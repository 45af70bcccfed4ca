"""The committed demo checkpoint and its drafter: standard Llama checkpoints (a target of at most
25M parameters, issue #17's bound, and a drafter of 2 to 4 layers) that transformers loads offline, one tokenizer whose chat markers are single tokens, the
target's greedy answers on held-out prompts it is known to answer, and the drafter's acceptance."""

from __future__ import annotations

import json

import pytest

from helios.demo import CHECKPOINT_DIR, DRAFTER_DIR
from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED
from helios.demo.tasks import TaskKind, held_out_examples
from helios.demo.tokenizer import MARKUP_TOKENS, SPECIAL_TOKENS
from tests.demo.known_good import KNOWN_GOOD

MAX_PARAMETERS = 25 * 10**6  # the target's bound (issue #17)


@pytest.fixture(scope="module")
def offline(monkeypatch_module):
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_files_size_and_config():
    for directory in (CHECKPOINT_DIR, DRAFTER_DIR):
        names = {path.name for path in directory.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "generation_config.json", "chat_template.jinja"} <= names
        generation = json.loads((directory / "generation_config.json").read_text())
        tokenizer_config = json.loads((directory / "tokenizer_config.json").read_text())
        assert tokenizer_config["eos_token"] == "<|im_end|>"
        end_id = next(int(i) for i, t in tokenizer_config["added_tokens_decoder"].items() if t["content"] == "<|im_end|>")
        assert end_id in generation["eos_token_id"]
        assert generation["do_sample"] and 0 < generation["temperature"] <= 1
    parameters = {directory: _parameters(directory / "model.safetensors") for directory in (CHECKPOINT_DIR, DRAFTER_DIR)}
    assert parameters[DRAFTER_DIR] < parameters[CHECKPOINT_DIR] <= MAX_PARAMETERS
    target = json.loads((CHECKPOINT_DIR / "config.json").read_text())
    drafter = json.loads((DRAFTER_DIR / "config.json").read_text())
    for config in (target, drafter):
        assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
        assert config["dtype"] == "bfloat16"
    assert 2 <= drafter["num_hidden_layers"] <= 4 < target["num_hidden_layers"]
    assert drafter["vocab_size"] == target["vocab_size"]
    assert (drafter["eos_token_id"], drafter["pad_token_id"]) == (target["eos_token_id"], target["pad_token_id"])


def _parameters(path) -> int:
    """Parameters a safetensors file holds, read from its header (bf16: two bytes each)."""
    import math
    import struct

    with path.open("rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    tensors = [value for name, value in header.items() if name != "__metadata__"]
    assert {value["dtype"] for value in tensors} == {"BF16"}
    return sum(math.prod(value["shape"]) for value in tensors)


def test_the_drafter_has_the_targets_tokenizer():
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (DRAFTER_DIR / name).read_bytes() == (CHECKPOINT_DIR / name).read_bytes()


def test_markers_are_single_tokens(offline):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(CHECKPOINT_DIR / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(CHECKPOINT_DIR)
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        token_id = raw.token_to_id(token)
        assert raw.encode(token).ids == [token_id]
        assert hf.encode(token, add_special_tokens=False) == [token_id]
    text = "<|im_start|>assistant\n<think>\n7 + 5 = 12\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call><|im_end|>"
    assert hf.encode(text, add_special_tokens=False) == raw.encode(text).ids
    assert raw.decode(raw.encode(text).ids, skip_special_tokens=False) == text
    assert hf.eos_token_id == raw.token_to_id("<|im_end|>")


@pytest.fixture(scope="module")
def greedy(offline):
    import torch

    from helios.demo.evaluation import evaluate_with_ids, load_checkpoint

    torch.set_num_threads(1)
    model, tokenizer = load_checkpoint(CHECKPOINT_DIR)
    examples = held_out_examples(HELD_OUT_SEED, HELD_OUT_COUNT)
    chosen = [examples[index] for index in sorted(KNOWN_GOOD.values())]
    verdicts, completions, continuations = evaluate_with_ids(model, tokenizer, chosen, batch_size=len(chosen))
    return chosen, verdicts, completions, continuations, tokenizer


def test_greedy_answers_on_held_out_prompts(greedy):
    chosen, verdicts, completions, _, _ = greedy
    assert {example.kind: index for index, example in zip(sorted(KNOWN_GOOD.values()), chosen, strict=True)} \
        == KNOWN_GOOD
    assert set(KNOWN_GOOD) == set(TaskKind)  # one prompt of every task kind
    wrong = [(e.question, text, v.reason) for e, v, text in zip(chosen, verdicts, completions, strict=True)
             if not v.correct]
    assert not wrong
    assert all(text.startswith("<think>\n") for text in completions)


def test_the_drafter_proposes_the_targets_next_token(greedy):
    from helios.demo.drafting import acceptance_by_position
    from helios.demo.evaluation import load_checkpoint

    _, _, _, continuations, tokenizer = greedy
    drafter, _ = load_checkpoint(DRAFTER_DIR)
    rates = acceptance_by_position(drafter, continuations, tokenizer.token_to_id("<|endoftext|>"), depth=4)
    assert rates[0] >= 0.7  # the bar for the first draft position
    assert rates == sorted(rates, reverse=True)


def test_the_drafter_prepares_like_any_checkpoint(tmp_path, offline):
    from helios.cli import main as helios

    key = tmp_path / "drafter.key"
    assert helios(["keys", "new", "--out", str(key)]) == 0
    core = tmp_path / "drafter.hcore"
    assert helios(["prepare", str(DRAFTER_DIR), "--out", str(core), "--publisher", "helios/demo", "--key", str(key),
                   "--dtype", "fp32", "--served-id", "helios-demo-drafter"]) == 0
    assert helios(["verify", str(core), "--accept", "helios/demo", "--trust", f"{key}.pub"]) == 0
