"""The demo's chat corpus (host side): examples rendered through the chat template.

A `TrainingPair` is the prompt the template renders for a conversation (ending in an open assistant
turn) and the completion the model must write: reasoning, answer or tool call, then `<|im_end|>`.
The completion is cut from the template's own rendering of the whole conversation, so training text
and serving prompts agree byte for byte. Training examples never repeat a held-out question.

Run `python -m helios.demo.corpus --help` to write a corpus or the held-out set as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helios.demo.tasks import Example, held_out_examples, make_example
from helios.demo.template import ChatTemplate, default_template
from helios.errors import HeliosError

TRAIN_SEED = 0  # the seed of the training stream
HELD_OUT_SEED = 1  # a different seed: the held-out evaluation prompts
HELD_OUT_COUNT = 360  # the acceptance evaluation size of issue #17 (24 prompts per task kind)
VALIDATION_SEED = 2  # prompts for choosing between training runs, never the held-out ones
END_OF_TURN = "<|im_end|>"


class CompletionMismatch(HeliosError):
    """The template's rendering of a whole conversation does not extend its generation prompt."""


@dataclass(frozen=True, slots=True)
class TrainingPair:
    """One supervised example: the model reads `prompt` and learns to write `completion`."""

    prompt: str  # rendered conversation ending in "<|im_start|>assistant\n"
    completion: str  # the assistant turn's text, ending in "<|im_end|>"

    def __post_init__(self) -> None:
        if not self.prompt.endswith("<|im_start|>assistant\n"):
            raise CompletionMismatch("a training prompt must end in an open assistant turn")
        if not self.completion.endswith(END_OF_TURN):
            raise CompletionMismatch(f"a training completion must end in {END_OF_TURN}")


def render_pair(example: Example, template: ChatTemplate | None = None) -> TrainingPair:
    """The prompt and completion of `example`, both rendered by `template`."""
    template = template or default_template()
    prompt = template.render(example.messages, example.tools, add_generation_prompt=True)
    whole = template.render((*example.messages, example.reply), example.tools)
    if not (whole.startswith(prompt) and whole.endswith(END_OF_TURN + "\n")):
        raise CompletionMismatch(
            f"the rendered {example.kind} conversation does not extend its generation prompt"
        )
    return TrainingPair(prompt, whole[len(prompt) : -1])


def held_out_questions(count: int = HELD_OUT_COUNT) -> frozenset[str]:
    """The questions of the held-out and validation prompts, which training never shows."""
    return frozenset(
        example.question
        for seed in (HELD_OUT_SEED, VALIDATION_SEED)
        for example in held_out_examples(seed, count)
    )


def training_examples(
    seed: int, start: int, stop: int, excluded: frozenset[str] | None = None
) -> Iterator[Example]:
    """Examples `start..stop-1` of the training stream `seed`, skipping held-out questions."""
    excluded = held_out_questions() if excluded is None else excluded
    for index in range(start, stop):
        example = make_example(seed, index)
        if example.question not in excluded:
            yield example


def training_texts(seed: int, start: int, stop: int, excluded: frozenset[str] | None = None) -> list[str]:
    """Prompt + completion texts of a slice of the training stream (what the tokenizer learns on)."""
    return [
        pair.prompt + pair.completion
        for pair in map(render_pair, training_examples(seed, start, stop, excluded))
    ]


def encode_training_slice(
    seed: int, start: int, stop: int, tokenizer_path: str, excluded: frozenset[str], max_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encoded examples `start..stop-1` of the training stream: (flat token ids [N] int16,
    sequence lengths [S] int32, prompt lengths [S] int32), each sequence prompt + completion.

    Prompt and completion are encoded separately, as generation sees them: the prompt alone, then
    the completion token by token. Examples longer than `max_tokens` are left out. A pure function
    of its arguments, so worker processes can encode slices in any order.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    if tokenizer.get_vocab_size() > np.iinfo(np.int16).max:
        raise CompletionMismatch(f"a {tokenizer.get_vocab_size()}-token vocabulary does not fit int16 ids")
    pairs = [render_pair(example) for example in training_examples(seed, start, stop, excluded)]
    prompts = tokenizer.encode_batch([pair.prompt for pair in pairs])
    completions = tokenizer.encode_batch([pair.completion for pair in pairs])
    tokens: list[int] = []
    lengths, prompt_lengths = [], []
    for prompt, completion in zip(prompts, completions, strict=True):
        if len(prompt.ids) + len(completion.ids) <= max_tokens:
            tokens.extend(prompt.ids)
            tokens.extend(completion.ids)
            lengths.append(len(prompt.ids) + len(completion.ids))
            prompt_lengths.append(len(prompt.ids))
    return (
        np.array(tokens, dtype=np.int16),
        np.array(lengths, dtype=np.int32),
        np.array(prompt_lengths, dtype=np.int32),
    )


def _example_record(example: Example, pair: TrainingPair) -> dict[str, object]:
    return {
        "kind": str(example.kind),
        "messages": list(example.messages),
        "tools": list(example.tools),
        "prompt": pair.prompt,
        "completion": pair.completion,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.corpus",
        description=(
            "Write the demo chat corpus as JSON lines: one object per example with its kind, the "
            "OpenAI-style messages and tools, the rendered prompt and the completion to learn. "
            "Everything is a pure function of the seed and the example index."
        ),
        epilog="Example: python -m helios.demo.corpus --count 1000 --out corpus.jsonl",
    )
    parser.add_argument("--seed", type=int, default=TRAIN_SEED, help="training stream seed (default %(default)s)")
    parser.add_argument("--count", type=int, default=1000, help="how many examples to write (default %(default)s)")
    parser.add_argument(
        "--held-out", action="store_true",
        help=f"write the held-out evaluation prompts (seed {HELD_OUT_SEED}, equal share per task kind) instead",
    )
    parser.add_argument("--out", type=Path, default=None, help="output file (default: standard output)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    examples = (
        held_out_examples(HELD_OUT_SEED, args.count)
        if args.held_out
        else training_examples(args.seed, 0, args.count)
    )
    lines = (json.dumps(_example_record(example, render_pair(example))) for example in examples)
    if args.out is None:
        for line in lines:
            sys.stdout.write(line + "\n")
    else:
        args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
