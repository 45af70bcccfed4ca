"""Prefix hits that end inside a page (CPU, fp32): a request ending by EOS or its output limit with its
endpoint mid-page publishes its partial page as a continuation after its fence; a later request whose
prompt extends exactly those tokens restores the page into a private page (a RESTORATION round) and
starts its prefill at the snapshot's endpoint, not at the page boundary. Its tokens equal the run
without the hit, greedy and seeded; keys stay exact (one token changed inside the partial page: no
hit); a matched stop publishes nothing; rows are evicted least recently used first, counted."""

from __future__ import annotations

import asyncio

import pytest

from helios.engine.config import SchedulerRequest
from helios.ignition.prepare import prepare_checkpoint
from helios.proto import contract_pb2
from helios.runtime.interface import PreparedRequest
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import OPTIONS, _collect
from tests.engine.test_snapshots import reference_runtime

C = contract_pb2
T = OPTIONS.page_tokens
GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=0.9, top_k=20, seed=7)


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def one_at_a_time(runtime, requests: list[GenerationRequest]) -> list[list[int]]:
    """Each request served through the runtime after the previous one ended and the worker went idle
    (its publication round fenced)."""
    async def main():
        out = []
        for r in requests:
            runtime.sequence = getattr(runtime, "sequence", 0) + 1
            out.append((await _collect(runtime.submit(PreparedRequest(f"q{runtime.sequence}", r, observe_tokens=True)))).tokens)
            while not runtime.scheduler.idle:
                await asyncio.sleep(0.005)
        return out

    runtime.start()
    try:
        return asyncio.run(main())
    finally:
        runtime.shutdown()


def conversation(sampling: SamplingParams, first_tokens: list[int] | None = None):
    """A first turn (prompt 10, 5 tokens: endpoint 14, inside the 4th page) and, given its tokens, a
    second turn re-sending the whole first turn plus three tokens."""
    prompt = tuple(range(30, 40))
    first = GenerationRequest(prompt, max_tokens=5, sampling=sampling, ignore_eos=True)
    if first_tokens is None:
        return first
    return GenerationRequest(prompt + tuple(first_tokens) + (7, 8, 9), max_tokens=6, sampling=sampling,
                             ignore_eos=True)


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_a_prompt_extending_a_published_partial_page_restores_it_with_the_tokens_of_recomputation(core, sampling):
    first = conversation(sampling)
    (first_tokens,) = one_at_a_time(reference_runtime(core, pages=32, max_active=2), [first])
    second = conversation(sampling, first_tokens)
    fresh = reference_runtime(core, pages=32, max_active=2)  # no publication: the whole prompt computed
    (expected,) = one_at_a_time(fresh, [second])
    assert len(expected) == second.max_tokens
    assert fresh.metrics().continuation_hits == 0
    runtime = reference_runtime(core, pages=32, max_active=2)
    launches = []
    submit = runtime.executor.submit
    runtime.executor.submit = lambda plan: (launches.append(plan), submit(plan))[1]
    assert one_at_a_time(runtime, [first, second]) == [first_tokens, expected]
    m = runtime.metrics()
    assert m.continuation_hits == 1 and m.snapshots_restored == 1 and m.continuations_published >= 1
    endpoint = len(first.prompt_token_ids) + first.max_tokens - 1  # 14: the first turn's consumed positions
    snapshots = [lane for plan in launches for lane in plan.lanes if lane.snapshot_destination >= 0]
    restores = [lane for plan in launches for lane in plan.lanes if lane.restore_source >= 0]
    assert snapshots[0].consumed == endpoint and endpoint % T
    assert [lane.consumed for lane in restores] == [endpoint]
    assert restores[0].restore_source == snapshots[0].snapshot_destination
    prefills = [lane for plan in launches if plan.operation in (C.OPERATION_PREFILL, C.OPERATION_MIXED)
                for lane in plan.lanes]
    assert prefills[-1].consumed == endpoint  # the second turn starts at the endpoint, not at 12
    assert m.reused_prompt_tokens == endpoint
    idle = runtime.scheduler.residency()
    assert idle.continuation_rows == 0 and not idle.referenced_pages and idle.published_continuations >= 1


def test_keys_stay_exact_one_token_changed_inside_the_partial_page_misses(core):
    first = conversation(GREEDY)
    (first_tokens,) = one_at_a_time(reference_runtime(core, pages=32), [first])
    changed = list(first_tokens)
    changed[-2] = (changed[-2] + 1) % 200  # position 13: inside the partial page [12, 14)
    (expected,) = one_at_a_time(reference_runtime(core, pages=32), [conversation(GREEDY, changed)])
    runtime = reference_runtime(core, pages=32, max_active=2)
    assert one_at_a_time(runtime, [first, conversation(GREEDY, changed)]) == [first_tokens, expected]
    m = runtime.metrics()
    assert m.continuations_published >= 1 and m.continuation_hits == 0


def test_a_matched_stop_publishes_no_continuation_and_rows_are_evicted_least_recently_used(core):
    runtime = reference_runtime(core, pages=32, max_active=2)
    scheduler = runtime.scheduler
    rows = scheduler.rows.capacity
    # a stop: the scheduler's `finish` without publication (what delivery does for a matched stop)
    scheduler.add(SchedulerRequest("stopped", conversation(GREEDY)))
    while not scheduler.idle:
        plan = scheduler.schedule()
        if plan is not None:
            runtime.executor.submit(plan)
        plan = scheduler.oldest()
        outcomes = scheduler.complete(plan, runtime.executor.collect(plan))
        if "stopped" in outcomes.request_ids:
            scheduler.finish("stopped", publish=False)
    assert scheduler.rows.published_rows == 0 and scheduler.counters.snapshots_published == 0
    # more mid-page endpoints than rows: each publication past the capacity evicts the oldest
    prompts = [GenerationRequest(tuple(range(50 + 10 * i, 60 + 10 * i)), max_tokens=5, sampling=GREEDY,
                                 ignore_eos=True) for i in range(rows + 2)]
    one_at_a_time(runtime, prompts)
    m = runtime.metrics()
    assert m.continuations_published == rows and m.continuation_evictions == 2
    assert m.snapshots_evicted >= 2


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_a_publication_cancelled_or_failed_in_flight_publishes_nothing(core, ending):
    runtime = reference_runtime(core, pages=32, max_active=2)
    scheduler, executor = runtime.scheduler, runtime.executor
    request = conversation(GREEDY)
    scheduler.add(SchedulerRequest("r", request))
    produced = 0
    while produced < request.max_tokens:
        plan = scheduler.schedule()
        executor.submit(plan)
        produced += len(scheduler.complete(plan, executor.collect(plan)))
    scheduler.finish("r", publish=True)  # its last round is fenced: the publication's snapshot round is due
    plan = scheduler.schedule()
    assert plan.operation == C.OPERATION_RESTORATION and plan.lanes[0].snapshot_destination >= 0
    executor.submit(plan)
    rows = executor.collect(plan)
    if ending == "cancelled":
        scheduler.cancel("r")  # after submission: the candidate is discarded at the round's fence
        scheduler.complete(plan, rows)
    else:
        assert scheduler.abort(plan) == []  # it had ended already: nothing to report failed
    assert scheduler.idle and scheduler.rows.published_rows == 0 and scheduler.rows.in_use == 0
    assert scheduler.counters.snapshots_published == 0 and not scheduler.residency().referenced_pages


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_a_continuation_evicted_for_its_row_moves_to_the_host_tier_and_is_readmitted_mid_page(core, sampling):
    """Later publications take every row, so the first turn's continuation is evicted for its row: it
    moves to the host tier (a copy out of its row), and the second turn's hit copies it straight from
    the host into its private page (no RESTORATION round), starting at the endpoint with the tokens of
    the run without the hit; the readmitted records are the row's bytes."""
    from helios.contract import PreparedContract
    from helios.engine.worker import BatchingRuntime
    from helios.reference.executor import ReferenceExecutor
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.packing import continuation_planes

    first = conversation(sampling)
    (first_tokens,) = one_at_a_time(reference_runtime(core, pages=32, max_active=2), [first])
    second = conversation(sampling, first_tokens)
    (expected,) = one_at_a_time(reference_runtime(core, pages=32, max_active=2), [second])
    executor = ReferenceExecutor.load(core, pages=32, host_pages=16)
    runtime = BatchingRuntime.for_executor(executor, PreparedContract.decode(core.contract, core.manifest),
                                           AdmissionLimits(max_active=2, queue_capacity=16), pages=32)
    rows = runtime.scheduler.rows.capacity
    fillers = [GenerationRequest(tuple(range(50 + 10 * i, 60 + 10 * i)), max_tokens=5, sampling=GREEDY,
                                 ignore_eos=True) for i in range(rows)]  # each publishes: the last evicts the first
    planes = continuation_planes(core.contract)
    offloaded, launches, readmitted = {}, [], []
    submit = executor.submit

    def checked(plan):
        launches.append(plan)
        for copy in plan.page_copies:
            if copy.continuation:  # the row's records before anything rewrites it
                offloaded[copy.host_page] = {p: executor.buffers[c][copy.page].copy() for p, c in planes.items()}
        due = [(copy.page, offloaded.pop(copy.host_page)) for copy in plan.page_copies
               if copy.readmit and copy.host_page in offloaded]
        submit(plan)
        endpoint = len(first.prompt_token_ids) + first.max_tokens - 1
        for page, records in due:
            for plane, row in records.items():
                assert executor.buffers[plane][page][:endpoint % T].tobytes() == row[:endpoint % T].tobytes()
            readmitted.append(page)

    executor.submit = checked
    assert one_at_a_time(runtime, [first, *fillers, second])[-1] == expected
    m, counters = runtime.metrics(), runtime.scheduler.counters
    assert counters.continuations_offloaded >= 1 and counters.continuations_readmitted == 1 == len(readmitted)
    assert m.continuation_hits == 1 and m.host_readmitted_pages >= 1
    endpoint = len(first.prompt_token_ids) + first.max_tokens - 1
    tail = launches[-(second.max_tokens + 2):]  # the second turn's rounds: no restore lane among them
    assert not any(lane.restore_source >= 0 for plan in tail for lane in plan.lanes)
    prefills = [lane for plan in launches if plan.operation in (C.OPERATION_PREFILL, C.OPERATION_MIXED)
                for lane in plan.lanes]
    assert prefills[-1].consumed == endpoint  # the second turn starts at the endpoint
