"""BatchingRuntime end to end on CPU: the batching scheduler drives the reference executor (fp32)
over a tiny prepared core, and every request's tokens equal the sequential
reference engine's, under page pressure (preemption and readmission) and with prefix reuse."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from helios.engine.config import SchedulerRequest
from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.reference.executor import ReferenceExecutor
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams

OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(8, 16),
                             context_tokens=64)


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def runtime(core, *, pages: int, max_active: int = 4, queue_capacity: int = 16, prefix_reuse: bool = True):
    engine = ReferenceEngine.load(core, pages=pages)
    limits = AdmissionLimits(max_active=max_active, queue_capacity=queue_capacity)
    return BatchingRuntime.for_executor(engine.executor, engine.contract, limits, pages=pages, prefix_reuse=prefix_reuse)


@dataclass
class Result:
    tokens: list[int]
    timestamps: list[int]
    terminal: object
    enqueue_ns: int | None


async def _collect(stream) -> Result:
    tokens, stamps = [], []
    async for event in stream:
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
            if event.timestamp_ns is not None:
                stamps.append(event.timestamp_ns)
        else:
            return Result(tokens, stamps, event, stream.enqueue_ns)
    raise AssertionError("the stream ended without a terminal event")


def serve(rt: BatchingRuntime, requests: list[PreparedRequest], *, then=None) -> list[Result]:
    async def main():
        rt.start()
        try:
            streams = [rt.submit(r) for r in requests]
            if then is not None:
                await then(rt, streams)
            return [await _collect(s) for s in streams]
        finally:
            rt.shutdown()

    return asyncio.run(main())


def _workload(count: int, seed: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sampling = SamplingParams(temperature=0.0) if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=i)
        prompt = tuple(rng.randrange(256) for _ in range(rng.randrange(5, 30)))
        out.append(GenerationRequest(prompt, max_tokens=rng.randrange(4, 14), sampling=sampling, ignore_eos=True))
    return out


def test_page_pressure_completes_every_request_with_the_reference_tokens(core):
    requests = _workload(8, seed=3)
    reference = ReferenceEngine.load(core, pages=16)
    expected = [list(reference.generate(r)) for r in requests]
    # 10 pages of 4 tokens hold 40 positions; the workload's contexts total several times that.
    total = sum(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    assert total > 4 * 40
    rt = runtime(core, pages=10)
    results = serve(rt, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    assert [r.tokens for r in results] == expected
    assert all(isinstance(r.terminal, Finished) and r.terminal.termination is Termination.LENGTH for r in results)
    counters = rt.scheduler.counters
    assert counters.preemptions >= 1 and counters.readmissions >= 1
    assert counters.launches.get("mixed", 0) >= 1  # prefill and decode lanes shared rounds
    metrics = rt.metrics()
    assert metrics.capacity["pages"] == 10 and metrics.available["pages"] == 10  # every page allocatable again
    assert metrics.requests_finished["length"] == 8 and metrics.output_tokens == sum(map(len, expected))


def test_prefix_reuse_shows_in_reused_prompt_tokens_and_a_lower_time_to_first_token(core):
    shared = tuple(range(10, 58))  # 48 tokens: 12 pages, of which 11 are reusable (the last token is computed)
    greedy = SamplingParams(temperature=0.0)

    def timed(name: str) -> PreparedRequest:
        return PreparedRequest(name, GenerationRequest(shared, max_tokens=3, sampling=greedy),
                               observe_tokens=True, observe_timestamps=True)

    expected = list(ReferenceEngine.load(core, pages=16).generate(GenerationRequest(shared, max_tokens=3,
                                                                                    sampling=greedy)))
    rt = runtime(core, pages=32)

    async def main():
        rt.start()
        try:
            out = []
            for i in range(3):  # the first computes the prefix; the later ones reuse it
                out.append(await _collect(rt.submit(timed(f"r{i}"))))
            return out
        finally:
            rt.shutdown()

    cold, *warm = asyncio.run(main())
    assert cold.tokens == expected and all(w.tokens == expected for w in warm)
    assert cold.terminal.reused_prompt_tokens == 0
    assert all(w.terminal.reused_prompt_tokens == 44 for w in warm)
    ttft = lambda r: r.timestamps[0] - r.enqueue_ns  # noqa: E731
    assert min(ttft(w) for w in warm) < ttft(cold)
    assert rt.metrics().reused_prompt_tokens == 88


def test_cancellation_mid_flight_ends_the_request_and_returns_its_pages(core):
    rt = runtime(core, pages=16)
    long = GenerationRequest(tuple(range(1, 20)), max_tokens=40, sampling=SamplingParams(temperature=0.0),
                             ignore_eos=True)

    async def cancel_after_first_token(rt, streams):
        first = await streams[0].next()
        assert isinstance(first, TokenEvent)
        rt.cancel("long")

    results = serve(rt, [PreparedRequest("long", long, observe_tokens=True)], then=cancel_after_first_token)
    terminal = results[0].terminal
    assert isinstance(terminal, Finished) and terminal.termination is Termination.CANCELLED
    assert terminal.output_tokens < 40
    assert rt.metrics().available["pages"] == 16


@dataclass
class _Step:
    pieces: tuple
    stopped: bool


class _StopOn:
    """An output filter that stops when `token` is sampled (as a string stop would)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def push(self, token_id: int) -> _Step:
        return _Step((str(token_id),), token_id == self.token)

    def finish(self):
        return ()


def test_a_host_stop_ends_at_the_matching_token_with_one_round_outstanding(core):
    prompt = tuple(range(30, 45))
    greedy = SamplingParams(temperature=0.0)
    expected = list(ReferenceEngine.load(core, pages=16).generate(
        GenerationRequest(prompt, max_tokens=8, sampling=greedy, ignore_eos=True)))
    stop_at = expected[3]
    cut = expected.index(stop_at) + 1
    rt = runtime(core, pages=16)
    stopped = PreparedRequest("s", GenerationRequest(prompt, max_tokens=8, sampling=greedy, ignore_eos=True),
                              output_filter=_StopOn(stop_at), observe_tokens=True, host_stop=True)
    other = PreparedRequest("o", GenerationRequest(prompt, max_tokens=8, sampling=greedy, ignore_eos=True))
    result, plain = serve(rt, [stopped, other])
    assert result.tokens == expected[:cut]
    assert result.terminal.termination is Termination.STOP and result.terminal.output_tokens == cut
    assert plain.terminal.termination is Termination.LENGTH and plain.terminal.output_tokens == 8
    assert rt.scheduler.max_inflight() == 1


def test_eos_ends_a_request_and_requests_outside_the_capacities_are_rejected(core):
    prompt = tuple(range(60, 70))
    greedy = SamplingParams(temperature=0.0)
    expected = list(ReferenceEngine.load(core, pages=16).generate(
        GenerationRequest(prompt, max_tokens=6, sampling=greedy, ignore_eos=True)))
    rt = runtime(core, pages=16)
    eos = PreparedRequest("e", GenerationRequest(prompt, max_tokens=6, sampling=greedy,
                                                 eos_token_ids=(expected[2],)), observe_tokens=True)
    too_long = PreparedRequest("t", GenerationRequest(tuple(range(60)), max_tokens=10))
    too_big = PreparedRequest("b", GenerationRequest((1, 999), max_tokens=2))
    result, long_result, big_result = serve(rt, [eos, too_long, too_big])
    assert result.tokens == expected[: expected.index(expected[2]) + 1]
    assert result.terminal.termination is Termination.EOS
    assert isinstance(long_result.terminal, Rejected) and "context" in long_result.terminal.reason
    assert isinstance(big_result.terminal, Rejected) and "vocabulary" in big_result.terminal.reason
    assert rt.metrics().requests_rejected == 2


def test_a_full_ingress_channel_rejects_and_an_executor_failure_fails_the_round(core):
    rt = runtime(core, pages=16, queue_capacity=1)

    class Broken:
        frames = 1

        def submit(self, plan):
            raise RuntimeError("device lost")

        def collect(self, plan):
            raise AssertionError("nothing was submitted")

    rt._executor = Broken()
    request = GenerationRequest((1, 2, 3), max_tokens=2)

    async def main():
        streams = [rt.submit(PreparedRequest("a", request)), rt.submit(PreparedRequest("b", request))]
        rt.start()
        try:
            return [await _collect(s) for s in streams]
        finally:
            rt.shutdown()

    rt._status = "ok"  # accept submissions before the worker starts, so the ingress channel fills
    first, second = asyncio.run(main())
    assert isinstance(second.terminal, Rejected) and "ingress" in second.terminal.reason
    assert isinstance(first.terminal, Failed) and "device lost" in first.terminal.message
    assert rt.metrics().requests_failed == 1


def test_the_http_server_serves_through_the_production_runtime(core):
    """The server's app over BatchingRuntime (reference executor): chat JSON and SSE, a string stop
    (the host-stop barrier), 503 for a scheduler rejection, the cache gauges on /metrics."""
    import threading
    import time

    import httpx
    import uvicorn

    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.preparation import Preparer
    from helios.server.app import create_app
    from helios.server.state import ServerState

    def free_port() -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    contract = core.contract
    rt = runtime(core, pages=24, max_active=2, queue_capacity=4)
    preparer = Preparer(Bootstrap.from_core(core), served_id=contract.served_id, context_tokens=contract.context_tokens)
    state = ServerState(runtime=rt, preparer=preparer)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    chat = {"model": contract.served_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
            "temperature": 0, "return_token_ids": True}
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            plain = client.post("/v1/chat/completions", json=chat)
            assert plain.status_code == 200, plain.text
            body = plain.json()
            token_ids = body["choices"][0]["token_ids"]
            expected = list(ReferenceEngine.load(core, pages=16).generate(GenerationRequest(
                tuple(body["prompt_token_ids"]), max_tokens=6, sampling=SamplingParams(temperature=0.0),
                eos_token_ids=tuple(contract.model.frontend.eos_token_ids))))
            assert token_ids == expected
            with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as streamed:
                lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            text = body["choices"][0]["message"]["content"] or ""
            if len(text) > 2:
                stop = client.post("/v1/chat/completions", json={**chat, "stop": [text[1:3]]}).json()
                assert stop["choices"][0]["finish_reason"] == "stop"
                content = stop["choices"][0]["message"]["content"] or ""
                assert text.startswith(content) and text[1:3] not in content
            too_long = client.post("/v1/chat/completions", json={**chat, "max_tokens": 4000})
            assert too_long.status_code in (400, 503)
            metrics = client.get("/metrics").text
            assert 'helios_capacity{resource="pages"} 24.0' in metrics
            assert 'helios_available{resource="pages"} 24.0' in metrics
            assert "helios_prefix_reused_tokens" in metrics
    finally:
        server.should_exit = True
        thread.join(10)


class _PackFailsOnce:
    """A graph packing whose first `pack` raises (as a lane the graph cannot hold would)."""

    def __init__(self, packing) -> None:
        self._packing = packing
        self.failed = False

    @property
    def bindings(self):
        return self._packing.bindings

    def pack(self, lanes, buffers) -> None:
        if not self.failed:
            self.failed = True
            from helios.runtime.packing import LaneOverflow

            raise LaneOverflow("injected: the round cannot be packed")
        self._packing.pack(lanes, buffers)


def test_a_round_the_executor_cannot_pack_fails_only_its_own_requests(core):
    """A submission that fails before the program runs still takes its submission sequence, so the
    next rounds' completions answer the sequence the scheduler numbered them with."""
    import dataclasses as dc

    greedy = SamplingParams(temperature=0.0)
    later = GenerationRequest(tuple(range(40, 50)), max_tokens=4, sampling=greedy, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(later))
    rt = runtime(core, pages=16, max_active=1)
    engine = rt._executor
    engine.graphs["prefill_p8"] = dc.replace(engine.graphs["prefill_p8"],
                                             packing=_PackFailsOnce(engine.graphs["prefill_p8"].packing))

    async def main():
        rt.start()
        try:
            failed = await _collect(rt.submit(PreparedRequest("a", GenerationRequest((1, 2, 3), max_tokens=2))))
            served = await _collect(rt.submit(PreparedRequest("b", later, observe_tokens=True)))
            return failed, served
        finally:
            rt.shutdown()

    failed, served = asyncio.run(main())
    assert isinstance(failed.terminal, Failed) and "cannot be packed" in failed.terminal.message
    assert isinstance(served.terminal, Finished), served.terminal
    assert served.tokens == expected


class _FinishFails(_StopOn):
    """An output filter whose final flush raises (an output failure at the output limit)."""

    def __init__(self) -> None:
        super().__init__(-1)

    def finish(self):
        raise ValueError("injected: the output cannot be flushed")


def test_an_output_failure_at_the_end_fails_only_its_request(core):
    greedy = SamplingParams(temperature=0.0)
    other_request = GenerationRequest(tuple(range(50, 58)), max_tokens=5, sampling=greedy, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(other_request))
    rt = runtime(core, pages=24)
    broken = PreparedRequest("x", GenerationRequest(tuple(range(30, 38)), max_tokens=2, sampling=greedy,
                                                    ignore_eos=True), output_filter=_FinishFails())
    other = PreparedRequest("o", other_request, observe_tokens=True)
    failed, served = serve(rt, [broken, other])
    assert isinstance(failed.terminal, Failed) and "cannot be flushed" in failed.terminal.message
    assert isinstance(served.terminal, Finished) and served.tokens == expected
    assert rt.metrics().requests_failed == 1


def test_token_timestamps_are_read_right_after_the_round_completes(core):
    """Every timed token of a round is stamped before any lane's stop handling or output parsing."""
    log: list[str] = []

    class Clock:
        def restart(self) -> None:
            pass

        def now_ns(self) -> int:
            log.append("read")
            return len(log)

    class Logged(_StopOn):
        def push(self, token_id: int) -> _Step:
            log.append("push")
            return super().push(token_id)

    rt = runtime(core, pages=24)
    engine = rt._executor

    class Executor:
        frames = engine.frames

        def submit(self, plan):
            engine.submit(plan)

        def collect(self, plan):
            rows = engine.collect(plan)
            log.append("round")
            return rows

    rt._executor, rt.clock = Executor(), Clock()
    greedy = SamplingParams(temperature=0.0)
    requests = [PreparedRequest(name, GenerationRequest(tuple(range(first, first + 6)), max_tokens=4,
                                                        sampling=greedy, ignore_eos=True),
                                output_filter=Logged(-1), observe_tokens=True, observe_timestamps=True)
                for name, first in (("a", 10), ("b", 70))]
    results = serve(rt, requests)
    assert all(len(r.timestamps) == 4 for r in results)
    rounds = "".join("R" if e == "round" else "r" if e == "read" else "p" for e in log).split("R")
    shared = [events for events in rounds if events.count("p") > 1]
    assert shared, "the two requests never shared a round"
    assert all("pr" not in events for events in rounds), rounds  # no clock read after a lane's parsing


def test_a_request_enqueued_as_the_worker_stops_still_ends(core):
    """Submission checks the worker's state, then enqueues: a shutdown in between must not leave the
    request without a terminal event."""
    from helios.runtime.interface import EventStream

    rt = runtime(core, pages=16)
    request = PreparedRequest("late", GenerationRequest((1, 2, 3), max_tokens=2))

    async def main():
        rt.start()
        assert rt._admission_check(request) is None
        rt.shutdown()  # the worker exits between the check and the enqueue
        stream = EventStream(request.request_id, asyncio.get_running_loop())
        rt._enqueue(request, stream)
        return await asyncio.wait_for(_collect(stream), 2)

    result = asyncio.run(main())
    assert isinstance(result.terminal, Rejected) and "stopped" in result.terminal.reason


def test_a_refused_framed_submission_fails_its_round_not_the_worker(core):
    """An executor that holds two frames and refuses one submission: that round's requests fail, the
    worker goes on serving. The core keeps pending tokens on the device (two frames)."""
    greedy = SamplingParams(temperature=0.0)
    later = GenerationRequest(tuple(range(40, 50)), max_tokens=3, sampling=greedy, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(later))
    engine = ReferenceEngine.load(core, pages=16)
    executor = ReferenceExecutor.load(core, pages=16, frames=2)

    class Framed:
        frames = 2
        calls = 0

        def submit(self, plan):
            Framed.calls += 1
            if Framed.calls == 2:
                raise RuntimeError("injected: submission refused")
            executor.submit(plan)

        def collect(self, plan):
            return executor.collect(plan)

    rt = BatchingRuntime.for_executor(Framed(), engine.contract, AdmissionLimits(max_active=1, queue_capacity=4),
                                       pages=16)

    async def main():
        rt.start()
        try:
            failed = await _collect(rt.submit(PreparedRequest("a", GenerationRequest((1, 2, 3), max_tokens=2))))
            served = await _collect(rt.submit(PreparedRequest("b", later, observe_tokens=True)))
            return failed, served, rt.health()
        finally:
            rt.shutdown()

    failed, served, health = asyncio.run(main())
    assert isinstance(failed.terminal, Failed) and "submission refused" in failed.terminal.message
    assert isinstance(served.terminal, Finished) and served.tokens == expected
    assert health.ok


def test_submission_sequences_keep_counting_past_the_32_bit_completion_field(core):
    """A long-running server passes 2**31 rounds: the transport writes the sequence modulo 2**31 into
    its 32-bit completion field and every row is still checked against it."""
    greedy = SamplingParams(temperature=0.0)
    request = GenerationRequest(tuple(range(40, 50)), max_tokens=4, sampling=greedy, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(request))
    engine = ReferenceEngine.load(core, pages=16)
    rt = BatchingRuntime.for_executor(engine.executor, engine.contract, AdmissionLimits(max_active=2), pages=16)
    rt.scheduler._sequence = 2**31 - 3  # the rounds of this request cross 2**31
    (result,) = serve(rt, [PreparedRequest("a", request, observe_tokens=True)])
    assert isinstance(result.terminal, Finished), result.terminal
    assert result.tokens == expected and engine.executor.sequence > 2**31


def test_an_id_the_scheduler_still_holds_is_a_duplicate(core):
    """A request that ended while a round of it is still in flight (two frames) stays with the
    scheduler until that round's fence: its id is not free yet, and reusing it must be refused at
    submission (the worker's scheduler would refuse it, and that failure stopped the worker)."""
    from helios.runtime.interface import DuplicateRequestId

    rt = runtime(core, pages=16)
    rt.scheduler.add(SchedulerRequest("x", GenerationRequest((1, 2, 3), max_tokens=2)))  # held, fence pending
    rt._status = "ok"  # accept submissions; no worker runs the held request

    async def main():
        with pytest.raises(DuplicateRequestId):
            rt.submit(PreparedRequest("x", GenerationRequest((4, 5, 6), max_tokens=2)))
        rt.submit(PreparedRequest("y", GenerationRequest((4, 5, 6), max_tokens=2)))

    asyncio.run(main())
    assert [e.request.request_id for e in rt._ingress] == ["y"]


def test_a_request_without_eos_ids_ends_at_the_cores(core):
    """A request that names no EOS ids ends at the core's, as its lanes tell the device and as the
    reference engine ends it."""
    import dataclasses as dc

    prompt = tuple(range(60, 70))
    greedy = SamplingParams(temperature=0.0)
    expected = list(ReferenceEngine.load(core, pages=16).generate(
        GenerationRequest(prompt, max_tokens=6, sampling=greedy, ignore_eos=True)))
    rt = runtime(core, pages=16)
    rt.scheduler.config = dc.replace(rt.scheduler.config, eos_ids=(expected[2],))  # the core's EOS ids
    (result,) = serve(rt, [PreparedRequest("e", GenerationRequest(prompt, max_tokens=6, sampling=greedy),
                                           observe_tokens=True)])
    assert result.tokens == expected[: expected.index(expected[2]) + 1]
    assert result.terminal.termination is Termination.EOS


def test_the_event_loop_is_not_held_while_a_round_runs_in_submit(core):
    """The reference executor runs a round inside `submit`: the worker calls it outside its lock, so
    submissions, cancellations and metrics reads on the event loop go on while a round runs, and a
    request submitted meanwhile is served."""
    import threading

    rt = runtime(core, pages=24)
    engine = rt._executor
    running, release = threading.Event(), threading.Event()

    class Slow:
        frames = engine.frames
        held = False

        def submit(self, plan):
            if not Slow.held:  # the first round waits until the test has done its reads
                Slow.held = True
                running.set()
                assert release.wait(10)
            engine.submit(plan)

        def collect(self, plan):
            return engine.collect(plan)

    rt._executor = Slow()
    greedy = SamplingParams(temperature=0.0)

    def request(name: str, first: int) -> PreparedRequest:
        return PreparedRequest(name, GenerationRequest(tuple(range(first, first + 5)), max_tokens=3, sampling=greedy,
                                                       ignore_eos=True))

    async def main():
        rt.start()
        first = asyncio.ensure_future(_collect(rt.submit(request("first", 10))))
        assert await asyncio.to_thread(running.wait, 10)
        # the worker is inside the executor's submit: none of these waits for the round
        loop = asyncio.get_running_loop()
        started = loop.time()
        second = rt.submit(request("second", 40))
        metrics = rt.metrics()
        rt.cancel("nobody")
        elapsed = loop.time() - started
        release.set()
        results = [await asyncio.wait_for(first, 30), await asyncio.wait_for(_collect(second), 30)]
        rt.shutdown()
        return elapsed, metrics, results

    elapsed, metrics, results = asyncio.run(main())
    assert elapsed < 5.0  # the round waits for 10 s: a read that waited for it would take that long
    assert metrics.requests_submitted == 2
    assert all(isinstance(r.terminal, Finished) and r.terminal.output_tokens == 3 for r in results), results
