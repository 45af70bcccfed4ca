"""Shared pieces of the recurrent-history tests (test helper): the LFM2 core's preparation options,
the prompts, and a driver that preempts requests at chosen endpoints and checks every restored
recurrent state row and page byte for byte."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from helios.engine.config import SchedulerRequest
from helios.ignition.prepare import PreparationOptions
from helios.proto import contract_pb2
from helios.runtime.request import GenerationRequest, SamplingParams

C = contract_pb2
GREEDY = SamplingParams(temperature=0.0)
# pages of 4 tokens, prefill chunks of 16 and 8: a 20-token prompt is prefilled in two rounds, so the
# convolution state crosses a chunk boundary as well as every decode step
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(8, 16),
                             context_tokens=64)
PROMPT = (5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120, 121, 9, 250, 44)
PROMPTS = (PROMPT, (61, 62, 63), tuple(range(100, 111)), (7, 8, 9, 10, 11, 12, 13, 14))


def state_planes(contract) -> list[str]:
    return [plane for region in contract.model.cache.histories if region.kind == C.HISTORY_KIND_RECURRENT
            for plane in region.planes]


def drive(runtime, requests: dict[str, GenerationRequest], preempt_at: dict[str, int],
          read_row: Callable[[str, int], np.ndarray], planes: list[str], *,
          on_submit: Callable[[object], None] | None = None) -> tuple[dict[str, list[int]], int]:
    """Run `requests` on the runtime's scheduler and executor in this thread, asking the scheduler to
    preempt request r once it has `preempt_at[r]` tokens. At each snapshot round's fence the request's
    live state rows (row = its slot) are read; at its restore round's fence its new live rows must
    equal them byte for byte; `on_submit(plan)` runs right after each submission. Returns (tokens,
    state rows checked)."""
    scheduler, executor = runtime.scheduler, runtime.executor
    for request_id, request in requests.items():
        scheduler.add(SchedulerRequest(request_id, request))
    tokens: dict[str, list[int]] = {request_id: [] for request_id in requests}
    saved: dict[str, list[bytes]] = {}
    checked = 0
    while not scheduler.idle:
        while (plan := scheduler.schedule()) is not None:
            executor.submit(plan)
            if on_submit is not None:
                on_submit(plan)
        plan = scheduler.oldest()
        assert plan is not None
        outcomes = scheduler.complete(plan, executor.collect(plan))
        if plan.operation == C.OPERATION_RESTORATION:
            for request_id, lane in zip(plan.request_ids, plan.lanes, strict=True):
                if lane.snapshot_destination >= 0:
                    saved[request_id] = [read_row(p, lane.snapshot_destination).tobytes() for p in planes]
                    assert saved[request_id] == [read_row(p, lane.slot).tobytes() for p in planes]
                if lane.restore_source >= 0:
                    assert [read_row(p, lane.slot).tobytes() for p in planes] == saved.pop(request_id)
                    checked += len(planes)
        for request_id, token in zip(outcomes.request_ids, outcomes.tokens, strict=True):
            tokens[request_id].append(token)
            if len(tokens[request_id]) == requests[request_id].max_tokens:
                scheduler.finish(request_id)
            elif len(tokens[request_id]) == preempt_at.get(request_id):
                scheduler.preempt(request_id)
    return tokens, checked


def batching(core, *, pages: int, max_active: int = 4):
    """The batching scheduler over the reference executor of `core`, with `pages` pages."""
    from helios.engine.worker import BatchingRuntime
    from helios.reference.engine import ReferenceEngine
    from helios.runtime.limits import AdmissionLimits

    engine = ReferenceEngine.load(core, pages=pages)
    return BatchingRuntime.for_executor(engine.executor, engine.contract,
                                        AdmissionLimits(max_active=max_active, queue_capacity=16), pages=pages)


def assert_batched_mixed_rounds_give_transformers_tokens(core, model) -> None:
    """`PROMPTS` served together by the batching scheduler over the reference executor (MIXED and
    DECODE rounds among them) give transformers' greedy tokens (`model`: the HF oracle's model)."""
    from helios.runtime.interface import PreparedRequest
    from tests.engine.test_batching_runtime import serve
    from tests.fixtures.hf_oracle import hf_greedy

    runtime = batching(core, pages=64)
    operations = []
    submit = runtime.executor.submit

    def recorded(plan):
        operations.append(plan.operation)
        submit(plan)

    runtime.executor.submit = recorded
    requests = [GenerationRequest(p, max_tokens=12, sampling=GREEDY, ignore_eos=True) for p in PROMPTS]
    results = serve(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert result.tokens == hf_greedy(model, list(prompt), 12), prompt
    assert C.OPERATION_MIXED in operations and C.OPERATION_DECODE in operations
