"""`python -m helios.demo.held_out`: held-out prompts through real `helios generate` processes on the
prepared demo core, scored by the training evaluation's scorer."""

from __future__ import annotations

import pytest

from helios.demo import __main__ as demo
from helios.demo import held_out
from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED
from helios.demo.tasks import TaskKind, held_out_examples

pytestmark = pytest.mark.slow


def test_arithmetic_and_tool_answer_through_helios_generate(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    core, public_key = demo.prepare_demo(tmp_path)
    examples = held_out_examples(HELD_OUT_SEED, HELD_OUT_COUNT)
    # held-out prompts the committed model answers (BENCHMARKS.md): the same greedy text here
    chosen = [examples[0], examples[24]]
    assert [example.kind for example in chosen] == [TaskKind.ADDITION, TaskKind.TOOL_ANSWER]
    graded = held_out.grade(chosen, core, public_key, demo.PUBLISHER, jobs=2)
    assert [g.example for g in graded] == chosen
    for item in graded:
        assert item.finish_reason == "stop"
        assert item.verdict.correct, (item.example.question, item.text, item.verdict.reason)
    assert graded[0].text.endswith(f"= {chosen[0].expectation.number}")


def test_a_refused_core_is_reported_not_raised_raw(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    core, public_key = demo.prepare_demo(tmp_path)
    with pytest.raises(held_out.GenerateFailed, match="exited"):
        held_out.generate(core, public_key, "someone/else", "hello", "reference")
