"""The demo corpus: deterministic from its seed, rendered through the chat template, held-out
questions kept out of training, and the host modules free of torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helios.demo.corpus import (
    HELD_OUT_COUNT,
    HELD_OUT_SEED,
    VALIDATION_SEED,
    held_out_questions,
    render_pair,
    training_examples,
)
from helios.demo.tasks import TaskKind, held_out_examples, make_example
from helios.demo.template import default_template

ROOT = Path(__file__).resolve().parents[2]


def test_examples_are_a_pure_function_of_seed_and_index():
    assert make_example(0, 17) == make_example(0, 17)
    assert [make_example(3, i) for i in range(20)] == [make_example(3, i) for i in range(20)]
    assert [make_example(0, i).question for i in range(20)] != [make_example(3, i).question for i in range(20)]


def test_held_out_prompts_come_from_their_own_seed_in_equal_shares():
    examples = held_out_examples(HELD_OUT_SEED, HELD_OUT_COUNT)
    assert HELD_OUT_COUNT >= 300
    counts = {kind: sum(example.kind is kind for example in examples) for kind in TaskKind}
    assert set(counts.values()) == {HELD_OUT_COUNT // len(TaskKind)}
    assert examples != held_out_examples(VALIDATION_SEED, HELD_OUT_COUNT)


def test_training_never_shows_a_held_out_question():
    excluded = held_out_questions()
    training = list(training_examples(0, 0, 3000))
    assert len(training) == 3000  # held-out phrasings are written apart: no training question repeats one
    assert not {example.question for example in training} & excluded
    # and the exclusion itself works: a stream whose questions are excluded yields nothing
    assert not list(training_examples(0, 0, 50, excluded=frozenset(make_example(0, i).question for i in range(50))))


def test_prompt_and_completion_are_the_templates_own_rendering():
    template = default_template()
    for index in range(300):
        example = make_example(0, index)
        pair = render_pair(example)
        whole = template.render((*example.messages, example.reply), example.tools)
        assert pair.prompt + pair.completion + "\n" == whole
        assert pair.prompt.endswith("<|im_start|>assistant\n")
        assert pair.completion.startswith("<think>\n") and pair.completion.endswith("<|im_end|>")
        if example.tools:
            assert pair.prompt.startswith("<|im_start|>system\n") and "<tools>" in pair.prompt
        if example.kind is TaskKind.TOOL_CALL:
            name = example.expectation.tool_name
            assert f"</think>\n\n<tool_call>\n<function={name}>\n" in pair.completion
            assert f"<name>{name}</name>" in pair.prompt  # the called tool is one the prompt offers
        if example.kind is TaskKind.TOOL_ANSWER:
            assert "<|im_start|>tool\n" in pair.prompt


def test_corpus_cli_writes_json_lines(tmp_path):
    out = tmp_path / "held_out.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "helios.demo.corpus", "--held-out", "--count", "15", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    import json

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [record["kind"] for record in records[:15]] == [str(kind) for kind in TaskKind][:15]
    assert all(record["prompt"].endswith("<|im_start|>assistant\n") for record in records)


def test_host_modules_import_without_torch():
    probe = (
        "import sys\n"
        "for blocked in ('torch', 'triton', 'transformers'):\n"
        "    sys.modules[blocked] = None\n"
        "import helios.demo.corpus, helios.demo.scoring, helios.demo.tasks, helios.demo.template\n"
        "import helios.demo.tokenizer, helios.demo.tools, helios.demo.vocabulary\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
