"""The demo's drafter (device side: imports torch): the target's greedy continuations, distillation
of a small model on them, and the drafter's greedy acceptance per draft position.

The drafter is a 2-layer Llama with the target's tokenizer. `greedy_continuations` decodes the
target on training prompts; `distill_step` trains the drafter on those sequences, cross-entropy on
the target's greedy tokens plus the KL divergence to the target's distribution at every position;
`acceptance_by_position` measures, on the target's own greedy completions, how often the first j
tokens a drafter proposes all equal the target's next j tokens.

NOTE: acceptance is computed from one teacher-forced drafter pass. With greedy drafting, when the
first j-1 drafted tokens equal the target's, the drafter's j-th proposal is its argmax after the
target's own tokens, which is exactly what the teacher-forced pass computes at that position.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True, slots=True)
class Continuation:
    """A prompt and the target's greedy continuation of it, EOS included when it was reached."""

    prompt: list[int]  # prompt token ids
    completion: list[int]  # generated token ids, up to and including the first EOS


@torch.no_grad()
def greedy_continuations(model: torch.nn.Module, prompts: Sequence[list[int]], eos_id: int, pad_id: int,
                         max_new_tokens: int, batch_size: int, deadline: float | None = None) -> list[Continuation]:
    """Greedy continuations of `prompts` (token ids) in left-padded batches of similar lengths;
    after the first batch, stops starting batches once `deadline` (a perf_counter time) has passed."""
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda index: len(prompts[index]))
    results: dict[int, Continuation] = {}
    for start in range(0, len(order), batch_size):
        if deadline is not None and results and time.perf_counter() > deadline:
            break
        chosen = order[start : start + batch_size]
        width = max(len(prompts[index]) for index in chosen)
        input_ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chosen), width), dtype=torch.long)
        for row, index in enumerate(chosen):  # left padding: every prompt ends at column width-1
            ids = prompts[index]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention_mask[row, width - len(ids) :] = 1
        output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos_id,
                                pad_token_id=pad_id)
        for row, index in enumerate(chosen):
            generated = output[row, width:].tolist()
            if eos_id in generated:
                generated = generated[: generated.index(eos_id) + 1]
            results[index] = Continuation(list(prompts[index]), generated)
    return [results[index] for index in sorted(results)]


def _padded(continuations: Sequence[Continuation], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs [B, T] and the completion mask [B, T] of positions that predict a
    completion token (position prompt-1 predicts the first)."""
    width = max(len(c.prompt) + len(c.completion) for c in continuations) - 1
    inputs = torch.full((len(continuations), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(continuations), width), dtype=torch.bool)
    for row, continuation in enumerate(continuations):
        ids = continuation.prompt + continuation.completion
        inputs[row, : len(ids) - 1] = torch.tensor(ids[:-1])
        mask[row, len(continuation.prompt) - 1 : len(ids) - 1] = True
    return inputs, mask


def distill_step(drafter: torch.nn.Module, target: torch.nn.Module, continuations: Sequence[Continuation],
                 pad_id: int, autocast: torch.autocast) -> torch.Tensor:
    """The distillation loss of one batch: cross-entropy on the target's greedy tokens plus the KL
    divergence from the target's distribution, over completion positions only."""
    device = next(drafter.parameters()).device
    inputs, mask = _padded(continuations, pad_id)
    inputs, mask = inputs.to(device), mask.to(device)
    labels = torch.roll(inputs, -1, dims=1)
    for row, continuation in enumerate(continuations):  # the last completion token is not in the inputs
        end = len(continuation.prompt) + len(continuation.completion) - 2
        labels[row, end] = continuation.completion[-1]
    with torch.no_grad(), autocast:
        teacher = target(input_ids=inputs).logits.float()[mask]
    with autocast:
        student = drafter(input_ids=inputs).logits.float()[mask]
    cross_entropy = F.cross_entropy(student, labels[mask])
    divergence = F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True,
                          reduction="batchmean")
    return cross_entropy + divergence


@torch.no_grad()
def acceptance_by_position(drafter: torch.nn.Module, continuations: Sequence[Continuation], pad_id: int,
                           depth: int = 4, batch_size: int = 64) -> list[float]:
    """For j = 1..depth: over every position of every completion with j tokens left, the fraction
    where the drafter's first j greedy proposals all equal the target's next j tokens."""
    device = next(drafter.parameters()).device
    accepted = [0] * depth
    offered = [0] * depth
    for start in range(0, len(continuations), batch_size):
        batch = continuations[start : start + batch_size]
        inputs, _ = _padded(batch, pad_id)
        predictions = drafter(input_ids=inputs.to(device)).logits.argmax(-1).cpu()
        for row, continuation in enumerate(batch):
            first = len(continuation.prompt) - 1
            length = len(continuation.completion)
            matches = (predictions[row, first : first + length] == torch.tensor(continuation.completion)).tolist()
            for j in range(1, depth + 1):
                for t in range(0, length - j + 1):
                    offered[j - 1] += 1
                    accepted[j - 1] += all(matches[t : t + j])
    return [accepted[j] / offered[j] if offered[j] else 0.0 for j in range(depth)]
