"""Held-out prompts (seed 1, by index) the committed demo checkpoint answers correctly, one of each
task kind, none in a phrasing the README uses: tests/demo/test_checkpoint.py checks them with HF
transformers, tests/demo/test_served_demo.py through the served demo. BENCHMARKS.md has the
checkpoint's score on every kind; a retrained checkpoint picks these again from its wrong answers."""

from __future__ import annotations

from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED
from helios.demo.tasks import Example, TaskKind, held_out_examples

KNOWN_GOOD = {TaskKind.ADDITION: 0, TaskKind.SUBTRACTION: 16, TaskKind.DIVISION: 3, TaskKind.UNIT_CONVERSION: 4,
              TaskKind.REVERSE: 6, TaskKind.TOOL_ANSWER: 9, TaskKind.NO_TOOL: 25, TaskKind.SMALL_TALK: 26,
              TaskKind.IDENTITY: 27, TaskKind.OUT_OF_DOMAIN: 28, TaskKind.MULTI_TURN: 14,
              TaskKind.MULTIPLICATION: 17, TaskKind.COPY: 20, TaskKind.JSON_EXTRACTION: 37, TaskKind.TOOL_CALL: 8}


def known_good(kind: TaskKind) -> Example:
    """The held-out example of `kind` in KNOWN_GOOD."""
    example = held_out_examples(HELD_OUT_SEED, HELD_OUT_COUNT)[KNOWN_GOOD[kind]]
    assert example.kind is kind
    return example
