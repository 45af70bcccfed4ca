"""Training of the demo model (device side: imports torch and transformers; preparation, not serving).

`python -m helios.demo.train` generates the seeded corpus, encodes it with the demo tokenizer,
trains a small `LlamaForCausalLM` on the assistant completions only, saves a Hugging Face
checkpoint (bf16 safetensors, config, generation config, tokenizer, chat template) and reports
greedy accuracy on the held-out prompts. It runs on a CPU or a CUDA GPU; `--help` says how.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from helios.demo import CHECKPOINT_DIR
from helios.demo.corpus import (
    HELD_OUT_COUNT,
    HELD_OUT_SEED,
    TRAIN_SEED,
    VALIDATION_SEED,
    encode_training_slice,
    held_out_questions,
)
from helios.demo.evaluation import evaluate, format_report, load_checkpoint
from helios.demo.scoring import summarize
from helios.demo.tasks import held_out_examples
from helios.demo.tokenizer import (
    EOS_TOKEN,
    PAD_TOKEN,
    TOKENIZER_EXAMPLES,
    train_tokenizer,
    write_tokenizer_files,
)
from helios.errors import HeliosError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SLICE = 2000  # examples per encoding task


class InvalidTrainingPlan(HeliosError):
    """A training option is out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The Llama geometry of the demo model (about 4.3 million parameters, 8.7 MB in bf16)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 6
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 1024

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise InvalidTrainingPlan(f"hidden_size {self.hidden_size} must split into {self.num_heads} even heads")
        if self.num_heads % self.num_kv_heads:
            raise InvalidTrainingPlan(f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}")


@dataclass(frozen=True, slots=True)
class TrainingPlan:
    """Everything a training run depends on; the same plan reproduces the same run."""

    seed: int = TRAIN_SEED  # corpus stream, initialization and batch order
    examples: int = 400_000  # distinct training examples drawn from the stream
    steps: int = 10_000  # optimizer steps (the cosine schedule's length)
    batch_size: int = 128  # sequences per step
    learning_rate: float = 2e-3  # peak AdamW learning rate
    warmup_steps: int = 300  # linear warmup, then cosine decay to a tenth of the peak
    weight_decay: float = 0.05
    max_tokens: int = 640  # longer examples are left out
    eval_every: int = 2000  # steps between validation evaluations (0: only at the end)
    stop_at_step: int = 0  # end the run at this step of the `steps` schedule (0: run it all)

    def __post_init__(self) -> None:
        if self.seed in (HELD_OUT_SEED, VALIDATION_SEED):
            raise InvalidTrainingPlan(f"seed {self.seed} is reserved for held-out or validation prompts")
        for name in ("examples", "steps", "batch_size", "warmup_steps", "max_tokens"):
            if getattr(self, name) < 1:
                raise InvalidTrainingPlan(f"{name} must be at least 1, got {getattr(self, name)}")
        if not (0 <= self.stop_at_step <= self.steps):
            raise InvalidTrainingPlan(f"stop_at_step must be within 0..steps, got {self.stop_at_step}")
        if not (0 < self.learning_rate < 1) or self.weight_decay < 0 or self.eval_every < 0:
            raise InvalidTrainingPlan("learning_rate must be in (0, 1), weight_decay and eval_every >= 0")


def build_model(shape: ModelShape, vocab_size: int, pad_id: int, eos_id: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_positions,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        attention_bias=False,
        mlp_bias=False,
    )
    return LlamaForCausalLM(config)


@dataclass(frozen=True, slots=True)
class EncodedCorpus:
    """The training examples as one flat id array with per-sequence offsets (host arrays)."""

    tokens: np.ndarray  # [N] int16, all sequences back to back
    offsets: np.ndarray  # [S + 1] int64, sequence i is tokens[offsets[i]:offsets[i + 1]]
    prompt_lengths: np.ndarray  # [S] int32, the prompt part of each sequence

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def encode_corpus(plan: TrainingPlan, tokenizer_path: Path, workers: int) -> EncodedCorpus:
    """The plan's training examples, encoded, in stream order."""
    excluded = held_out_questions()
    tasks = [
        (plan.seed, start, min(start + SLICE, plan.examples), str(tokenizer_path), excluded, plan.max_tokens)
        for start in range(0, plan.examples, SLICE)
    ]
    if workers <= 1:
        results = [encode_training_slice(*task) for task in tasks]
    else:
        # NOTE: spawn, not fork: the parent may hold CUDA or OpenMP state that must not be forked.
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.starmap(encode_training_slice, tasks)
    lengths = np.concatenate([result[1] for result in results]).astype(np.int64)
    return EncodedCorpus(
        tokens=np.concatenate([result[0] for result in results]),
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        prompt_lengths=np.concatenate([result[2] for result in results]),
    )


def batch_order(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of batches of similar lengths: shuffle, sort within windows of 64 batches, cut,
    shuffle the batches. Less padding, still random."""
    order = rng.permutation(len(lengths))
    window = batch_size * 64
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size))
    rng.shuffle(batches)
    return batches


def make_batch(indices: np.ndarray, corpus: EncodedCorpus, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs [B, T] and targets [B, T] (-100 outside the completion)."""
    lengths = corpus.lengths[indices]
    width = int(lengths.max()) - 1
    inputs = np.full((len(indices), width), pad_id, dtype=np.int64)
    targets = np.full((len(indices), width), -100, dtype=np.int64)
    for row, index in enumerate(indices):
        ids = corpus.tokens[corpus.offsets[index] : corpus.offsets[index + 1]]
        prompt = int(corpus.prompt_lengths[index])
        inputs[row, : len(ids) - 1] = ids[:-1]
        # position prompt-1 predicts the completion's first token, the last position its EOS
        targets[row, prompt - 1 : len(ids) - 1] = ids[prompt:]
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def learning_rate(plan: TrainingPlan, step: int) -> float:
    if step < plan.warmup_steps:
        return plan.learning_rate * (step + 1) / plan.warmup_steps
    progress = (step - plan.warmup_steps) / max(1, plan.steps - plan.warmup_steps)
    return plan.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def save_checkpoint(model: torch.nn.Module, tokenizer_dir: Path, out_dir: Path, pad_id: int, eos_id: int) -> None:
    """bf16 safetensors, config, generation config (EOS ids, recommended sampling), tokenizer files."""
    from transformers import GenerationConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id],
        pad_token_id=pad_id,
        do_sample=True,
        temperature=0.2,
        top_k=20,
        top_p=0.9,
    )
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    if tokenizer_dir.resolve() != out_dir.resolve():
        for name in TOKENIZER_FILES:
            shutil.copyfile(tokenizer_dir / name, out_dir / name)


def train(
    plan: TrainingPlan,
    shape: ModelShape,
    tokenizer_dir: Path,
    out_dir: Path,
    device: str,
    workers: int,
    time_limit_s: float,
) -> dict[str, object]:
    from tokenizers import Tokenizer

    started = time.perf_counter()
    random.seed(plan.seed)
    np_rng = np.random.default_rng(plan.seed)
    torch.manual_seed(plan.seed)
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    pad_id, eos_id = tokenizer.token_to_id(PAD_TOKEN), tokenizer.token_to_id(EOS_TOKEN)

    corpus = encode_corpus(plan, tokenizer_dir / "tokenizer.json", workers)
    lengths = corpus.lengths
    completion_tokens = int(lengths.sum() - corpus.prompt_lengths.sum())
    print(f"corpus: {len(lengths)} examples, {int(lengths.sum())} tokens ({completion_tokens} trained on), "
          f"encoded in {time.perf_counter() - started:.1f}s", flush=True)

    model = build_model(shape, tokenizer.get_vocab_size(), pad_id, eos_id).to(device)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    print(f"model: {parameters / 1e6:.2f}M parameters, {asdict(shape)}", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": plan.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=plan.learning_rate, betas=(0.9, 0.95), eps=1e-8, fused=device.startswith("cuda"),
    )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else torch.autocast(
        "cpu", enabled=False)
    validation = held_out_examples(VALIDATION_SEED, HELD_OUT_COUNT)

    batches: list[np.ndarray] = []
    step, trained_tokens, window_loss, window_tokens = 0, 0, 0.0, 0
    window_start = time.perf_counter()
    train_start = window_start
    stopped_early = False
    model.train()
    while step < plan.steps:
        if not batches:
            batches = batch_order(lengths, plan.batch_size, np_rng)
        inputs, targets = make_batch(batches.pop(), corpus, pad_id)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(plan, step)
        with autocast:
            logits = model(input_ids=inputs).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        trained_tokens += inputs.numel()
        window_tokens += inputs.numel()
        if step % 100 == 0 or step == plan.steps:
            window_loss = loss.item()
            elapsed = time.perf_counter() - window_start
            print(f"step {step}/{plan.steps}  loss {window_loss:.4f}  lr {learning_rate(plan, step - 1):.2e}  "
                  f"{window_tokens / elapsed:,.0f} tokens/s", flush=True)
            window_start, window_tokens = time.perf_counter(), 0
        if plan.eval_every and step % plan.eval_every == 0 and step < plan.steps:
            model.eval()
            verdicts, _ = evaluate(model, tokenizer, validation, batch_size=HELD_OUT_COUNT)
            print(f"validation at step {step}: {format_report(summarize(verdicts))}", flush=True)
            model.train()
        if step == plan.stop_at_step:
            print(f"stopping at step {step} of the {plan.steps}-step schedule, as planned", flush=True)
            stopped_early = True
            break
        if time.perf_counter() - started > time_limit_s:
            print(f"time limit of {time_limit_s:.0f}s reached: stopping at step {step}", flush=True)
            stopped_early = True
            break
    train_seconds = time.perf_counter() - train_start

    save_checkpoint(model, tokenizer_dir, out_dir, pad_id, eos_id)
    model, tokenizer = load_checkpoint(out_dir, device)
    report: dict[str, object] = {
        "plan": asdict(plan), "shape": asdict(shape), "device": device, "parameters": parameters,
        "steps_run": step, "stopped_early": stopped_early, "train_seconds": round(train_seconds, 1),
        "trained_tokens": trained_tokens, "final_loss": window_loss,
    }
    for name, seed in (("validation", VALIDATION_SEED), ("held_out", HELD_OUT_SEED)):
        examples = held_out_examples(seed, HELD_OUT_COUNT)
        verdicts, completions = evaluate(model, tokenizer, examples, batch_size=HELD_OUT_COUNT)
        summary = summarize(verdicts)
        report[name] = {key: [value.correct, value.total] for key, value in summary.items()}
        print(f"{name} accuracy (saved checkpoint, greedy): {format_report(summary)}", flush=True)
        if name == "held_out":
            wrong = [(e, v, t) for e, v, t in zip(examples, verdicts, completions, strict=True) if not v.correct]
            for example, verdict, text in wrong[:40]:
                print(f"  wrong {example.kind}: {example.question!r} -> {text[:160]!r} ({verdict.reason[:160]})")
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.train",
        description=(
            "Train the Helios demo model: a ~4M-parameter Llama on a seeded synthetic chat corpus "
            "(arithmetic with think traces, unit conversions, copying and reversing strings, JSON "
            "answers, tool calls and answers from tool results). Prints loss and tokens/s, saves a "
            "Hugging Face checkpoint and prints greedy accuracy on 200 held-out prompts (seed "
            f"{HELD_OUT_SEED}). The committed checkpoint was trained on an H200 with the defaults "
            "(about seven minutes); on a CPU, lower --steps and --examples."
        ),
        epilog="Example: python -m helios.demo.train --out /tmp/demo --device cuda",
    )
    defaults = TrainingPlan()
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR,
                        help="checkpoint output directory (default: the committed checkpoint, overwritten)")
    parser.add_argument("--tokenizer-dir", type=Path, default=CHECKPOINT_DIR,
                        help="directory holding tokenizer.json, tokenizer_config.json and chat_template.jinja "
                             "(default: the committed checkpoint's)")
    parser.add_argument("--train-tokenizer", action="store_true",
                        help=f"first retrain the tokenizer on {TOKENIZER_EXAMPLES} corpus examples into --out "
                             "(the from-scratch path) instead of reading --tokenizer-dir")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="corpus, init and batch-order seed (default %(default)s)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="optimizer steps (default %(default)s)")
    parser.add_argument("--examples", type=int, default=defaults.examples, help="distinct training examples (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per step (default %(default)s)")
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="peak learning rate (default %(default)s)")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every,
                        help="steps between validation evaluations, 0 for none (default %(default)s)")
    parser.add_argument("--layers", type=int, default=ModelShape().num_layers, help="transformer layers (default %(default)s)")
    parser.add_argument("--workers", type=int, default=max(1, min(8, (multiprocessing.cpu_count() or 1) - 1)),
                        help="corpus encoding processes (default: CPUs - 1, at most 8)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--time-limit", type=float, default=float("inf"),
                        help="stop training once this many seconds have passed since the start, then save and evaluate")
    parser.add_argument("--stop-at-step", type=int, default=0,
                        help="end the run at this step of the --steps schedule, keeping the schedule's learning "
                             "rates")
    parser.add_argument("--report", type=Path, default=None, help="also write the run's report as JSON here")
    args = parser.parse_args(argv)
    try:
        plan = TrainingPlan(seed=args.seed, examples=args.examples, steps=args.steps, batch_size=args.batch_size,
                            learning_rate=args.lr, warmup_steps=min(defaults.warmup_steps, max(1, args.steps // 10)),
                            eval_every=args.eval_every, stop_at_step=args.stop_at_step)
        shape = ModelShape(num_layers=args.layers)
    except HeliosError as error:
        parser.error(str(error))
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer_dir = args.tokenizer_dir
    if args.train_tokenizer:
        from helios.demo.corpus import training_texts

        write_tokenizer_files(train_tokenizer(training_texts(plan.seed, 0, TOKENIZER_EXAMPLES)), args.out)
        tokenizer_dir = args.out
    report = train(plan, shape, tokenizer_dir, args.out, device, args.workers, args.time_limit)
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"saved the checkpoint to {args.out} in {report['total_seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
