"""Served round costs of a freshly loaded executor (host side, no torch): `helios inspect --runtime
--served-rounds N`.

    served = probe_served_costs(executor, contract, pages=pages, rounds=3)   # tuple[ServedCost, ...]

The load-time table (`helios.runtime.costs`) times each graph's replay alone; a served round also
costs the host's work for it (scheduling, packing, completion validation, retirement), and that is
what the adaptive choice refreshes its costs from (`ServedCosts`, program_choice.py). This probe
serves, for each DECODE graph of B lanes and each SPECULATIVE graph of B lanes and width W, B
synthetic greedy requests through the batching scheduler over the executor (plain decoding, or
speculation at the fixed width W), until `rounds` rounds of that graph have completed (a round
outstanding in the second frame then completes too, and counts), and reports
the scheduler's served costs of that graph: the moving average of its rounds' wall time from the
previous completion (or the round's scheduling) to its own, as `/metrics` exports them while serving.

What it leaves out: token delivery (no streams, no detokenization, no events: requests end by
cancellation), so a served round of the real worker costs a little more; and the requests' contexts
stay short (a few tokens of prompt), as the table's do. Each graph's requests are cancelled and
drained before the next graph's, so the executor is left idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from helios.contract import PreparedContract
from helios.engine.catalog import GraphCatalog
from helios.engine.config import SchedulerRequest
from helios.engine.worker import BatchingRuntime
from helios.proto import contract_pb2
from helios.runtime.costs import ServedCost
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from helios.runtime.rounds import Executor

C = contract_pb2

__all__ = ["ProbeStalled", "probe_served_costs"]

PROMPT_TOKENS = 2  # each synthetic request's prompt
STEP_LIMIT = 10_000  # rounds one graph's probe may run before it counts as stalled


class ProbeStalled(RuntimeError):
    """A graph's probe could not serve the rounds it asked for (nothing left to schedule)."""


def probe_served_costs(executor: Executor, contract: PreparedContract, *, pages: int, rounds: int,
                       graph_names: Iterable[str] | None = None) -> tuple[ServedCost, ...]:
    """Serve `rounds` rounds of every selected DECODE and SPECULATIVE graph (module docstring) and
    return each one's served cost, DECODE graphs first, then SPECULATIVE ones by width, lanes."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = None if graph_names is None else set(graph_names)
    graphs = [g for g in contract.graphs if names is None or g.name in names]
    catalog = GraphCatalog.from_graphs(graphs)
    variants = sorted([*catalog.variants(C.OPERATION_DECODE), *catalog.variants(C.OPERATION_SPECULATIVE)],
                      key=lambda v: (v.operation, v.width, v.batch_capacity, v.name))
    selected = [g.name for g in graphs]
    out = []
    for variant in variants:
        speculative = variant.operation == C.OPERATION_SPECULATIVE
        cost = _probe(executor, contract, selected, pages, variant.name, variant.batch_capacity,
                      variant.width if speculative else None, rounds)
        out.append(cost)
    return tuple(out)


def _probe(executor: Executor, contract: PreparedContract, graph_names: Sequence[str], pages: int, graph: str,
           lanes: int, width: int | None, rounds: int) -> ServedCost:
    runtime = BatchingRuntime.for_executor(executor, contract, AdmissionLimits(max_active=lanes, queue_capacity=lanes),
                                           pages=pages, graph_names=graph_names, prefix_reuse=False,
                                           speculative_width=width)
    scheduler = runtime.scheduler
    # each round emits at most W tokens a lane: room for every probed round past the prompt
    max_tokens = min(contract.context_tokens - PROMPT_TOKENS - 1, rounds * (width or 1) + 8)
    vocabulary = contract.input_vocabulary.input_tokens or contract.vocabulary.sampled_tokens
    ids = [f"probe-{lane}" for lane in range(lanes)]
    for lane, request_id in enumerate(ids):
        prompt = tuple((lane * PROMPT_TOKENS + k) % vocabulary for k in range(PROMPT_TOKENS))
        scheduler.add(SchedulerRequest(request_id, GenerationRequest(prompt, max_tokens=max_tokens,
                                                                     sampling=SamplingParams(temperature=0.0),
                                                                     ignore_eos=True)))
    try:
        for _ in range(STEP_LIMIT):
            if scheduler.served.rounds(graph) >= rounds:
                break
            if not _step(executor, scheduler):
                break
    finally:
        for request_id in ids:
            if scheduler.holds(request_id):
                scheduler.cancel(request_id)
        for _ in range(STEP_LIMIT):
            if scheduler.idle or not _step(executor, scheduler):
                break
    served = {c.graph: c for c in scheduler.served.entries(scheduler.catalog)}
    if graph not in served or served[graph].rounds < rounds:
        got = served[graph].rounds if graph in served else 0
        raise ProbeStalled(f"graph {graph}: served {got} of {rounds} rounds ({lanes} requests)")
    return served[graph]


def _step(executor: Executor, scheduler) -> bool:
    """Submit every round that may run, then complete the oldest; False when nothing was outstanding."""
    while (plan := scheduler.schedule()) is not None:
        executor.submit(plan)
    oldest = scheduler.oldest()
    if oldest is None:
        return False
    scheduler.complete(oldest, executor.collect(oldest))
    return True
