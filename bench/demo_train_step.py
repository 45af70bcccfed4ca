"""The demo training step's speed by batch size and compilation, against the committed recipe's.

    python bench/demo_train_step.py [--examples 28000] [--batch-sizes 128 256 512] [--compile inductor]
                                    [--forms hf stacked] [--steps 40] [--json out.json]

`python -m helios.demo.train` trains the target and its drafter a step at a time in eager PyTorch: two
models' forward and backward, two optimizer steps. Where the host enqueues those kernels more slowly
than the GPU runs them the step is bound by the host, and the same run on another machine trains far
fewer steps in its budget. This bench encodes a slice of the training corpus with the committed
tokenizer, then for each configuration (each training form of `--forms`: transformers' Llama or the
stacked form of `helios.demo.training_model`; eager and, with `--compile`, compiled; at each batch
size) builds the committed shapes fresh, runs warm-up steps (the compilation among them), runs the
`--steps` batches it will time once untimed, then times them: a training run's thousands of steps
meet each sequence length many times, so a batch's shapes are timed on their second meeting, not
with whatever a first meeting costs. It prints, for each: milliseconds a step, the host's share (time
to enqueue a step), the GPU's kernel time a step (profiled, CUDA only), training tokens per second,
and **the ratio of tokens per second to the committed recipe's (`TrainingPlan`'s batch size,
compilation and form: eager, batch 256, hf) measured in the same run**. A
configuration whose GPU kernel time is far below its step time is host-bound: a larger batch or
compiled losses buy tokens a second there, and a training run should use them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helios.demo import CHECKPOINT_DIR  # noqa: E402
from helios.demo import train as T  # noqa: E402
from helios.demo.tokenizer import EOS_TOKEN, PAD_TOKEN  # noqa: E402

RECIPE = T.TrainingPlan()  # the committed recipe: its batch size and compilation are the baseline


def encode(examples: int, workers: int) -> T.EncodedCorpus:
    """The first `examples` training examples, encoded as the training script encodes them, whole."""
    encoding = T.CorpusEncoding(T.TrainingPlan(examples=examples), CHECKPOINT_DIR / "tokenizer.json", workers)
    corpus = encoding.first
    while encoding.pending:
        rest = encoding.rest()
        if rest is None:
            time.sleep(0.1)
        else:
            corpus = T.extended(corpus, rest)
    return corpus


def measure(corpus: T.EncodedCorpus, pad: int, eos: int, vocab: int, device: str, batch_size: int, backend: str,
            warmup: int, steps: int, seed: int, form: str = RECIPE.form) -> dict[str, float]:
    """One configuration: fresh target and drafter of the committed shapes, `warmup` steps, the
    `steps` batches to be timed once untimed, then those batches timed (the training loop's own
    calls, both models a step)."""
    torch.manual_seed(seed)
    plan = T.TrainingPlan(batch_size=batch_size, compile=backend, form=form)
    cuda = device.startswith("cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    loss_of = T.completion_loss_function(backend, autocast)
    models = [T.training_model(form, shape, vocab, pad, eos).to(device) for shape in (T.TARGET_SHAPE, T.DRAFTER_SHAPE)]
    optimizers = [T._optimizer(model, plan, 1e-3, device) for model in models]
    batches = T.batch_order(corpus.lengths, batch_size, np.random.default_rng(seed))
    if len(batches) < warmup + steps:
        raise SystemExit(f"{len(batches)} batches of {batch_size}: encode more --examples")
    timed = [batches.pop() for _ in range(steps)]

    def step(batch: np.ndarray | None = None) -> int:
        inputs, targets = T.make_batch(batches.pop() if batch is None else batch, corpus, pad)
        rows = T.completion_rows(targets).to(device, non_blocking=True)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        for model, optimizer in zip(models, optimizers, strict=True):
            T._step(model, optimizer, loss_of(model, inputs, targets, rows))
        return inputs.numel()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    started = time.perf_counter()
    for _ in range(warmup):
        step()
    for batch in timed:  # each timed batch's shapes met once before
        step(batch)
    sync()
    warmup_seconds = time.perf_counter() - started
    tokens, host = 0, 0.0
    started = time.perf_counter()
    for batch in timed:
        enqueue = time.perf_counter()
        tokens += step(batch)
        host += time.perf_counter() - enqueue
    sync()
    seconds = time.perf_counter() - started
    kernel_ms = float("nan")
    if cuda:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for batch in timed[:10]:
                step(batch)
            sync()
        kernel_ms = sum(event.self_device_time_total for event in profile.key_averages()) / min(steps, 10) / 1000
    return {"batch_size": batch_size, "compile": backend, "form": form, "warmup_seconds": warmup_seconds,
            "step_ms": 1000 * seconds / steps, "host_ms": 1000 * host / steps, "kernel_ms": kernel_ms,
            "tokens_per_second": tokens / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (default %(default)s)")
    parser.add_argument("--examples", type=int, default=28_000, help="corpus examples encoded (default %(default)s)")
    parser.add_argument("--workers", type=int, default=max(1, min(15, (multiprocessing.cpu_count() or 1) - 1)),
                        help="encoding processes (default: CPUs - 1, at most 15)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 256, 512],
                        help="batch sizes to time (default %(default)s; the committed recipe's, "
                             f"{RECIPE.batch_size}, is always timed)")
    parser.add_argument("--compile", default="", metavar="BACKEND",
                        help="also time each batch size with the losses compiled by this torch.compile backend")
    parser.add_argument("--forms", nargs="+", choices=T.TRAINING_FORMS, default=list(T.TRAINING_FORMS),
                        help="the models' training forms to time (default: all; helios.demo.train --form)")
    parser.add_argument("--warmup", type=int, default=8,
                        help="untimed steps a configuration, before the timed batches run once untimed "
                             "(default %(default)s)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps a configuration (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(CHECKPOINT_DIR / "tokenizer.json"))
    pad, eos = tokenizer.token_to_id(PAD_TOKEN), tokenizer.token_to_id(EOS_TOKEN)
    started = time.perf_counter()
    corpus = encode(args.examples, args.workers)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    print(f"device: {name}; {len(corpus.lengths)} examples encoded in {time.perf_counter() - started:.1f}s, "
          f"{corpus.lengths.mean():.0f} tokens each on average", flush=True)
    configurations = [(size, "", form) for form in args.forms for size in args.batch_sizes]
    if args.compile:
        configurations += [(size, args.compile, form) for form in args.forms for size in args.batch_sizes]
    recipe = (RECIPE.batch_size, RECIPE.compile, RECIPE.form)
    if recipe in configurations:
        configurations.remove(recipe)
    configurations.insert(0, recipe)  # the baseline, first
    results = []
    print(f"{'batch':>6} {'compile':>10} {'form':>8} {'warm-up s':>10} {'ms/step':>9} {'host ms':>8} {'kernel ms':>10} "
          f"{'tokens/s':>11} {'ratio':>6}")
    for size, backend, form in configurations:
        result = measure(corpus, pad, eos, tokenizer.get_vocab_size(), device, size, backend, args.warmup,
                         args.steps, T.TRAIN_SEED, form)
        results.append(result)
        baseline = results[0]
        result["ratio"] = result["tokens_per_second"] / baseline["tokens_per_second"]
        print(f"{size:>6} {backend or 'eager':>10} {form:>8} {result['warmup_seconds']:>10.1f} {result['step_ms']:>9.1f} "
              f"{result['host_ms']:>8.1f} {result['kernel_ms']:>10.1f} {result['tokens_per_second']:>11,.0f} "
              f"{result['ratio']:>6.2f}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"device": name, "results": results}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
