"""Host milliseconds per round of the production runtime (CPU profiling harness for issue #7).

    python bench/host_round.py                       # 64 and 256 concurrent decode lanes
    python bench/host_round.py --lanes 256 --rounds 200 --profile 25
    python bench/host_round.py --json host_round.json
    python bench/host_round.py --lanes 8 32 128 --speculative 2   # steady SPECULATIVE rounds of width 2
    python bench/host_round.py --prefill 2048                     # one fresh 2,048-token prompt a round

What runs. A tiny Qwen3-shaped core (2 layers, hidden 64, vocabulary 512), prepared in memory with
page 16 tokens and DECODE graphs of 1, 64 and 256 lanes, loaded with the production executor
(`NativeModel`) on the CPU, driven by the real `BatchingRuntime` and its batching scheduler: one
`_step` of the runtime's worker is one round (schedule -> submit: page-table updates and packing
into staging -> upload -> execute -> collect: read back -> validate -> retire -> deliver token events).

DEVICE STUB (this bench only). The executor's `_execute` (CUDA-graph replay, or the eager plan on a
CPU) is replaced by `StubDevice.execute`, which writes the completion record a correct device would
(generation echo, emitted, consumed endpoint, a sampled id, status 0, -1 cursors, plus the transport's
frame and sequence) with a few NumPy operations over the round's lanes. Its time is reported as
"device (stub)" and is excluded from the host total. On a CPU the staging arrays are the device
buffers themselves, so "upload" is only the executor's bookkeeping of what to copy.

Requests: `--lanes` requests of `--prompt` tokens, EOS ignored, long outputs, observed token ids (no
detokenizer: the output filter is per request and not part of the round). Every request is admitted
and prefilled first; the measured rounds are steady DECODE rounds holding every lane.

`--speculative W`: the core also carries a draft (the target's own checkpoint) and SPECULATIVE graphs
of width W at the same lane capacities, and the runtime speculates at the fixed width W (with
`--history-drafting`, copied proposals too); the measured rounds are steady SPECULATIVE rounds
holding every lane. The stub then answers as a speculative program would: each lane offered its
limit, a deterministic number of its proposals accepted (0 .. limit - 1, varying by lane and
round), its emitted ids, endpoint and draft cursor.

`--prefill N`: instead of the runtime's decode rounds, the executor's own rounds (`run_round`, as
bench/prefill.py times them on a GPU) of one fresh N-token prompt each, in a core whose PREFILL graph
holds N rows: staging every binding of N packed rows (tokens, positions, the page table, the
sampler's rows and the prompt's histogram), the stub's answer and the read-back. "host" is then the
median of `--rounds` rounds, the stub's time excluded (no breakdown).

Figures. "host" is pass 1: `--rounds` rounds with nothing wrapped, wall time per round less the
stub's; "CPU" is the same rounds' median (and 10th percentile) of the worker thread's CPU time
(`time.thread_time`, less the stub's), which other work on a shared machine disturbs less than wall
time (the 10th percentile least). The breakdown is pass 2: the next `--rounds` rounds with a timer around each part (its own
overhead, about a microsecond a call, inflates the parts a little, so they need not sum to "host").
`--profile N` runs 50 more rounds under cProfile (between the two passes, nothing wrapped) and prints
its top N entries by own time.

Breakdown columns (milliseconds per round, mean over the measured rounds):
  schedule   Scheduler.schedule (admission, cohort, pages, LaneInputs, the round plan)
  pack       the plan's page-table updates and the graph's bindings into host staging (NativeExecutor)
  upload     staging -> device copies (no copies on a CPU: the bookkeeping only)
  read-back  NativeExecutor.collect: completion record -> CompletionRows
  validate   the one completion check (helios.runtime.completion.validate_round, from Scheduler.complete)
  retire     Scheduler.complete without validation (lanes retire, prefixes publish, outcomes)
  events     the runtime's delivery of the round's tokens (EOS / output limit / TokenEvents to the streams)
  other      the rest of the runtime step (locks, cancellation, bookkeeping)
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class StubDevice:
    """DEVICE STUB: stands in for the graph replay; writes a correct completion record (bench only)."""

    def __init__(self, executor) -> None:
        import numpy as np

        from helios.proto import manifest_pb2 as M
        from helios.runtime.completion import transport_sequence

        self.np = np
        self.executor = executor
        self.lanes = ()
        self.seconds = 0.0  # time spent in the stub (excluded from the host figures)
        self.cpu_seconds = 0.0  # the same as the thread's CPU time
        self.transport_sequence = transport_sequence
        # the per-lane fields a DECODE, PREFILL or INITIALIZATION round writes; the prompt-score
        # fields (rows by packed position) are read only after SCORED_PREFILL rounds, which this bench
        # never runs
        scored = (M.COMPLETION_FIELD_PROMPT_SCORES, M.COMPLETION_FIELD_PROMPT_SCORE_IDS)
        self.fields = {field: executor.buffers[name].numpy().reshape(executor.buffers[name].shape[0], -1)
                       for field, name in executor.completion.items() if field not in scored}
        self.M = M
        pack = executor._pack

        def remember(graph, lanes, page_table_updates=None):  # the stub needs the lanes it answers
            self.lanes = lanes
            pack(graph, lanes, page_table_updates)

        executor._pack = remember
        executor._execute = self.execute

    def execute(self, graph, frame, sequence) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        self._write(frame, sequence)
        self.seconds += time.perf_counter() - start
        self.cpu_seconds += time.thread_time() - cpu

    def _write(self, frame: int, sequence: int) -> None:
        np, M, lanes = self.np, self.M, self.lanes
        slots = np.fromiter((lane.slot for lane in lanes), dtype=np.int64, count=len(lanes))
        consumed = np.fromiter((lane.consumed for lane in lanes), dtype=np.int64, count=len(lanes))
        offers = np.fromiter((lane.speculative_limit for lane in lanes), dtype=np.int64, count=len(lanes))
        if offers.any():  # a SPECULATIVE round: accept 0 .. offer - 1 proposals, by lane and round
            accepted = (consumed * 3 + slots) % offers
            emitted = accepted + 1
            endpoint = consumed + emitted
            ids = self.fields[M.COMPLETION_FIELD_SAMPLED_IDS]
            ids[slots] = (endpoint[:, None] * 7 + np.arange(ids.shape[1])) % 250
            self._write_fields(frame, sequence, slots, {
                M.COMPLETION_FIELD_OFFERS: offers, M.COMPLETION_FIELD_ACCEPTED_DRAFTS: accepted,
                M.COMPLETION_FIELD_EMITTED: emitted, M.COMPLETION_FIELD_CONSUMED_ENDPOINT: endpoint,
                M.COMPLETION_FIELD_DRAFT_CURSOR: endpoint})
            return
        endpoint = consumed + np.fromiter((len(lane.tokens) for lane in lanes), dtype=np.int64, count=len(lanes))
        self._write_fields(frame, sequence, slots, {
            M.COMPLETION_FIELD_EMITTED: np.fromiter((lane.samples for lane in lanes), dtype=np.int64,
                                                    count=len(lanes)),
            M.COMPLETION_FIELD_CONSUMED_ENDPOINT: endpoint,
            M.COMPLETION_FIELD_SAMPLED_IDS: (endpoint * 7 + slots) % 250,
            M.COMPLETION_FIELD_DRAFT_CURSOR: -1})

    def _write_fields(self, frame: int, sequence: int, slots, lane_values: dict) -> None:
        np, M, lanes = self.np, self.M, self.lanes
        values = {
            M.COMPLETION_FIELD_FRAME_INDEX: frame,
            M.COMPLETION_FIELD_SUBMISSION_SEQUENCE: self.transport_sequence(sequence),
            M.COMPLETION_FIELD_STATUS: 0,
            M.COMPLETION_FIELD_GENERATION: np.fromiter((lane.generation for lane in lanes), dtype=np.int64,
                                                       count=len(lanes)),
            M.COMPLETION_FIELD_MODEL_RESERVED: -1,
            **lane_values,
        }
        for field, array in self.fields.items():
            if field not in values:  # the speculative fields of a plain round: not read
                continue
            if array.shape[0] == 1:
                array[0, 0] = values[field]
            else:
                array[slots, 0] = values[field]


class Timers:
    """Wall time of wrapped callables, per name; nested wrapped calls are subtracted from their callers."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []  # time spent in nested timed calls, per open frame

    def wrap(self, owner, attribute: str, name: str) -> None:
        function = getattr(owner, attribute)
        timers = self

        def timed(*args, **kwargs):
            timers._stack.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = timers._stack.pop()
                timers.totals[name] += elapsed - nested
                if timers._stack:
                    timers._stack[-1] += elapsed

        setattr(owner, attribute, timed)


def build_model(lanes: int, prompt: int, max_tokens: int, speculative: int = 0, history_drafting: bool = False):
    from decode import make_checkpoint

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production.loading import load_native_model

    context = 16 * (-(-(prompt + max_tokens + 16) // 16))
    batches = tuple(sorted({1, 64, lanes}))
    with tempfile.TemporaryDirectory() as tmp:
        directory = make_checkpoint("tiny", Path(tmp) / "tiny", "cpu")
        # A host-fed core (one frame), or with a draft a device-fed one (speculative rounds are one at a
        # time): StubDevice answers each round in its frame (`_execute`).
        draft = {"draft": directory, "speculative_widths": (speculative,)} if speculative else {}
        options = PreparationOptions(dtype="fp32", page_tokens=16, batch_capacities=batches,
                                     prefill_capacities=(max(prompt, 16),), context_tokens=context,
                                     pending_token="device" if speculative else "host", **draft)
        core = prepare_checkpoint(directory, options)
        pages = lanes * (context // 16) + 16
        return load_native_model(core, device="cpu", max_concurrency=lanes, pages=pages,
                                 speculative_width=speculative or None, history_drafting=history_drafting)


def measure(model, lanes: int, *, prompt: int, rounds: int, profile: int, speculative: int = 0,
            history_drafting: bool = False) -> dict:
    from helios.production.loading import runtime_for
    from helios.runtime.interface import EventStream, PreparedRequest
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from helios.runtime.request import GenerationRequest, SamplingParams

    executor = model.executor
    stub = StubDevice(executor)
    limits = AdmissionLimits(max_active=lanes, queue_capacity=lanes)
    options = RuntimeOptions(limits, speculative_width=speculative, history_drafting=True) if history_drafting else (
        RuntimeOptions(limits, speculative_width=speculative) if speculative else RuntimeOptions(limits))
    runtime = runtime_for(model, options)
    steady = "speculative" if speculative else "decode"  # the operation of the measured rounds
    scheduler = runtime.scheduler
    loop = asyncio.new_event_loop()
    max_tokens = model.contract.context_tokens - prompt - 1
    runtime.clock.restart()
    runtime._status = "ok"  # what start() sets; the bench drives the worker's steps in this thread
    streams = []
    for i in range(lanes):
        ids = tuple((i * 31 + k * 7) % 250 for k in range(prompt))
        request = GenerationRequest(ids, max_tokens=max_tokens, sampling=SamplingParams(temperature=0.6, seed=i),
                                    ignore_eos=True)
        streams.append(EventStream(f"r{i}", loop))
        runtime._enqueue(PreparedRequest(f"r{i}", request, observe_tokens=True), streams[-1])

    def drain() -> None:  # the serving loop reads the events (outside the timed rounds)
        loop.run_until_complete(asyncio.sleep(0))

    def check() -> None:  # a failed request would leave the worker waiting for work forever
        if runtime._failed or runtime._rejected:
            drain()
            events = [event for stream in streams for event in list(stream._queue._queue)
                      if type(event).__name__ in ("Failed", "Rejected")]
            raise SystemExit(f"{runtime._failed} requests failed and {runtime._rejected} were rejected "
                             f"(first: {events[0] if events else '?'})")

    # Warm up: admission, initialization and prefill, until three rounds in a row were DECODE rounds.
    streak = 0
    for _ in range(20 * lanes):
        check()
        before = dict(scheduler.counters.launches)
        runtime._step()
        drain()
        after = scheduler.counters.launches
        only_decode = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)} == {steady: 1}
        streak = streak + 1 if only_decode and scheduler.active == lanes else 0
        if streak >= 3:
            break
    else:
        raise SystemExit(f"warm-up did not reach steady {steady} rounds")

    def run(count: int) -> float:
        decode_before = scheduler.counters.launches.get(steady, 0)
        total = 0.0
        for _ in range(count):
            check()
            device, device_cpu = stub.seconds, stub.cpu_seconds
            start, cpu = time.perf_counter(), time.thread_time()
            runtime._step()
            elapsed = time.perf_counter() - start
            cpu_rounds.append(time.thread_time() - cpu - (stub.cpu_seconds - device_cpu))
            total += elapsed
            per_round.append(elapsed - (stub.seconds - device))
            drain()
        done = scheduler.counters.launches.get(steady, 0) - decode_before
        if done != count or scheduler.active != lanes:
            raise SystemExit(f"expected {count} {steady} rounds of {lanes} lanes, ran {done} with {scheduler.active}")
        return total

    # Pass 1, unwrapped: the host total (the stub times itself: its time is subtracted), and the time
    # Python's cyclic garbage collector ran inside it (included in the total).
    collector = {"seconds": 0.0, "runs": 0, "start": 0.0}

    def collecting(phase: str, info: dict) -> None:
        if phase == "start":
            collector["start"] = time.perf_counter()
        else:
            collector["seconds"] += time.perf_counter() - collector["start"]
            collector["runs"] += 1

    stub.seconds = 0.0
    per_round: list[float] = []
    cpu_rounds: list[float] = []
    gc.callbacks.append(collecting)
    try:
        total = run(rounds)
    finally:
        gc.callbacks.remove(collecting)
    host = 1e3 * (total - stub.seconds) / rounds
    median = 1e3 * statistics.median(per_round)
    cpu_median = 1e3 * statistics.median(cpu_rounds)
    # the 10th percentile of the rounds' CPU time: what a round costs with the least interference from
    # other work on a shared machine
    cpu_p10 = 1e3 * statistics.quantiles(cpu_rounds, n=10)[0]
    # cProfile over 50 more rounds, nothing wrapped (before pass 2 installs its timers)
    profiled = None
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(min(rounds, 50)):
            runtime._step()
        profiler.disable()
        drain()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile)
        profiled = text.getvalue()
    # Pass 2: the same rounds with timers around each part (their overhead inflates the parts a little).
    timers = Timers()
    from helios.runtime import completion

    timers.wrap(scheduler, "schedule", "schedule")
    timers.wrap(executor, "_pack", "pack")
    timers.wrap(executor, "_upload", "upload")
    timers.wrap(executor, "_execute", "device (stub)")
    timers.wrap(executor, "collect", "read-back")
    timers.wrap(completion, "validate_round", "validate")
    timers.wrap(scheduler, "complete", "retire")
    timers.wrap(runtime, "_deliver_round" if hasattr(runtime, "_deliver_round") else "_deliver", "events")
    timers.wrap(runtime, "_step", "other")
    run(rounds)
    breakdown = {name: 1e3 * seconds / rounds for name, seconds in timers.totals.items()}
    result = {"lanes": lanes, "rounds": rounds, "host_ms_per_round": host, "host_ms_median": median,
              "host_cpu_ms_median": cpu_median, "host_cpu_ms_p10": cpu_p10,
              "gc_ms_per_round": 1e3 * collector["seconds"] / rounds, "gc_runs": collector["runs"],
              "device_stub_ms_per_round": 1e3 * stub.seconds / rounds, "breakdown_ms": breakdown}
    if profiled is not None:
        result["profile"] = profiled
    loop.close()
    return result


def measure_prefill(model, prompt: int, rounds: int) -> dict:
    """Host milliseconds of `run_round` over one fresh `prompt`-token lane a round (module docstring)."""
    from helios.proto import contract_pb2
    from helios.runtime.lanes import LaneInput
    from helios.runtime.request import SamplingParams

    stub = StubDevice(model.executor)
    graph = next(g for g in model.graphs.values()
                 if g.operation == contract_pb2.OPERATION_PREFILL and g.packed_token_capacity == prompt)
    pages = tuple(range(-(-(prompt + 1) // 16)))

    def lane(i: int) -> LaneInput:  # a new request each round: nothing staged for it before
        ids = tuple((7 + 31 * i + 13 * j) % 250 for j in range(prompt))
        return LaneInput(slot=0, generation=1 + i, consumed=0, tokens=ids, prompt_tokens_in_round=prompt,
                         samples=True, page_ids=pages, seed=i, sampling=SamplingParams(temperature=0.6, seed=i),
                         output_limit=1, eos_ids=(258,), prompt_token_ids=ids)

    lanes = [lane(i) for i in range(rounds + 3)]
    for warm in lanes[:3]:
        model.run_round(graph.name, [warm])
    per_round = []
    for measured in lanes[3:]:
        device = stub.seconds
        start = time.perf_counter()
        model.run_round(graph.name, [measured])
        per_round.append(time.perf_counter() - start - (stub.seconds - device))
    return {"prefill_tokens": prompt, "rounds": rounds, "host_ms_median": 1e3 * statistics.median(per_round),
            "host_ms_p10": 1e3 * statistics.quantiles(per_round, n=10)[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Host milliseconds per steady decode round of BatchingRuntime over the production executor "
                    "on a CPU, with the device replay replaced by a stub that writes correct completions (see the "
                    "module docstring for every column).")
    parser.add_argument("--lanes", type=int, nargs="+", default=[64, 256],
                        help="concurrent decode lanes to measure, one run each (default: 64 256)")
    parser.add_argument("--rounds", type=int, default=100, help="measured decode rounds per run (default 100)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per request (default 32)")
    parser.add_argument("--max-tokens", type=int, default=400,
                        help="output budget the core's context is sized for (default 400); must exceed twice the "
                             "rounds by more than 60")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print cProfile's top N entries by own time over 50 more rounds")
    parser.add_argument("--no-freeze", action="store_true",
                        help="leave the loaded model in the garbage collector's reach (helios serve freezes it)")
    parser.add_argument("--speculative", type=int, default=0, metavar="W",
                        help="measure steady SPECULATIVE rounds of width W (the core carries a draft) instead of "
                             "DECODE rounds")
    parser.add_argument("--history-drafting", action="store_true",
                        help="with --speculative: the rounds also carry proposals copied from each request's tokens")
    parser.add_argument("--prefill", type=int, default=0, metavar="N",
                        help="measure the executor's rounds of one fresh N-token prompt each instead (module "
                             "docstring); --lanes, --prompt and --max-tokens do not apply")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.prefill:
        if args.prefill < 16 or args.rounds < 10 or args.speculative:
            parser.error("--prefill needs N >= 16, --rounds >= 10 and no --speculative")
        started = time.perf_counter()
        model = build_model(1, args.prefill, 16)
        print(f"prefill of {args.prefill} tokens: core prepared and loaded in {time.perf_counter() - started:.1f}s",
              flush=True)
        result = measure_prefill(model, args.prefill, args.rounds)
        print(f"prefill of {args.prefill} tokens: host {result['host_ms_median']:.3f} ms a round median, "
              f"{result['host_ms_p10']:.3f} 10th percentile (device stub excluded)", flush=True)
        if args.json:
            args.json.write_text(json.dumps([result], indent=2))
        return 0
    if args.history_drafting and not args.speculative:
        parser.error("--history-drafting needs --speculative W")
    width = max(args.speculative, 1)  # tokens a lane may emit a round
    if args.max_tokens <= width * (2 * args.rounds + 60 + (50 if args.profile else 0)):
        parser.error("--max-tokens must exceed W times (twice --rounds, plus 50 profiled rounds) by more than 60 "
                     "rounds (requests must stay active)")
    results = []
    for lanes in args.lanes:
        started = time.perf_counter()
        model = build_model(lanes, args.prompt, args.max_tokens, args.speculative, args.history_drafting)
        if not args.no_freeze:  # what the production factory does after loading for helios serve (freeze_heap)
            gc.collect()
            gc.freeze()
            atexit.register(gc.unfreeze)
        print(f"{lanes} lanes: core prepared and loaded in {time.perf_counter() - started:.1f}s", flush=True)
        result = measure(model, lanes, prompt=args.prompt, rounds=args.rounds, profile=args.profile,
                         speculative=args.speculative, history_drafting=args.history_drafting)
        results.append(result)
        columns = ("schedule", "pack", "upload", "read-back", "validate", "retire", "events", "other")
        parts = "  ".join(f"{c} {result['breakdown_ms'].get(c, 0.0):.3f}" for c in columns)
        print(f"{lanes} lanes: host {result['host_ms_per_round']:.3f} ms/round mean, "
              f"{result['host_ms_median']:.3f} median, {result['host_cpu_ms_median']:.3f} median and "
              f"{result['host_cpu_ms_p10']:.3f} 10th percentile of the thread's CPU time "
              f"(device stub {result['device_stub_ms_per_round']:.3f} ms excluded; garbage collection "
              f"{result['gc_ms_per_round']:.3f} ms of it, {result['gc_runs']} runs)", flush=True)
        print(f"    {parts}", flush=True)
        if "profile" in result:
            print(result["profile"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
