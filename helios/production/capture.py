"""CUDA-graph capture and replay (device side): the one place device graphs are made.

`GraphCapture.capture(plans)` runs each launch plan once on a side stream (letting cuBLAS pick its
algorithms and torch make its lazy state outside a capture; the kernels phase compiled and ran every
Triton kernel before), then captures each plan as one `torch.cuda.CUDAGraph`
(a plan that samples twice: with the sampler's rank stage and without it, `plan.py`) into one shared
memory pool: graphs never run concurrently (one stream, one submission at a time), so
temporaries of one graph may reuse those of another. After startup only `replay` runs: no
compilation, capture or device allocation happens while serving (tests/production/test_gpu_replay.py
proves it with the allocator's counters, `compiled_kernels()` and `captured_graphs()`, over bare
replays and over the production runtime serving every kind of round in both frames).

Every CUDA graph Helios captures, here or in the product timings at load
(lowering/product_choice.py), is captured through `capturing`, which counts it: `captured_graphs()`
is the process's count (exported on /metrics as `helios_graphs_captured_total`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

from helios.errors import HeliosError
from helios.production.plan import LaunchPlan


class GraphNotCaptured(HeliosError):
    """A replay names a graph variant that startup did not capture."""


_captured = 0  # CUDA graphs captured by this process through `capturing`


@contextmanager
def capturing(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream, *, pool=None) -> Iterator[None]:
    """Capture what the body launches on `stream` (a side stream: capture cannot run on the legacy
    default stream) into `graph`, counted in `captured_graphs()` once the capture ends.

    This is `torch.cuda.graph` without what its entry does before every capture: a device
    synchronize, an empty_cache of the device allocator and one of the pinned host allocator (the
    last alone 2.8 ms a graph in a profiled warm start of the 0.6B shape on an H100: 0.13 s of its 47
    captures). The caller synchronizes, and empties the device cache where temporaries of eager runs
    may hold memory the graphs' pool will need, once before a run of captures
    (`GraphCapture.capture`)."""
    global _captured
    with torch.cuda.stream(stream):
        # NOTE: thread-local, not torch's global mode: in global mode a call another thread makes
        # while the capture runs (the host tier's cudaHostRegister, which runs on a thread from a
        # load on; another runtime's allocations in the same process) invalidates the capture.
        # Only this thread's calls are the capture's to forbid.
        graph.capture_begin(*(() if pool is None else (pool,)), capture_error_mode="thread_local")
        try:
            yield
        finally:
            graph.capture_end()
    _captured += 1


def captured_graphs() -> int:
    """CUDA graphs this process has captured (serving graphs and product timings; 0 on a CPU)."""
    return _captured


class GraphCapture:
    """Captured CUDA graphs, one per (operation, capacity) variant, keyed by graph handle name."""

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device; CPU plans run eagerly")
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.forms: dict[tuple[str, str], torch.cuda.CUDAGraph] = {}  # (name, "off" or "sort"): sampling graphs' other forms

    def capture(self, plans: Mapping[str, LaunchPlan], *, warmup: int = 1,
                preserve: Sequence[torch.Tensor] = ()) -> None:
        """Capture every plan in each of its rank forms (`LaunchPlan.forms`), after `warmup` eager runs of
        each of its `LaunchPlan.warm_forms`. Warm-up and capture run each plan on whatever its buffers
        hold: the tensors in `preserve` (persistent state, completion records) get their bytes back
        afterwards, so startup leaves no state a round did not write. (A speculative program run on
        zeroed transports reads slot 0 as a lane and commits into it.)"""
        saved = [t.clone() for t in preserve]
        forms = [(name, plan, form) for name, plan in plans.items() for form in plan.forms()]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for plan in plans.values():
                for form in plan.warm_forms():
                    for _ in range(warmup):
                        plan.run(rank_form=form)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()  # the warm-up's temporaries: the graphs' pool may need that memory
        for name, plan, form in forms:
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, stream, pool=self.pool):
                plan.run(rank_form=form)
            if form == "own":
                self.graphs[name] = graph
            else:
                self.forms[name, form] = graph
        for tensor, value in zip(preserve, saved, strict=True):
            tensor.copy_(value)
        torch.cuda.synchronize(self.device)

    def replay(self, name: str, *, rank_form: str = "own") -> None:
        """Replay graph `name` in `rank_form` (`LaunchPlan.run`; the graph itself where it has no such
        form: it does not sample, or its samplers have no sort beside their own form)."""
        graph = self.graphs.get(name)
        if graph is None:
            raise GraphNotCaptured(f"graph {name!r} was not captured at startup (captured: {sorted(self.graphs)})")
        if rank_form != "own":
            graph = self.forms.get((name, rank_form), graph)
        graph.replay()
