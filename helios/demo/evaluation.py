"""Held-out evaluation of a demo checkpoint with HF transformers greedy decoding (device side).

Imports torch and transformers: this is preparation and test tooling, never serving. Prompts are
rendered by the chat template, encoded with the checkpoint's `tokenizer.json`, decoded greedily in
left-padded batches, cut at the first EOS and scored by `helios.demo.scoring`, which is independent
of how the text was generated (the same scorer later grades `helios generate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from helios.demo.corpus import render_pair
from helios.demo.drafting import Continuation, greedy_continuations
from helios.demo.scoring import Accuracy, Verdict, score_text, summarize
from helios.demo.tasks import Example
from helios.demo.tokenizer import EOS_TOKEN, PAD_TOKEN

MAX_NEW_TOKENS = 160  # the longest demo completion is about 110 tokens


def greedy_continuations_of(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = 64,
) -> list[Continuation]:
    """Greedy continuations (token ids, EOS included when reached) of text `prompts`, in order."""
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    encoded = [tokenizer.encode(prompt).ids for prompt in prompts]
    return greedy_continuations(model, encoded, eos_id, pad_id, max_new_tokens, batch_size)


def greedy_generate(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = 64,
) -> list[str]:
    """Greedy completions of `prompts` (text up to, not including, the first EOS)."""
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    texts = []
    for continuation in greedy_continuations_of(model, tokenizer, prompts, max_new_tokens, batch_size):
        ids = continuation.completion
        if ids and ids[-1] == eos_id:
            ids = ids[:-1]
        texts.append(tokenizer.decode(ids, skip_special_tokens=False))
    return texts


def evaluate(
    model: torch.nn.Module, tokenizer: Tokenizer, examples: Sequence[Example], batch_size: int = 64
) -> tuple[list[Verdict], list[str]]:
    """Generate greedily for each example's prompt and score it; returns verdicts and completions."""
    verdicts, completions, _ = evaluate_with_ids(model, tokenizer, examples, batch_size)
    return verdicts, completions


def evaluate_with_ids(
    model: torch.nn.Module, tokenizer: Tokenizer, examples: Sequence[Example], batch_size: int = 64
) -> tuple[list[Verdict], list[str], list[Continuation]]:
    """`evaluate`, also returning the greedy continuations as token ids (for drafter acceptance)."""
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    prompts = [render_pair(example).prompt for example in examples]
    continuations = greedy_continuations_of(model, tokenizer, prompts, batch_size=batch_size)
    completions = []
    for continuation in continuations:
        ids = continuation.completion
        completions.append(tokenizer.decode(ids[:-1] if ids and ids[-1] == eos_id else ids, skip_special_tokens=False))
    verdicts = [score_text(example.expectation, text) for example, text in zip(examples, completions, strict=True)]
    return verdicts, completions, continuations


def load_checkpoint(path: Path, device: str = "cpu") -> tuple[torch.nn.Module, Tokenizer]:
    """A demo checkpoint as an fp32 HF model in eval mode, and its tokenizer."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return model, Tokenizer.from_file(str(path / "tokenizer.json"))


def format_report(report: dict[str, Accuracy]) -> str:
    return "  ".join(f"{name}={accuracy.correct}/{accuracy.total}" for name, accuracy in report.items())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from helios.demo import CHECKPOINT_DIR
    from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED
    from helios.demo.tasks import held_out_examples

    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.evaluation",
        description=(
            "Score a demo checkpoint on the held-out prompts with HF transformers greedy decoding: "
            "prints accuracy per task kind and per acceptance group, and every wrong answer with the "
            "reason. Runs on a CPU in a few minutes."
        ),
        epilog="Example: python -m helios.demo.evaluation --count 40 --threads 1",
    )
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT_DIR,
                        help="checkpoint directory (default: the committed one)")
    parser.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="prompt seed (default: the held-out %(default)s)")
    parser.add_argument("--count", type=int, default=HELD_OUT_COUNT,
                        help="prompts, the task kinds in turn (default %(default)s)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts decoded together (default %(default)s)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_checkpoint(args.checkpoint, args.device)
    examples = held_out_examples(args.seed, args.count)
    verdicts, completions = evaluate(model, tokenizer, examples, batch_size=args.batch_size)
    for example, verdict, text in zip(examples, verdicts, completions, strict=True):
        if not verdict.correct:
            print(f"wrong {example.kind}: {example.question!r} -> {text[-120:]!r} ({verdict.reason})")
    print(format_report(summarize(verdicts)))
    return 0


__all__ = ["evaluate", "format_report", "greedy_generate", "load_checkpoint", "main", "summarize"]

if __name__ == "__main__":
    raise SystemExit(main())
