"""Prompt scores on the device (device side, torch): the launch of `prompt_scores` (version 4).

A scored prefill's packed rows each get the FP32 log-softmax of their logits at the row's target and
their K most likely ids (docs/operators.md, "Prompt scores"; `helios.reference.scores` is the
definition). The work is one pass of row reductions and one stable sort per round, on P rows a
prompt chunk: torch's reductions and sort already run at the memory bandwidth they need, so no
Triton kernel is written for it. Every tensor is allocated when the program is lowered, so a captured
replay allocates nothing; the [rows, V] workspaces are rows of the device's sampler storage
(`SamplerStorage`, slot 0: dead once a call returns, as a sampler's are), not one set per shape,
and hold one group of `SORT_ROWS` rows: a chunk's rows are scored a group at a time.
"""

from __future__ import annotations

import torch

from helios.production.kernels import sampling
from helios.production.kernels.sampling import SamplerStorage, row_buffer, row_groups


class PromptScorer:
    """Static workspaces for `rows` x `vocab` logits and the top `top` ids (see the module docstring);
    the [G, V] ones are views into `storage` (its own where none is given), G = min(rows, SORT_ROWS):
    the rows are scored a group at a time, as the sampler's sort form sorts them."""

    lp = row_buffer("z", torch.float32, "[G, V] f32: the log-softmax", "group_rows")
    weights = row_buffer("e", torch.float32, "[G, V] f32: exp(x - max)", "group_rows")
    sorted = row_buffer("sorted_z", torch.float32, "[G, V] f32: the log-softmax in rank order", "group_rows")
    order = row_buffer("order", torch.int64, "[G, V] i64: id at each rank", "group_rows")

    def __init__(self, rows: int, vocab: int, top: int, device: torch.device,
                 storage: SamplerStorage | None = None) -> None:
        self.rows, self.vocab, self.top, self.slot = rows, vocab, top, 0
        self.group_rows = min(rows, sampling.SORT_ROWS)
        self.storage = storage if storage is not None else SamplerStorage(device)
        for name in ("lp", "weights", "sorted", "order"):  # sized now, while plans are lowered
            getattr(self, name)
        self.peak = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.total = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.index = torch.zeros((rows, 1), dtype=torch.int64, device=device)
        self.valid = torch.zeros((rows, 1), dtype=torch.bool, device=device)
        self.picked = torch.zeros((rows, 1), dtype=torch.float32, device=device)
        self.zero = torch.zeros((), dtype=torch.float32, device=device)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, scores: torch.Tensor, ids: torch.Tensor) -> None:
        rows, vocab = logits.shape
        target = targets.reshape(rows, 1)
        torch.logical_and(target >= 0, target < vocab, out=self.valid)
        self.index.copy_(target)
        self.index.masked_fill_(~self.valid, 0)
        buffers = (self.lp, self.weights, self.sorted, self.order)
        for group, (lp, weights, ranked, order) in row_groups(rows, self.group_rows, buffers):
            peak, total = self.peak[group], self.total[group]
            # (x - max) - log(sum(exp(x - max))), in FP32: the reference's order of operations
            torch.amax(logits[group], dim=1, keepdim=True, out=peak)
            torch.sub(logits[group], peak, out=lp)
            torch.exp(lp, out=weights)
            torch.sum(weights, dim=1, keepdim=True, out=total)
            torch.log(total, out=total)
            lp.sub_(total)
            torch.gather(lp, 1, self.index[group], out=self.picked[group])
            # a stable sort: decreasing log-probability, the lower id first among equal ones
            torch.sort(lp, dim=1, descending=True, stable=True, out=(ranked, order))
            scores[group, 1:].copy_(ranked[:, :self.top])
            ids[group].copy_(order[:, :self.top])
        scores[:rows, 0:1].copy_(torch.where(self.valid, self.picked, self.zero))
