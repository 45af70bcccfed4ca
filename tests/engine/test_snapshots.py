"""Snapshots on CPU (fp32): preemption snapshots a request's partial page into continuation storage
after its round's fence, readmission restores it into a fresh private page, and the continuation
equals the uninterrupted run token for token, with the restored pages equal to the originals byte
for byte; the batching scheduler drives the reference executor here (tests/production/
test_snapshots_production.py drives the production executor the same way)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from helios.engine.config import SchedulerRequest
from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.packing import cache_planes
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import OPTIONS, serve

C = contract_pb2
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


@pytest.fixture(scope="module")
def old_core(tiny_checkpoint):
    """The same checkpoint without continuation storage: preemption recomputes (the old path)."""
    return prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(8, 16), context_tokens=64,
        snapshot_capacity=0))


def reference_runtime(core, *, pages: int, max_active: int = 4) -> BatchingRuntime:
    engine = ReferenceEngine.load(core, pages=pages)
    return BatchingRuntime.for_executor(engine.executor, engine.contract,
                                        AdmissionLimits(max_active=max_active, queue_capacity=16), pages=pages)


def reference_planes(runtime: BatchingRuntime) -> Callable[[str, int], np.ndarray]:
    return lambda plane, page: runtime.executor.buffers[plane][page].copy()


def drive(runtime: BatchingRuntime, requests: dict[str, GenerationRequest], preempt_at: dict[str, int],
          read_page: Callable[[str, int], np.ndarray], planes: list[str], *,
          fail: Callable[[object], bool] = lambda plan: False) -> tuple[dict[str, list[int]], int, list[str]]:
    """Run `requests` to their output limits on the runtime's scheduler and executor, in this thread;
    ask the scheduler to preempt request r once it has `preempt_at[r]` tokens; `fail(plan)` makes a
    round fail as an executor failure would. Checks every restored page against the bytes its page held
    when its snapshot round completed. Returns (tokens, pages checked, failed requests)."""
    scheduler, executor = runtime.scheduler, runtime.executor
    page_tokens = scheduler.config.page_tokens
    for request_id, request in requests.items():
        scheduler.add(SchedulerRequest(request_id, request))
    tokens: dict[str, list[int]] = {request_id: [] for request_id in requests}
    saved: dict[str, list[np.ndarray]] = {}
    checked, failed = 0, []
    while not scheduler.idle:
        while (plan := scheduler.schedule()) is not None:
            executor.submit(plan)
        plan = scheduler.oldest()
        assert plan is not None, "the scheduler holds requests but schedules no round"
        rows = executor.collect(plan)
        if fail(plan):
            failed += scheduler.abort(plan)
            continue
        outcomes = scheduler.complete(plan, rows)
        if plan.operation == C.OPERATION_RESTORATION:
            for request_id, lane in zip(plan.request_ids, plan.lanes, strict=True):
                page = lane.page_ids[lane.consumed // page_tokens]
                if lane.snapshot_destination >= 0:  # read now: the page returned to the cache at this fence
                    saved[request_id] = [read_page(plane, page) for plane in planes]
                if lane.restore_source >= 0:
                    for plane, before in zip(planes, saved.pop(request_id), strict=True):
                        assert read_page(plane, page).tobytes() == before.tobytes(), (request_id, plane)
                        checked += 1
        for request_id, token in zip(outcomes.request_ids, outcomes.tokens, strict=True):
            tokens[request_id].append(token)
            if len(tokens[request_id]) == requests[request_id].max_tokens:
                scheduler.finish(request_id)
            elif len(tokens[request_id]) == preempt_at.get(request_id):
                scheduler.preempt(request_id)
    return tokens, checked, failed


def random_requests(rng: random.Random, count: int) -> tuple[dict[str, GenerationRequest], dict[str, int]]:
    """Greedy and seeded requests, each preempted after a random count of its tokens (its endpoint,
    prompt + count - 1, mid-page or on a boundary, as it falls)."""
    requests, preempt_at = {}, {}
    for i in range(count):
        sampling = GREEDY if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=rng.randrange(1000))
        prompt = tuple(rng.randrange(256) for _ in range(rng.randrange(3, 12)))
        requests[f"r{i}"] = GenerationRequest(prompt, max_tokens=rng.randrange(5, 10), sampling=sampling,
                                              ignore_eos=True)
        preempt_at[f"r{i}"] = rng.randrange(1, requests[f"r{i}"].max_tokens)
    return requests, preempt_at


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_request_snapshotted_at_a_random_endpoint_resumes_bit_exactly(core, seed):
    requests, preempt_at = random_requests(random.Random(seed), 3)
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = reference_runtime(core, pages=32)
    planes = cache_planes(core.contract)
    tokens, checked, failed = drive(runtime, requests, preempt_at, reference_planes(runtime), planes)
    assert tokens == expected and not failed
    counters = runtime.scheduler.counters
    page_tokens = OPTIONS.page_tokens
    mid_page = sum(1 for r, k in preempt_at.items() if (len(requests[r].prompt_token_ids) + k - 1) % page_tokens)
    assert counters.preemptions == counters.readmissions == len(requests)
    assert counters.snapshots_published == counters.snapshots_restored == mid_page
    assert checked == mid_page * len(planes)
    assert counters.recomputed_tokens == 0 and counters.snapshots_evicted == 0
    idle = runtime.scheduler.residency()
    assert idle.continuation_rows == 0 and not idle.referenced_pages and idle.snapshots == 0


def older_grows_into_the_youngers_page() -> list[GenerationRequest]:
    """Both reach 12 positions (3 pages) in a 5-page cache; the younger takes its third page first, so
    the older preempts it when it needs its own third page, and the younger's endpoint is mid-page."""
    return [GenerationRequest(tuple(range(3)), max_tokens=10, sampling=GREEDY, ignore_eos=True),
            GenerationRequest(tuple(range(20, 26)), max_tokens=7, sampling=SamplingParams(temperature=0.8, seed=3),
                              ignore_eos=True)]


def test_page_pressure_preempts_without_recomputation_and_the_old_path_recomputes(core, old_core):
    requests = older_grows_into_the_youngers_page()
    reference = ReferenceEngine.load(core, pages=16)
    expected = [list(reference.generate(r)) for r in requests]
    counts = {}
    for name, prepared in (("snapshots", core), ("recompute", old_core)):
        runtime = reference_runtime(prepared, pages=5, max_active=2)
        results = serve(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
        assert [r.tokens for r in results] == expected, name
        counts[name] = runtime.metrics()
        assert runtime.scheduler.counters.preemptions >= 1, name
    snapshots, recompute = counts["snapshots"], counts["recompute"]
    assert snapshots.recomputed_tokens == 0 and snapshots.snapshots_restored >= 1
    assert snapshots.continuation_rows_in_use == 0
    assert snapshots.available["continuation_rows"] == snapshots.capacity["continuation_rows"] == 4  # one a slot
    assert recompute.recomputed_tokens > 0 and recompute.snapshots_restored == 0  # the counter can move
    assert "continuation_rows" not in recompute.capacity


def test_the_snapshot_metrics_move_through_the_metrics_collector(core):
    from helios.server.metrics import HeliosCollector, ServerCounters

    runtime = reference_runtime(core, pages=5, max_active=2)
    names = ("helios_snapshots_published", "helios_snapshots_evicted", "helios_snapshots_restored",
             "helios_recomputed_tokens")

    def exported() -> dict[str, float]:
        families = HeliosCollector(runtime.metrics, ServerCounters(), lambda: 0, 1).collect()
        return {f.name: f.samples[0].value for f in families if f.name in names}

    assert set(exported().values()) == {0}
    serve(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(older_grows_into_the_youngers_page())])
    after = exported()
    # published: the complete pages keyed as checkpoints and the younger's continuation snapshot
    assert after["helios_snapshots_published"] > runtime.scheduler.counters.snapshots_published >= 1
    assert after["helios_snapshots_restored"] >= 1 and after["helios_recomputed_tokens"] == 0
    gauges = runtime.scheduler.cache.gauges()
    assert after["helios_snapshots_evicted"] == gauges.evictions + runtime.scheduler.counters.snapshots_evicted


def test_harsh_page_pressure_gives_snapshots_up_and_counts_what_is_recomputed(core):
    """More than the cache can hold at once: snapshots are given up (their checkpoints return to the
    cache), readmissions recompute what the cache lost, counted, and every token stays the reference's."""
    rng = random.Random(3)
    requests = []
    for i in range(6):
        sampling = GREEDY if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=i)
        prompt = tuple(rng.randrange(256) for _ in range(rng.randrange(3, 10)))
        requests.append(GenerationRequest(prompt, max_tokens=rng.randrange(10, 20), sampling=sampling,
                                          ignore_eos=True))
    reference = ReferenceEngine.load(core, pages=16)
    expected = [list(reference.generate(r)) for r in requests]
    runtime = reference_runtime(core, pages=8)
    results = serve(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    assert [r.tokens for r in results] == expected
    counters = runtime.scheduler.counters
    assert counters.snapshots_evicted >= 1 and counters.recomputed_tokens > 0
    assert runtime.metrics().continuation_rows_in_use == 0


def test_a_failed_snapshot_round_publishes_nothing_and_fails_only_its_request(core):
    requests = {"old": older_grows_into_the_youngers_page()[0], "young": older_grows_into_the_youngers_page()[1]}
    runtime = reference_runtime(core, pages=5, max_active=2)
    scheduler = runtime.scheduler
    published: list[int] = []

    def fail(plan) -> bool:
        if plan.operation == C.OPERATION_RESTORATION and any(lane.snapshot_destination >= 0 for lane in plan.lanes):
            published.append(scheduler.cache.gauges().published)
            return True
        return False

    tokens, _, failed = drive(runtime, requests, {}, reference_planes(runtime), cache_planes(core.contract),
                              fail=fail)
    assert failed == ["young"] and published  # the snapshot round failed: its request fails
    assert scheduler.counters.snapshots_published == 0 and scheduler.counters.snapshots_restored == 0
    assert scheduler.rows.in_use == 0 and scheduler.counters.preemptions == 0
    reference = ReferenceEngine.load(core, pages=16)
    assert tokens["old"] == list(reference.generate(requests["old"]))  # the older one went on


def test_a_failed_round_publishes_no_checkpoint(core):
    """The round that would complete a request's first page fails: no page is published by it (the
    round's fence never came), and the request fails."""
    request = GenerationRequest(tuple(range(3)), max_tokens=4, sampling=GREEDY, ignore_eos=True)
    runtime = reference_runtime(core, pages=8)
    scheduler = runtime.scheduler

    def fail(plan) -> bool:  # the round whose lane consumes position 3: its page's last
        return any(lane.consumed + len(lane.tokens) >= 4 for lane in plan.lanes)

    _, _, failed = drive(runtime, {"r": request}, {}, reference_planes(runtime), cache_planes(core.contract),
                         fail=fail)
    assert failed == ["r"] and scheduler.cache.gauges().published == 0
    assert runtime.metrics().snapshots_published == 0


def test_a_stop_inside_a_page_leaves_every_earlier_checkpoint_unchanged(core):
    """A request ends (as at a matched stop) with its endpoint inside a page: the private publication
    candidate, its partial page, is discarded at the fence; the checkpoints it published before keep
    their bytes, and a later request reusing them generates the reference's tokens."""
    prompt = tuple(range(40, 49))  # 9 tokens: two complete pages once position 7 is consumed
    runtime = reference_runtime(core, pages=8, max_active=1)
    scheduler = runtime.scheduler
    planes = cache_planes(core.contract)
    read = reference_planes(runtime)
    stopped = GenerationRequest(prompt, max_tokens=8, sampling=GREEDY, ignore_eos=True)
    scheduler.add(SchedulerRequest("stop", stopped))
    before: dict[int, list[bytes]] = {}
    delivered = 0
    while not scheduler.idle:
        while (plan := scheduler.schedule()) is not None:
            runtime.executor.submit(plan)
        plan = scheduler.oldest()
        outcomes = scheduler.complete(plan, runtime.executor.collect(plan))
        delivered += len(outcomes)
        if delivered == 2 and scheduler.cache.gauges().published and not before:
            # endpoint 10: pages 0 and 1 are checkpoints, page 2 holds positions 8, 9 (the candidate)
            held = sorted(scheduler.residency().referenced_pages)  # a fresh cache: pages 0, 1, 2 in order
            before = {page: [read(plane, page).tobytes() for plane in planes] for page in held[:2]}
            scheduler.finish("stop")  # the matched stop: nothing more is scheduled
    assert len(before) == 2 and scheduler.cache.gauges().published == 2
    for page, planes_bytes in before.items():
        assert [read(plane, page).tobytes() for plane in planes] == planes_bytes, page
    follower = GenerationRequest(prompt + (7,), max_tokens=3, sampling=GREEDY, ignore_eos=True)
    results = serve(runtime, [PreparedRequest("follower", follower, observe_tokens=True)])
    assert results[0].tokens == list(ReferenceEngine.load(core, pages=16).generate(follower))
    assert runtime.scheduler.counters.reused_tokens >= 8


def test_without_a_free_continuation_row_a_preemption_recomputes_its_partial_page(tiny_checkpoint):
    """One snapshot row, three requests preempted at once mid-page: one is snapshotted into the row,
    the others keep their checkpoints only and recompute their partial pages (counted); every token
    stays the reference's and every row comes back."""
    one_row = prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1, 4), prefill_capacities=(16,), context_tokens=64,
        snapshot_capacity=1))
    greedy = [GenerationRequest(tuple(range(10 * i, 10 * i + 5)), max_tokens=6, sampling=GREEDY, ignore_eos=True)
              for i in range(3)]
    requests = {f"r{i}": r for i, r in enumerate(greedy)}
    reference = ReferenceEngine.load(one_row, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = reference_runtime(one_row, pages=32)
    # after 2 tokens each endpoint is 6: inside its second page
    tokens, checked, _ = drive(runtime, requests, {r: 2 for r in requests}, reference_planes(runtime),
                               cache_planes(one_row.contract))
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.preemptions == 3 and counters.snapshots_published == counters.snapshots_restored == 1
    assert counters.recomputed_tokens == 2 * (6 - 4)  # two partial pages of two positions each
    assert runtime.scheduler.rows.in_use == 0 and checked == len(cache_planes(one_row.contract))


def test_a_speculative_cores_snapshot_covers_the_draft_history(tiny_checkpoint, tiny_draft):
    """On a core with a draft, a snapshot and its restoration cover the draft's planes too: greedy
    requests preempted mid-page and resumed under SPECULATIVE rounds give the plain greedy tokens, and
    every restored page of every plane (target and draft) equals the original."""
    speculative = prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,), context_tokens=64,
        draft=tiny_draft("qwen3", "perturbed"), speculative_widths=(3,)))
    requests = {"a": GenerationRequest(tuple(range(3)), max_tokens=12, sampling=GREEDY, ignore_eos=True),
                "b": GenerationRequest(tuple(range(20, 26)), max_tokens=10, sampling=GREEDY, ignore_eos=True)}
    reference = ReferenceEngine.load(speculative, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    engine = ReferenceEngine.load(speculative, pages=32)
    runtime = BatchingRuntime.for_executor(engine.executor, engine.contract,
                                           AdmissionLimits(max_active=2, queue_capacity=4), pages=32,
                                           speculative_width=3)
    planes = cache_planes(speculative.contract)
    assert any(plane.startswith("draft.") for plane in planes)
    tokens, checked, _ = drive(runtime, requests, {"a": 5, "b": 3}, reference_planes(runtime), planes)
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.speculative_rounds >= 1 and counters.snapshots_restored >= 1
    assert checked == counters.snapshots_restored * len(planes) and counters.recomputed_tokens == 0
