"""What one operator's lowering sees (device side): the `Context` of the program being lowered.

Every lowering (`operators.py`, `linear.py`, `rotary.py`) is a function `(Context, ValidatedOperator)
-> run`, where `run` launches the operator on the program's static tensors; the entry point
(`lower_program` in this package) builds the context once per program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from helios.errors import HeliosError
from helios.production.buffers import ScratchArena, torch_dtype
from helios.production.gpu_paths import GpuPaths
from helios.production.kernels.sampling import RankFilters, SamplerStorage
from helios.production.lowering.product_choice import LinearPolicy
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2


class LoweringError(HeliosError):
    """A program cannot be lowered on this device (a tensor without storage, an unlowered operator)."""


@dataclass(slots=True)
class Context:
    """What one operator's lowering sees: the program's tensors and the device's shared resources."""

    tensors: dict[str, torch.Tensor]  # by program tensor name: weights, buffers, and scratch while live
    arena: ScratchArena  # the device's scratch arena (shared by every plan) and its memo of device tables
    device: torch.device
    where: str  # "program 'decode_b1'": what error messages name
    linear: LinearPolicy  # the path (Triton or torch) of each small matrix product shape
    decls: Mapping[str, program_pb2.TensorDecl]  # the program's tensor declarations by name
    gpu_paths: GpuPaths | None = None  # the GPU's branches forced at small tiles (gpu_paths.py); None: off
    group: Any = None  # the rank's RankGroup (production/ranks/group.py) the collectives call; None: one rank
    lanes: int | None = None  # the graph's batch capacity B (its rows belong to at most B requests); None: unknown
    lane_rows: int | None = None  # the most rows one request holds in a round (1 for DECODE); None: unknown

    def t(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def dtype(self, name: str) -> torch.dtype:
        bound = self.tensors.get(name)
        return bound.dtype if bound is not None else torch_dtype(self.decls[name].dtype, f"{self.where} {name}")


Lowering = Callable[[Context, ValidatedOperator], Callable[[], None]]


def in_order(runs: Sequence[Callable[[], None]]) -> Callable[[], None]:
    """One run calling `runs` one after another (the run itself where there is one)."""
    if len(runs) == 1:
        return runs[0]

    def run() -> None:
        for each in runs:
            each()
    return run


def rank_filters(arena: ScratchArena) -> RankFilters:
    """The device's one rank-filter switch: every sampler of its plans reads it, the executor sets it
    for each round from its lanes."""
    return arena.memo(("rank_filters",), RankFilters)


def sampler_storage(arena: ScratchArena) -> SamplerStorage:
    """The device's one storage of sampler buffers (`SamplerStorage`): every sampler of its plans holds
    its [rows, V] buffers there; frozen before graph capture."""
    return arena.memo(("sampler_storage",), lambda: SamplerStorage(arena.device))
