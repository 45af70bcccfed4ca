"""Held-out accuracy of the demo core through `helios generate` (host side).

`python -m helios.demo.held_out` prepares the demo core as `make demo` does (`helios.demo.prepare_demo`),
then runs one `helios generate --json --temperature 0` process per held-out prompt, exactly as a user
would: the prompt is the conversation rendered by the chat template up to the generation prompt
(system prompt, offered tools and earlier turns included), passed as raw text. Each completion is
scored by `helios.demo.scoring`, the scorer the training evaluation uses, so the two figures are
comparable. Prints every wrong answer with its reason and the accuracy per task kind and group.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED, render_pair
from helios.demo.scoring import Verdict, score_text, summarize
from helios.demo.tasks import Example, held_out_examples
from helios.errors import HeliosError

MAX_TOKENS = 160  # above the longest demo completion (about 110 tokens), EOS included


class GenerateFailed(HeliosError):
    """`helios generate` exited non-zero or printed something other than its one JSON line."""


@dataclass(frozen=True, slots=True)
class Graded:
    example: Example
    text: str
    finish_reason: str
    verdict: Verdict


def generate(core: Path, public_key: Path, publisher: str, prompt: str, runtime: str) -> dict[str, object]:
    """One `helios generate --json` process over `prompt` (raw text), greedy."""
    command = [sys.executable, "-m", "helios", "generate", str(core), "--accept", publisher,
               "--trust", str(public_key), "--prompt", prompt, "--temperature", "0",
               "--max-tokens", str(MAX_TOKENS), "--runtime", runtime, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GenerateFailed(f"helios generate exited {done.returncode}: {done.stderr.strip()[-400:]}")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as error:
        raise GenerateFailed(f"helios generate printed no JSON line: {done.stdout[-400:]!r}") from error


def grade(examples: Sequence[Example], core: Path, public_key: Path, publisher: str, *,
          runtime: str = "reference", jobs: int = 2) -> list[Graded]:
    """Generates and scores every example, `jobs` processes at a time, in the examples' order."""
    def one(example: Example) -> Graded:
        result = generate(core, public_key, publisher, render_pair(example).prompt, runtime)
        text = str(result["text"])
        return Graded(example, text, str(result["finish_reason"]), score_text(example.expectation, text))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, examples))


def main(argv: list[str] | None = None) -> int:
    from helios.demo.__main__ import PUBLISHER, prepare_demo

    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.held_out",
        description="Score the demo core on the held-out prompts through `helios generate` (greedy, one "
                    "process per prompt, prompts rendered by the chat template): prints each wrong answer "
                    "and the accuracy per task kind and acceptance group.",
        epilog="Example: python -m helios.demo.held_out --count 40 --jobs 2",
    )
    parser.add_argument("--workdir", type=Path, default=Path(".demo"),
                        help="where the demo key and core are (prepared if missing; default .demo)")
    parser.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="prompt seed (default: the held-out %(default)s)")
    parser.add_argument("--count", type=int, default=HELD_OUT_COUNT,
                        help="prompts, the task kinds in turn (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="generate processes at a time (default %(default)s)")
    parser.add_argument("--runtime", choices=("reference", "production"), default="reference",
                        help="the runtime `helios generate` uses (default %(default)s)")
    args = parser.parse_args(argv)
    core, public_key = prepare_demo(args.workdir)
    examples = held_out_examples(args.seed, args.count)
    started = time.perf_counter()
    try:
        graded = grade(examples, core, public_key, PUBLISHER, runtime=args.runtime, jobs=args.jobs)
    except GenerateFailed as error:
        print(f"helios demo held-out: {error}", file=sys.stderr)
        return 1
    for item in graded:
        if not item.verdict.correct:
            print(f"wrong {item.example.kind}: {item.example.question!r} -> {item.text[-120:]!r} "
                  f"({item.verdict.reason}; finish {item.finish_reason})")
    report = summarize(item.verdict for item in graded)
    print("  ".join(f"{name}={accuracy.correct}/{accuracy.total}" for name, accuracy in report.items()))
    print(f"{len(graded)} prompts through helios generate --runtime {args.runtime} in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


__all__ = ["Graded", "GenerateFailed", "generate", "grade", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
