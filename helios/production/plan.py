"""Launch plans (device side): what a program becomes once lowered.

A `LaunchPlan` is a flat list of `Launch`es over static tensors: each launch is one kernel (or one
torch call on static buffers) that covers one or more program operators (consecutive ones, but for
a head norm run in the prologue of a later rotary launch: lowering/rotary.py). Running a plan is
calling each launch in order; on a GPU the whole plan is captured once as one CUDA graph
(`capture.py`) and replayed, on a CPU it runs eagerly.

On a CPU the Triton kernels run in Triton's interpreter, which keeps the grid of the kernel it is
running in process-global state: two threads running kernels at once (two executors' workers in one
process, as tests serve several runtimes side by side, or a request's round beside another runtime's
snapshot publication) would run each other's programs out of range. Plans on a CPU therefore run
one at a time in a process (`INTERPRETED_PLANS`); on a GPU nothing is serialized.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from helios.production.kernels.sampling import RankFilters


# Held while a plan runs on a CPU (Triton's interpreter: one kernel at a time in a process).
INTERPRETED_PLANS = threading.RLock()


@dataclass(frozen=True, slots=True)
class Launch:
    """One kernel launch of a plan."""

    kernel: str  # what runs, e.g. "matmul", "add+rms_norm", "rotary+paged_cache_write"
    operators: tuple[int, ...]  # the program operators it covers (indices into Program.operators)
    run: Callable[[], None]  # launches it on the plan's static tensors
    inputs: tuple[str, ...] = ()  # the program tensors its operators read, in operator order (inspection)

    def __post_init__(self) -> None:
        if not self.operators:
            raise ValueError(f"launch {self.kernel!r} covers no operator")


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """One program lowered for one device."""

    graph: str  # graph handle name
    launches: tuple[Launch, ...]
    tensors: Mapping[str, torch.Tensor]  # the weight and buffer tensors the plan binds, by tensor name
    operator_count: int  # operators in the program (each covered by exactly one launch)
    # The device's rank-filter switch when the plan samples (kernels/sampling.py), else None: such a
    # plan has two forms, with and without the rank stage (three where a sampler's rank stage is the
    # chunked form: the torch sort beside it), chosen per round by the executor.
    rank_filters: RankFilters | None = None
    # Inspection (read only by tools, e.g. the conformance trace recorder): scratch tensors by tensor
    # name whose storage no later launch of this plan reuses, so each holds its program value after
    # the plan ran, until another plan of the same arena runs.
    scratch: Mapping[str, torch.Tensor] = field(default_factory=dict)
    interpreted: bool = field(init=False)  # its tensors are on a CPU: its kernels run interpreted

    def __post_init__(self) -> None:
        covered = sorted(i for launch in self.launches for i in launch.operators)
        if covered != list(range(self.operator_count)):
            raise ValueError(f"plan {self.graph!r}: launches must cover each operator exactly once, got {covered}")
        object.__setattr__(self, "interpreted", not any(t.is_cuda for t in self.tensors.values()))

    def run(self, *, rank_form: str = "own") -> None:
        """Every launch in order, the sampling launches in `rank_form` ("own": the samplers' rank
        forms; "off": without the rank stage, only for a round none of whose sampling lanes filters
        by rank; "sort": the torch sort where a sampler is chunked). On a CPU, one plan at a time in
        the process (module docstring)."""
        if self.interpreted:
            with INTERPRETED_PLANS:
                self._run(rank_form)
        else:
            self._run(rank_form)

    def _run(self, rank_form: str) -> None:
        switch = self.rank_filters if rank_form != "own" else None
        if switch is not None:
            switch.form = rank_form
        try:
            for launch in self.launches:
                launch.run()
        finally:
            if switch is not None:
                switch.form = "own"

    def forms(self) -> tuple[str, ...]:
        """The rank forms this plan runs in (each captured on a GPU): "own", then "off" and "sort" where
        its samplers have them."""
        switch = self.rank_filters
        if switch is None:
            return ("own",)
        return ("own", "off", "sort") if switch.sorts else ("own", "off")

    def warm_forms(self) -> tuple[str, ...]:
        """The forms an eager run before capture (or a memory measurement) needs: every form but "off",
        whose launches are the own form's less the rank stage (its one other specialization, the
        weights kernel without the rank stage, is loaded when the kernels compile)."""
        return tuple(form for form in self.forms() if form != "off")

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(launch.kernel for launch in self.launches)
