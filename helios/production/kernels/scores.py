"""Prompt scores on the device (device side, torch): the launch of `prompt_scores` (version 4).

A scored prefill's packed rows each get the FP32 log-softmax of their logits at the row's target and
their K most likely ids (docs/operators.md, "Prompt scores"; `helios.reference.scores` is the
definition). The work is one pass of row reductions and one stable sort per round, on P rows a
prompt chunk: torch's reductions and sort already run at the memory bandwidth they need, so no
Triton kernel is written for it. Every tensor is allocated once, when the program is lowered, so a
captured replay allocates nothing.
"""

from __future__ import annotations

import torch


class PromptScorer:
    """Static workspaces for `rows` x `vocab` logits and the top `top` ids (see the module docstring)."""

    def __init__(self, rows: int, vocab: int, top: int, device: torch.device) -> None:
        self.top = top
        self.peak = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.total = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.lp = torch.zeros((rows, vocab), dtype=torch.float32, device=device)  # the log-softmax
        self.weights = torch.zeros((rows, vocab), dtype=torch.float32, device=device)
        self.sorted = torch.zeros((rows, vocab), dtype=torch.float32, device=device)
        self.order = torch.zeros((rows, vocab), dtype=torch.int64, device=device)
        self.index = torch.zeros((rows, 1), dtype=torch.int64, device=device)
        self.valid = torch.zeros((rows, 1), dtype=torch.bool, device=device)
        self.picked = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.zero = torch.zeros((), dtype=torch.float32, device=device)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, scores: torch.Tensor, ids: torch.Tensor) -> None:
        rows, vocab = logits.shape
        # (x - max) - log(sum(exp(x - max))), in FP32: the reference's order of operations
        torch.amax(logits, dim=1, keepdim=True, out=self.peak)
        torch.sub(logits, self.peak, out=self.lp)
        torch.exp(self.lp, out=self.weights)
        torch.sum(self.weights, dim=1, keepdim=True, out=self.total)
        torch.log(self.total, out=self.total)
        self.lp.sub_(self.total)
        target = targets.reshape(rows, 1)
        torch.logical_and(target >= 0, target < vocab, out=self.valid)
        self.index.copy_(target)
        self.index.masked_fill_(~self.valid, 0)
        torch.gather(self.lp, 1, self.index, out=self.picked)
        scores[:rows, 0:1].copy_(torch.where(self.valid, self.picked, self.zero))
        # a stable sort: decreasing log-probability, the lower id first among equal ones
        torch.sort(self.lp, dim=1, descending=True, stable=True, out=(self.sorted, self.order))
        scores[:rows, 1:].copy_(self.sorted[:, :self.top])
        ids[:rows].copy_(self.order[:, :self.top])
