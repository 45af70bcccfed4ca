"""Several EOS ids, the ending one neither the first nor the lowest (as chat cores end turns): every
layer ends a request at any of them. `RequestProgress` (both paths), the scheduler's lanes (the ids
the device gets), the reference engine, the sequential worker and the batching worker; an EOS check
on only the first id fails each of these tests."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from helios.engine.config import SchedulerRequest
from helios.engine.progress import RequestProgress
from helios.engine.sequential import SequentialRuntime
from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import AdmissionRejected, ReferenceEngine
from helios.runtime.events import Finished, Termination, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import OPTIONS, serve
from tests.engine.test_batching_runtime import runtime as batching_runtime

GREEDY = SamplingParams(temperature=0.0)
PROMPT = tuple(range(60, 70))


@dataclasses.dataclass
class _Step:
    pieces: tuple
    stopped: bool = False


class _Filter:
    """An output filter that releases each id as text (so `RequestProgress` takes its full path)."""

    def push(self, token):
        return _Step((str(token),))

    def finish(self):
        return ()


def _progress(eos_ids, *, own=(), output_filter=None, max_tokens=10):
    request = PreparedRequest("r", GenerationRequest((1, 2), max_tokens=max_tokens, eos_token_ids=own),
                              output_filter=output_filter, observe_tokens=True)
    return RequestProgress(request, stream=None, default_eos_ids=eos_ids)  # type: ignore[arg-type]


def _feed(progress, tokens):
    events = []
    for token in tokens:
        ended = progress.accept(token, None, lambda stream, event: events.append(event))
        if ended is not None:
            return ended[0], [e.token_id for e in events if isinstance(e, TokenEvent)]
    return None, [e.token_id for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("output_filter", [None, _Filter()], ids=["plain", "filtered"])
@pytest.mark.parametrize("ending", [9, 3])  # the last and highest; the lowest, not the first
def test_request_progress_ends_at_any_of_several_eos_ids(output_filter, ending):
    ended, ids = _feed(_progress((7, 3, 9), output_filter=output_filter), [5, 6, ending, 8])
    assert ended is Termination.EOS and ids == [5, 6, ending]
    # the request's own ids replace the core's
    ended, ids = _feed(_progress((7,), own=(4, ending), output_filter=output_filter), [7, ending, 8])
    assert ended is Termination.EOS and ids == [7, ending]


def _scheduler_lanes(eos_ids, request_ids=()):
    from tests.engine.test_scheduler import run, scheduler

    s = scheduler()
    s.config = dataclasses.replace(s.config, eos_ids=eos_ids)
    s.add(SchedulerRequest("a", GenerationRequest((1, 2, 3), max_tokens=4, eos_token_ids=request_ids)))
    lanes = []
    for _ in range(3):  # initialization, prefill, decode
        plan = s.schedule()
        lanes.extend(plan.lanes)
        run(s, plan)
    return lanes


def test_every_lane_carries_every_eos_id():
    lanes = _scheduler_lanes((299, 3, 150))
    assert [lane.eos_ids for lane in lanes] == [(299, 3, 150)] * 3  # in the core's order, none dropped
    assert {lane.eos_ids for lane in _scheduler_lanes((299,), request_ids=(8, 5))} == {(8, 5)}


def test_the_device_row_holds_every_eos_id():
    import numpy as np

    from helios.proto import contract_pb2 as V
    from helios.runtime.packing import LaneColumns, LaneOverflow, ResolvedBinding

    lanes = _scheduler_lanes((299, 3, 150))[1:]
    binding = ResolvedBinding("eos", V.VALUE_SOURCE_EOS_IDS, V.INDEXING_PHYSICAL_REQUEST_ROW, 0, -1, (),
                              np.dtype(np.int32), 4, (4,))
    buffer = np.full((4, 4), -7, dtype=np.int32)
    binding.write(buffer, lanes[:1], LaneColumns(lanes[:1]))
    assert buffer[lanes[0].slot].tolist() == [299, 3, 150, -1]
    narrow = dataclasses.replace(binding, row_shape=(2,))
    with pytest.raises(LaneOverflow, match="3 EOS ids exceed the row width 2"):
        narrow.write(np.zeros((4, 2), dtype=np.int32), lanes[:1], LaneColumns(lanes[:1]))


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


@pytest.fixture(scope="module")
def greedy_tokens(core):
    return list(ReferenceEngine.load(core, pages=16).generate(
        GenerationRequest(PROMPT, max_tokens=6, sampling=GREEDY, ignore_eos=True)))


def _eos_pair(tokens: list[int]) -> tuple[tuple[int, int], int]:
    """((lower, ending), cut): `ending` is a sampled id, `lower` a smaller id sampled before it never."""
    for k, ending in enumerate(tokens):
        if k == 0 or ending in tokens[:k]:
            continue
        lower = next((i for i in range(ending) if i not in tokens[:k + 1]), None)
        if lower is not None:
            return (lower, ending), k + 1
    raise AssertionError(f"no usable EOS pair in {tokens}")


def test_the_reference_engine_ends_at_the_second_id(core, greedy_tokens):
    eos, cut = _eos_pair(greedy_tokens)
    got = list(ReferenceEngine.load(core, pages=16).generate(
        GenerationRequest(PROMPT, max_tokens=6, sampling=GREEDY, eos_token_ids=eos)))
    assert got == greedy_tokens[:cut]


def _finished(results):
    (result,) = results
    assert isinstance(result[-1], Finished), result
    return [e.token_id for e in result if isinstance(e, TokenEvent)], result[-1].termination


def _drive(runtime, request):
    async def main():
        runtime.start()
        try:
            return [[event async for event in runtime.submit(request)]]
        finally:
            runtime.shutdown()

    return asyncio.run(main())


@pytest.mark.parametrize("where", ["request", "core"])
def test_the_sequential_worker_ends_at_the_second_id(core, greedy_tokens, where):
    eos, cut = _eos_pair(greedy_tokens)
    engine = ReferenceEngine.load(core, pages=16)
    runtime = SequentialRuntime(engine, AdmissionLimits(max_active=1), context_tokens=engine.contract.context_tokens,
                                vocab_size=engine.contract.vocabulary.sampled_tokens, rejections=(AdmissionRejected,),
                                eos_token_ids=eos if where == "core" else ())
    own = eos if where == "request" else ()
    request = PreparedRequest("e", GenerationRequest(PROMPT, max_tokens=6, sampling=GREEDY, eos_token_ids=own),
                              observe_tokens=True)
    tokens, termination = _finished(_drive(runtime, request))
    assert tokens == greedy_tokens[:cut] and termination is Termination.EOS


@pytest.mark.parametrize("where", ["request", "core"])
def test_the_batching_worker_ends_at_the_second_id(core, greedy_tokens, where):
    eos, cut = _eos_pair(greedy_tokens)
    rt = batching_runtime(core, pages=16)
    if where == "core":
        rt.scheduler.config = dataclasses.replace(rt.scheduler.config, eos_ids=eos)
    own = eos if where == "request" else ()
    (result,) = serve(rt, [PreparedRequest("e", GenerationRequest(PROMPT, max_tokens=6, sampling=GREEDY,
                                                                  eos_token_ids=own), observe_tokens=True)])
    assert result.tokens == greedy_tokens[:cut] and result.terminal.termination is Termination.EOS


def test_a_core_with_several_eos_ids_gives_every_lane_all_of_them(tiny_checkpoint):
    """A checkpoint naming two EOS ids (end of text and end of turn) prepares a core with both; the
    batching runtime's lanes carry both and a request naming none ends at the higher one."""
    from helios.contract import PreparedContract
    from helios.reference.executor import ReferenceExecutor

    small = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(8,),
                               context_tokens=16)
    core = prepare_checkpoint(tiny_checkpoint("llama"), small)
    contract = PreparedContract.decode(core.contract, core.manifest)
    eos = tuple(contract.frontend.eos_token_ids)
    assert len(eos) == 2 and eos[0] < eos[1]
    rt = BatchingRuntime.for_executor(ReferenceExecutor.load(core, pages=4), contract, AdmissionLimits(max_active=1),
                                      pages=4)
    assert rt.scheduler.config.eos_ids == eos
    rt.scheduler.add(SchedulerRequest("a", GenerationRequest((1, 2, 3), max_tokens=2)))
    assert rt.scheduler.schedule().lanes[0].eos_ids == eos
    ended, _ = _feed(_progress(eos), [eos[1]])
    assert ended is Termination.EOS
