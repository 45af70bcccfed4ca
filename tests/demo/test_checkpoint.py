"""The committed demo checkpoint: a standard Llama checkpoint under 10 MB that transformers loads
offline, whose tokenizer keeps the chat markers whole, and which answers held-out prompts greedily."""

from __future__ import annotations

import json

import pytest

from helios.demo import CHECKPOINT_DIR
from helios.demo.tasks import TaskKind, held_out_examples
from helios.demo.tokenizer import MARKUP_TOKENS, SPECIAL_TOKENS

# The committed checkpoint answers every held-out prompt of every kind (BENCHMARKS.md, demo model).
PASSING_KINDS = tuple(TaskKind)


@pytest.fixture(scope="module")
def offline(monkeypatch_module):
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_files_size_and_config():
    names = {path.name for path in CHECKPOINT_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json", "chat_template.jinja"} <= names
    assert sum(path.stat().st_size for path in CHECKPOINT_DIR.iterdir()) < 10 * 1024 * 1024
    config = json.loads((CHECKPOINT_DIR / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    generation = json.loads((CHECKPOINT_DIR / "generation_config.json").read_text())
    tokenizer_config = json.loads((CHECKPOINT_DIR / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    end_id = next(int(i) for i, t in tokenizer_config["added_tokens_decoder"].items() if t["content"] == "<|im_end|>")
    assert end_id in generation["eos_token_id"]
    assert generation["do_sample"] and 0 < generation["temperature"] <= 1


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


def test_greedy_answers_on_held_out_prompts(offline):
    import torch

    from helios.demo.evaluation import evaluate, load_checkpoint

    torch.set_num_threads(1)
    model, tokenizer = load_checkpoint(CHECKPOINT_DIR)
    examples = [example for example in held_out_examples(1, 16) if example.kind in PASSING_KINDS]
    assert len(examples) == 16
    verdicts, completions = evaluate(model, tokenizer, examples, batch_size=len(examples))
    wrong = [(e.question, text, v.reason) for e, v, text in zip(examples, verdicts, completions, strict=True)
             if not v.correct]
    assert not wrong
    assert all(text.startswith("<think>\n") for text in completions)
