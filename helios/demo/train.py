"""Training of the demo model and its drafter (device side: imports torch and transformers;
preparation, not serving).

`python -m helios.demo.train` generates the seeded corpus, trains the demo tokenizer on it (unless
`--tokenizer-dir` names one), encodes the corpus and, within one time budget (`--minutes`, the
tokenizer included), trains:

1. the target, a `LlamaForCausalLM` trained on the assistant completions only (its logits computed
   at the completion positions alone), with the drafter learning the same completions beside it;
   training starts once each encoding worker's first slices are done and the rest of the corpus
   joins the epoch when encoded (`CorpusEncoding`); the cosine learning-rate schedule runs over the
   phase's share of the budget by the clock (or over `--steps`), and validation accuracy is printed
   as it goes;
2. the drafter's distillation: the saved target decodes training prompts greedily, and the drafter
   learns those continuations (cross-entropy on the target's tokens plus the KL divergence to its
   distribution).

It saves both as Hugging Face checkpoints (bf16 safetensors, config, generation config, tokenizer,
chat template), then reports the target's greedy accuracy on the validation and held-out prompts
and the drafter's acceptance per draft position on the held-out completions. It runs on a CPU or a
CUDA GPU; `--help` says how. A step is eager PyTorch unless `--compile` names a torch.compile
backend for the losses; both models train in the stacked form of `training_model.py` (the same
Llama in fewer kernel launches a step, saved as the Llama) unless `--form hf` trains transformers'
model itself;
`bench/demo_train_step.py` measures, on a machine, what compiling, the stacked form and larger
batches give over the committed recipe.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from helios.demo import CHECKPOINT_DIR, DRAFTER_DIR
from helios.demo.corpus import (
    HELD_OUT_COUNT,
    HELD_OUT_SEED,
    TRAIN_SEED,
    VALIDATION_SEED,
    encode_training_slice,
    held_out_questions,
)
from helios.demo.drafting import acceptance_by_position, distill_step, greedy_continuations
from helios.demo.evaluation import evaluate_with_ids, format_report, load_checkpoint
from helios.demo.scoring import summarize
from helios.demo.tasks import held_out_examples
from helios.demo.tokenizer import (
    EOS_TOKEN,
    PAD_TOKEN,
    TOKENIZER_EXAMPLES,
    train_tokenizer,
    write_tokenizer_files,
)
from helios.demo.training_model import RMS_EPS, ROPE_THETA, TrainingLlama, as_hf
from helios.errors import HeliosError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SLICE = 2000  # examples per encoding task
# Shares of the whole budget kept for what follows the target's training.
GENERATION_SHARE = 0.08  # the target's greedy continuations for distillation
DISTILLATION_SHARE = 0.07  # the drafter's distillation
FINAL_SHARE = 0.05  # saving, the final evaluations and the acceptance measurement (about 15 s on an H200)
VALIDATION_PROMPTS = 120  # validation prompts scored during training


class InvalidTrainingPlan(HeliosError):
    """A training option is out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A Llama geometry; the defaults are the target's (24.1M parameters, 48.3 MB in bf16)."""

    hidden_size: int = 512
    intermediate_size: int = 1408
    num_layers: int = 8
    num_heads: int = 8
    num_kv_heads: int = 2
    max_positions: int = 1024

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise InvalidTrainingPlan(f"hidden_size {self.hidden_size} must split into {self.num_heads} even heads")
        if self.num_heads % self.num_kv_heads:
            raise InvalidTrainingPlan(f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}")
        if self.num_layers < 1 or self.intermediate_size < 1:
            raise InvalidTrainingPlan("num_layers and intermediate_size must be at least 1")


TARGET_SHAPE = ModelShape()
DRAFTER_SHAPE = ModelShape(hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)


TRAINING_FORMS = ("hf", "stacked")


@dataclass(frozen=True, slots=True)
class TrainingPlan:
    """Everything a training run depends on; the same plan on the same machine reproduces the run."""

    seed: int = TRAIN_SEED  # corpus stream, initialization and batch order
    examples: int = 400_000  # distinct training examples drawn from the stream
    steps: int = 0  # optimizer steps of the target (the cosine schedule's length); 0: the schedule follows the clock
    # sequences per step: at 256 an H100's eager step made 2.2x the tokens a second of 128 (the step
    # is bound by its launches, not its arithmetic), and the committed pair trained at 256
    batch_size: int = 256
    learning_rate: float = 1e-3  # peak AdamW learning rate of the target
    drafter_learning_rate: float = 2e-3  # peak AdamW learning rate of the drafter
    warmup_steps: int = 300  # linear warmup, then cosine decay to a tenth of the peak
    weight_decay: float = 0.05
    max_tokens: int = 768  # longer examples are left out
    minutes: float = 8.5  # the whole run's budget, from start to the reported scores
    distillation_prompts: int = 20_000  # training prompts the target continues for the drafter (at most)
    distillation_batch: int = 256  # sequences per distillation step
    # a torch.compile backend for the training losses' forward and backward ("inductor" on a GPU:
    # fused kernels, far fewer launches a step), or "" for eager PyTorch
    compile: str = ""
    # the models' training form: "hf" (transformers' LlamaForCausalLM) or "stacked"
    # (training_model.TrainingLlama: the same function in fewer launches a step, 1.59x the tokens a
    # second of the former on an H100; saved as the former)
    form: str = "stacked"

    def __post_init__(self) -> None:
        if self.form not in TRAINING_FORMS:
            raise InvalidTrainingPlan(f"form must be one of {', '.join(TRAINING_FORMS)}, got {self.form!r}")
        if self.seed in (HELD_OUT_SEED, VALIDATION_SEED):
            raise InvalidTrainingPlan(f"seed {self.seed} is reserved for held-out or validation prompts")
        for name in ("examples", "batch_size", "warmup_steps", "max_tokens", "distillation_prompts",
                     "distillation_batch"):
            if getattr(self, name) < 1:
                raise InvalidTrainingPlan(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.steps < 0 or self.minutes <= 0:
            raise InvalidTrainingPlan(f"steps must be >= 0 and minutes > 0, got {self.steps} and {self.minutes}")
        for name in ("learning_rate", "drafter_learning_rate"):
            if not 0 < getattr(self, name) < 1:
                raise InvalidTrainingPlan(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if self.weight_decay < 0:
            raise InvalidTrainingPlan("weight_decay must be >= 0")
        if self.compile:
            backends = torch._dynamo.list_backends(exclude_tags=())
            if self.compile not in backends:
                raise InvalidTrainingPlan(f"compile backend {self.compile!r} is not one of torch.compile's: "
                                          f"{', '.join(backends)}")


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
        rms_norm_eps=RMS_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        attention_bias=False,
        mlp_bias=False,
    )
    return LlamaForCausalLM(config)


def training_model(form: str, shape: ModelShape, vocab_size: int, pad_id: int, eos_id: int) -> torch.nn.Module:
    """The model a plan of `form` trains: `build_model`'s Llama, or its stacked training form."""
    if form == "stacked":
        return TrainingLlama(shape, vocab_size)
    return build_model(shape, vocab_size, pad_id, eos_id)


@dataclass(frozen=True, slots=True)
class EncodedCorpus:
    """The training examples as one flat id array with per-sequence offsets (host arrays)."""

    tokens: np.ndarray  # [N] int16, all sequences back to back
    offsets: np.ndarray  # [S + 1] int64, sequence i is tokens[offsets[i]:offsets[i + 1]]
    prompt_lengths: np.ndarray  # [S] int32, the prompt part of each sequence

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


FIRST_WAVE = 3  # slices per worker encoded before the first step; the rest are encoded while training runs


def _joined(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> EncodedCorpus:
    lengths = np.concatenate([part[1] for part in parts]).astype(np.int64)
    return EncodedCorpus(
        tokens=np.concatenate([part[0] for part in parts]),
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        prompt_lengths=np.concatenate([part[2] for part in parts]),
    )


class CorpusEncoding:
    """The plan's training examples, encoded in stream order by worker processes: the first
    FIRST_WAVE slices per worker are waited for (`first`), the rest are encoded while the target
    trains and joined once all are done (`rest`, polled between steps), so the budget's first minute
    trains instead of waiting for the whole corpus. One process encodes everything up front."""

    def __init__(self, plan: TrainingPlan, tokenizer_path: Path, workers: int) -> None:
        excluded = held_out_questions()
        tasks = [
            (plan.seed, start, min(start + SLICE, plan.examples), str(tokenizer_path), excluded, plan.max_tokens)
            for start in range(0, plan.examples, SLICE)
        ]
        self._pool = None
        self._rest = None
        if workers <= 1:
            self.first = _joined([encode_training_slice(*task) for task in tasks])
            return
        # NOTE: spawn, not fork: the parent may hold CUDA or OpenMP state that must not be forked.
        self._pool = multiprocessing.get_context("spawn").Pool(workers)
        wave = min(len(tasks), FIRST_WAVE * workers)
        first = self._pool.starmap_async(encode_training_slice, tasks[:wave])
        if wave < len(tasks):
            self._rest = self._pool.starmap_async(encode_training_slice, tasks[wave:])  # queued behind the first
        self.first = _joined(first.get())
        if self._rest is None:
            self.close()

    @property
    def pending(self) -> bool:
        """Examples are still being encoded."""
        return self._rest is not None

    def rest(self) -> EncodedCorpus | None:
        """The remaining examples once every slice is encoded (once; None while some are not)."""
        if self._rest is None or not self._rest.ready():
            return None
        parts, self._rest = self._rest.get(), None
        self.close()
        return _joined(parts)

    def close(self) -> None:
        """Stop the workers (any slice not yet encoded is dropped)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        self._rest = None


def extended(corpus: EncodedCorpus, more: EncodedCorpus) -> EncodedCorpus:
    """`corpus` followed by `more` (indices of `corpus` unchanged)."""
    return _joined([(c.tokens, c.lengths, c.prompt_lengths) for c in (corpus, more)])


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
    """Right-padded inputs [B, T] and targets [B, T] (-100 outside the completion; `_completion_loss`
    computes logits at the other positions only)."""
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


def learning_rate(peak: float, warmup_steps: int, total_steps: int, step: int) -> float:
    """Linear warmup to `peak`, then cosine decay to a tenth of it at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return decayed_rate(peak, (step - warmup_steps) / max(1, total_steps - warmup_steps))


def decayed_rate(peak: float, progress: float) -> float:
    """The cosine decay from `peak` at progress 0 to a tenth of it at progress 1 (and after)."""
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress)))))


def save_checkpoint(model: torch.nn.Module, tokenizer_dir: Path, out_dir: Path, pad_id: int, eos_id: int) -> None:
    """bf16 safetensors, config, generation config (EOS ids, recommended sampling), tokenizer files;
    a model in the stacked training form is saved as the Llama it computes."""
    from transformers import GenerationConfig

    if isinstance(model, TrainingLlama):
        model = as_hf(model, build_model(model.shape, model.vocab_size, pad_id, eos_id))

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


def _optimizer(model: torch.nn.Module, plan: TrainingPlan, peak: float, device: str) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": plan.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak, betas=(0.9, 0.95), eps=1e-8, fused=device.startswith("cuda"),
    )


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def completion_rows(targets: torch.Tensor) -> torch.Tensor:
    """Flat indices of the [B, T] positions that predict a completion token (the rest are -100): a
    host computation, before the batch moves to the device, so selecting them costs no sync."""
    return torch.nonzero(targets.view(-1) != -100).view(-1)


def _completion_loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                     autocast: torch.autocast, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the completion positions, the logits computed at those rows only
    (about a fifth of the corpus's tokens: prompts and padding get no lm_head product and no FP32
    logits); `rows` (`completion_rows`, on the device) or computed here."""
    rows = completion_rows(targets) if rows is None else rows
    with autocast:
        hidden = model.model(input_ids=inputs).last_hidden_state
        logits = model.lm_head(hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows))
    return F.cross_entropy(logits.float(), targets.view(-1).index_select(0, rows))


LossFunction = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def completion_loss_function(backend: str, autocast: torch.autocast) -> LossFunction:
    """`_completion_loss` under `autocast` as a function of (model, inputs, targets, rows), compiled by
    torch.compile with `backend` (dynamic shapes: sequence lengths and completion rows vary by batch,
    so each model compiles once) or eager where `backend` is ""."""
    def loss(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return _completion_loss(model, inputs, targets, autocast, rows)

    return torch.compile(loss, backend=backend, dynamic=True) if backend else loss


def _validate(model: torch.nn.Module, tokenizer, label: str, count: int, pad_id: int, eos_id: int) -> None:
    """Greedy answers to `count` validation prompts, scored and printed; a model in the stacked
    training form answers as the Llama it computes (which generates)."""
    model.eval()
    examples = held_out_examples(VALIDATION_SEED, count)
    answering = (as_hf(model, build_model(model.shape, model.vocab_size, pad_id, eos_id))
                 if isinstance(model, TrainingLlama) else model)
    verdicts, _, _ = evaluate_with_ids(answering, tokenizer, examples, batch_size=count)
    print(f"validation ({count} prompts, held-out phrasings) {label}: "
          f"{format_report(summarize(verdicts))}", flush=True)
    model.train()


def train(plan: TrainingPlan, shapes: tuple[ModelShape, ModelShape], tokenizer_dir: Path, out_dir: Path,
          drafter_dir: Path, device: str, workers: int, eval_count: int = HELD_OUT_COUNT,
          started: float | None = None) -> dict[str, object]:
    """The whole run; `started` (a `time.perf_counter()` reading) is when the budget began, if earlier
    than this call (the tokenizer's training counts)."""
    from tokenizers import Tokenizer

    started = time.perf_counter() if started is None else started
    budget = plan.minutes * 60
    deadline = started + budget
    target_end = deadline - (GENERATION_SHARE + DISTILLATION_SHARE + FINAL_SHARE) * budget
    generation_end = deadline - (DISTILLATION_SHARE + FINAL_SHARE) * budget
    distillation_end = deadline - FINAL_SHARE * budget
    random.seed(plan.seed)
    np_rng = np.random.default_rng(plan.seed)
    torch.manual_seed(plan.seed)
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    pad_id, eos_id = tokenizer.token_to_id(PAD_TOKEN), tokenizer.token_to_id(EOS_TOKEN)

    encoding = CorpusEncoding(plan, tokenizer_dir / "tokenizer.json", workers)
    corpus = encoding.first
    lengths = corpus.lengths
    encode_seconds = time.perf_counter() - started

    def corpus_line(what: str) -> str:
        return (f"corpus{what}: {len(lengths)} examples, {int(lengths.sum())} tokens "
                f"({int(lengths.sum() - corpus.prompt_lengths.sum())} trained on), "
                f"encoded {time.perf_counter() - started:.1f}s after the start")

    print(corpus_line(", first wave" if encoding.pending else ""), flush=True)

    vocab_size = tokenizer.get_vocab_size()
    model = training_model(plan.form, shapes[0], vocab_size, pad_id, eos_id).to(device)
    drafter = training_model(plan.form, shapes[1], vocab_size, pad_id, eos_id).to(device)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    drafter_parameters = sum(parameter.numel() for parameter in drafter.parameters())
    print(f"target: {parameters / 1e6:.2f}M parameters, {asdict(shapes[0])}, trained in the {plan.form} form",
          flush=True)
    print(f"drafter: {drafter_parameters / 1e6:.2f}M parameters, {asdict(shapes[1])}", flush=True)
    optimizer = _optimizer(model, plan, plan.learning_rate, device)
    drafter_optimizer = _optimizer(drafter, plan, plan.drafter_learning_rate, device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    loss_of = completion_loss_function(plan.compile, autocast)

    # Phase 1: the target (and the drafter beside it) on the corpus completions. With --steps the
    # cosine schedule runs over the steps; otherwise over the phase's share of the budget, by time.
    # NOTE: a step count fitted from the first steps' times undershoots badly on a GPU (the first
    # steps of new batch shapes are several times slower than the steady ones), so the schedule
    # follows the clock instead.
    batches: list[np.ndarray] = []
    step, trained_tokens, window_tokens = 0, 0, 0
    train_start = window_start = time.perf_counter()
    validations = 0
    stopped_by_time = False
    model.train()
    drafter.train()

    def progress() -> float:
        if plan.steps:
            return step / plan.steps
        return (time.perf_counter() - train_start) / max(1e-6, target_end - train_start)

    def rate(peak: float) -> float:
        if step < plan.warmup_steps:
            return peak * (step + 1) / plan.warmup_steps
        if plan.steps:
            return learning_rate(peak, plan.warmup_steps, plan.steps, step)
        return decayed_rate(peak, progress())

    while (step < plan.steps) if plan.steps else (time.perf_counter() < target_end):
        rest = encoding.rest() if encoding.pending else None
        if rest is not None:  # the rest of the corpus: its batches join what is left of this epoch
            first = len(lengths)
            corpus = extended(corpus, rest)
            lengths = corpus.lengths
            batches += [first + batch for batch in batch_order(rest.lengths, plan.batch_size, np_rng)]
            np_rng.shuffle(batches)
            encode_seconds = time.perf_counter() - started
            print(corpus_line(""), flush=True)
        if not batches:
            batches = batch_order(lengths, plan.batch_size, np_rng)
        inputs, targets = make_batch(batches.pop(), corpus, pad_id)
        rows = completion_rows(targets).to(device, non_blocking=True)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = rate(plan.learning_rate)
        for group in drafter_optimizer.param_groups:
            group["lr"] = rate(plan.drafter_learning_rate)
        loss = loss_of(model, inputs, targets, rows)
        _step(model, optimizer, loss)
        drafter_loss = loss_of(drafter, inputs, targets, rows)
        _step(drafter, drafter_optimizer, drafter_loss)
        step += 1
        trained_tokens += inputs.numel()
        window_tokens += inputs.numel()
        if step % 100 == 0:
            elapsed = time.perf_counter() - window_start
            print(f"step {step}{f'/{plan.steps}' if plan.steps else ''}  progress {progress():.2f}  "
                  f"loss {loss.item():.4f}  drafter {drafter_loss.item():.4f}  lr {rate(plan.learning_rate):.2e}  "
                  f"{window_tokens / elapsed:,.0f} tokens/s", flush=True)
            window_start, window_tokens = time.perf_counter(), 0
        if validations < 2 and progress() >= (validations + 1) / 3:
            validations += 1
            _validate(model, tokenizer, f"at step {step}", min(VALIDATION_PROMPTS, eval_count), pad_id, eos_id)
        if plan.steps and time.perf_counter() > target_end:
            print(f"the target's share of the budget is spent: stopping at step {step} of {plan.steps}", flush=True)
            stopped_by_time = True
            break
    target_seconds = time.perf_counter() - train_start
    if encoding.pending:
        print("the target's phase ended before the whole corpus was encoded: the rest is left out", flush=True)
        encoding.close()
    completion_tokens = int(lengths.sum() - corpus.prompt_lengths.sum())
    loss_value, drafter_loss_value = loss.item(), drafter_loss.item()
    save_checkpoint(model, tokenizer_dir, out_dir, pad_id, eos_id)
    del model, optimizer
    target, _ = load_checkpoint(out_dir, device)  # the saved bf16 weights, computed in fp32 as served

    # Phase 2: the target's greedy continuations of training prompts.
    phase_start = time.perf_counter()
    count = min(plan.distillation_prompts, len(lengths))
    chosen = np_rng.choice(len(lengths), size=count, replace=False)
    prompts = [corpus.tokens[corpus.offsets[i] : corpus.offsets[i] + corpus.prompt_lengths[i]].tolist() for i in chosen]
    continuations = greedy_continuations(target, prompts, eos_id, pad_id, max_new_tokens=160,
                                         batch_size=512, deadline=generation_end)
    generation_seconds = time.perf_counter() - phase_start
    print(f"distillation data: {len(continuations)} greedy continuations of training prompts in "
          f"{generation_seconds:.1f}s", flush=True)

    # Phase 3: the drafter distilled on them, the learning rate decaying over the share's time.
    phase_start = time.perf_counter()
    distillation_steps, distillation_loss = 0, float("nan")
    order: list[int] = []
    drafter.train()
    peak = plan.drafter_learning_rate * 0.3
    distillation_batch = min(plan.distillation_batch, len(continuations))
    # NOTE: a few steps even when the earlier phases overran their shares, so the drafter is distilled.
    while continuations and (time.perf_counter() < distillation_end or distillation_steps < 20):
        if len(order) < distillation_batch:
            order = np_rng.permutation(len(continuations)).tolist()
        batch = [continuations[order.pop()] for _ in range(distillation_batch)]
        progress = (time.perf_counter() - phase_start) / max(1e-6, distillation_end - phase_start)
        for group in drafter_optimizer.param_groups:
            group["lr"] = decayed_rate(peak, progress)
        loss = distill_step(drafter, target, batch, pad_id, autocast)
        _step(drafter, drafter_optimizer, loss)
        distillation_steps += 1
        if distillation_steps % 50 == 0:
            distillation_loss = loss.item()
            print(f"distillation step {distillation_steps}  loss {distillation_loss:.4f}", flush=True)
    distillation_seconds = time.perf_counter() - phase_start
    if distillation_steps:
        distillation_loss = loss.item()
    print(f"distillation: {distillation_steps} steps in {distillation_seconds:.1f}s", flush=True)
    save_checkpoint(drafter, tokenizer_dir, drafter_dir, pad_id, eos_id)
    del drafter, drafter_optimizer
    drafter, _ = load_checkpoint(drafter_dir, device)

    report: dict[str, object] = {
        "plan": asdict(plan), "target_shape": asdict(shapes[0]), "drafter_shape": asdict(shapes[1]),
        "device": device, "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "target_parameters": parameters, "drafter_parameters": drafter_parameters,
        "corpus_examples": len(lengths), "corpus_tokens": int(lengths.sum()), "completion_tokens": completion_tokens,
        "encode_seconds": round(encode_seconds, 1), "steps_run": step, "schedule": f"{plan.steps} steps" if plan.steps
        else "cosine over the target's share of the budget, by time",
        "stopped_by_time": stopped_by_time, "target_seconds": round(target_seconds, 1),
        "trained_tokens": trained_tokens, "final_loss": loss_value, "final_drafter_loss": drafter_loss_value,
        "distillation_sequences": len(continuations), "generation_seconds": round(generation_seconds, 1),
        "distillation_steps": distillation_steps, "distillation_seconds": round(distillation_seconds, 1),
        "distillation_loss": distillation_loss,
    }
    for name, seed in (("validation", VALIDATION_SEED), ("held_out", HELD_OUT_SEED)):
        examples = held_out_examples(seed, eval_count)
        verdicts, completions, greedy = evaluate_with_ids(target, tokenizer, examples, batch_size=eval_count)
        summary = summarize(verdicts)
        report[name] = {key: [value.correct, value.total] for key, value in summary.items()}
        print(f"{name} accuracy (saved checkpoint, greedy): {format_report(summary)}", flush=True)
        acceptance = acceptance_by_position(drafter, greedy, pad_id)
        report[f"{name}_acceptance"] = [round(value, 4) for value in acceptance]
        print(f"{name} drafter acceptance, positions 1-4 (all proposals up to j accepted): "
              f"{' '.join(f'{value:.3f}' for value in acceptance)}", flush=True)
        if name == "held_out":
            wrong = [(e, v, t) for e, v, t in zip(examples, verdicts, completions, strict=True) if not v.correct]
            for example, verdict, text in wrong[:60]:
                print(f"  wrong {example.kind}: {example.question!r} -> {text[:160]!r} ({verdict.reason[:160]})")
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.train",
        description=(
            "Train the Helios demo model (a 24.1M-parameter Llama) and its drafter (a 2-layer Llama with the "
            "same tokenizer) on the seeded synthetic chat corpus within one time budget: the target and the "
            "drafter on the corpus completions, then the drafter distilled on the target's greedy continuations. "
            "Prints loss, tokens/s and validation accuracy as it goes, saves both Hugging Face checkpoints and "
            f"prints greedy accuracy on {HELD_OUT_COUNT} held-out prompts (seed {HELD_OUT_SEED}) and the drafter's "
            "acceptance per draft position. The committed checkpoints came from one H100 run with these defaults "
            "(BENCHMARKS.md); on a CPU, use small shapes, "
            "--steps and --examples."
        ),
        epilog="Example: python -m helios.demo.train --out /tmp/demo --drafter-out /tmp/drafter --device cuda",
    )
    defaults = TrainingPlan()
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR,
                        help="target checkpoint directory (default: the committed checkpoint, overwritten)")
    parser.add_argument("--drafter-out", type=Path, default=DRAFTER_DIR,
                        help="drafter checkpoint directory (default: the committed drafter, overwritten)")
    parser.add_argument("--tokenizer-dir", type=Path, default=None,
                        help="use the tokenizer.json, tokenizer_config.json and chat_template.jinja of this "
                             f"directory (default: first train the tokenizer on {TOKENIZER_EXAMPLES} corpus "
                             "examples, a few seconds of the budget, so it follows the corpus and its split "
                             "pattern; the checkpoints get a copy)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="corpus, init and batch-order seed (default %(default)s)")
    parser.add_argument("--minutes", type=float, default=defaults.minutes,
                        help="the whole run's time budget, evaluation included (default %(default)s)")
    parser.add_argument("--steps", type=int, default=defaults.steps,
                        help="the target's optimizer steps; 0 runs the schedule over the target's share of the "
                             "budget by the clock (default %(default)s)")
    parser.add_argument("--examples", type=int, default=defaults.examples, help="distinct training examples (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="sequences per step (default %(default)s)")
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="the target's peak learning rate (default %(default)s)")
    parser.add_argument("--distillation-prompts", type=int, default=defaults.distillation_prompts,
                        help="training prompts the target continues for the drafter, at most (default %(default)s)")
    for prefix, shape in (("", TARGET_SHAPE), ("drafter-", DRAFTER_SHAPE)):
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
            flag = f"--{prefix}{name.replace('_', '-')}"
            parser.add_argument(flag, type=int, default=getattr(shape, name), help="(default %(default)s)")
    parser.add_argument("--compile", nargs="?", const="inductor", default=defaults.compile, metavar="BACKEND",
                        help="compile the training losses with torch.compile (BACKEND, default inductor: fused "
                             "kernels on a GPU, each model compiled once at its first step, within the budget); "
                             "bench/demo_train_step.py measures what it gives on a machine (default: eager)")
    parser.add_argument("--form", choices=TRAINING_FORMS, default=defaults.form,
                        help="the models' training form: hf (transformers' LlamaForCausalLM) or stacked (the "
                             "same function with q/k/v and gate/up as one product each and fused norms: fewer "
                             "kernel launches a step; saved as the same Llama); bench/demo_train_step.py "
                             "--forms compares them (default %(default)s)")
    parser.add_argument("--workers", type=int, default=max(1, min(15, (multiprocessing.cpu_count() or 1) - 1)),
                        help="corpus encoding processes (default: CPUs - 1, at most 15)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--eval-count", type=int, default=HELD_OUT_COUNT,
                        help="validation and held-out prompts scored at the end (default %(default)s, the acceptance set)")
    parser.add_argument("--report", type=Path, default=None, help="also write the run's report as JSON here")
    args = parser.parse_args(argv)
    try:
        plan = TrainingPlan(seed=args.seed, examples=args.examples, steps=args.steps, batch_size=args.batch_size,
                            learning_rate=args.lr, minutes=args.minutes,
                            warmup_steps=min(defaults.warmup_steps, max(1, args.steps // 10)) if args.steps
                            else defaults.warmup_steps,
                            distillation_prompts=args.distillation_prompts, compile=args.compile, form=args.form)
        shapes = tuple(
            ModelShape(**{name: getattr(args, f"{prefix}{name}") for name in
                          ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")})
            for prefix in ("", "drafter_"))
    except HeliosError as error:
        parser.error(str(error))
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="helios-demo-tokenizer-") as scratch:
        tokenizer_dir = args.tokenizer_dir
        if tokenizer_dir is None:
            # NOTE: into a scratch directory, not --out: a run that fails later must not leave the
            # committed checkpoint with a tokenizer its weights were not trained with.
            from helios.demo.corpus import training_texts

            tokenizer_dir = Path(scratch)
            write_tokenizer_files(train_tokenizer(training_texts(plan.seed, 0, TOKENIZER_EXAMPLES)), tokenizer_dir)
            print(f"tokenizer: trained on {TOKENIZER_EXAMPLES} corpus examples in "
                  f"{time.perf_counter() - started:.1f}s", flush=True)
        report = train(plan, shapes, tokenizer_dir, args.out, args.drafter_out, device, args.workers,
                       args.eval_count, started=started)
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"saved the target to {args.out} and the drafter to {args.drafter_out} in {report['total_seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
