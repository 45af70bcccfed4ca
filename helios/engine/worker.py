"""The batching worker (host side, no torch): `BatchingRuntime`, the `ModelRuntime` that drives the
batching scheduler and an executor.

    runtime = BatchingRuntime.for_executor(executor, contract, limits, pages=pages)

The executor is anything with the executor seam of `helios.runtime.rounds` (`submit(plan)`,
`collect(plan) -> rows`, `frames`): the production executor, the reference executor, or a trace
recorder wrapping either. One worker thread owns the scheduler and the executor; the hot loop is

    plan = scheduler.schedule(); executor.submit(plan)          # up to `frames` plans in flight
    rows = executor.collect(scheduler.oldest())
    outcomes = scheduler.complete(plan, rows)                    # the one validation of the rows
      -> observation clock (once, when the round retired a timed request's token)
      -> per retired token: RequestProgress (grammar, EOS, output filter, output limit) -> events
         -> scheduler.finish when the request ends (an output failure fails that request alone)

This module owns intake, the worker loop (submission, collection, aborts, cancellation) and
reporting; what happens to each retired token is `TokenDelivery`'s (delivery.py), a base of
`BatchingRuntime`. The scheduler's outstanding plans are the one queue of rounds in flight. A request
with string stops (`host_stop`) or a grammar holds the scheduler to one outstanding round, so its next
round is submitted only after its stop check. The ingress channel and the scheduler's pending deque
each hold at most `queue_capacity` requests (the server waits for ingress room before it submits, so
an admitted request is never refused for queue space); a request outside the prepared capacities
gets a `Rejected` event (HTTP 503). Temporary page shortages never
reject: the scheduler waits, evicts and preempts.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping

from helios.contract import PreparedContract
from helios.contract.enums import HistoryKind
from helios.engine.catalog import GraphCatalog
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.delivery import TokenDelivery
from helios.engine.page_cache import PageCache
from helios.engine.program_choice import ChoiceMemory
from helios.engine.progress import RequestProgress
from helios.engine.scheduler import Scheduler
from helios.engine.snapshots import continuation_rows
from helios.runtime.events import Event, Failed, Rejected, Termination
from helios.runtime.interface import (
    DuplicateRequestId,
    EventStream,
    Health,
    PreparedRequest,
    RuntimeMetrics,
    ThreadedModelRuntime,
)
from helios.runtime.limits import AdmissionLimits
from helios.runtime.rounds import Executor, RoundPlan
from helios.runtime.scores import prompt_score_width

__all__ = ["BatchingRuntime"]


class BatchingRuntime(TokenDelivery, ThreadedModelRuntime):
    """Continuous batching over one executor; see the module docstring."""

    def __init__(self, executor: Executor, limits: AdmissionLimits, scheduler: Scheduler, *,
                 capacity: dict[str, int] | None = None, page_bytes: int = 0,
                 startup_seconds: Mapping[str, float] | None = None,
                 device_counters: Callable[[], Mapping[str, int]] | None = None) -> None:
        super().__init__(limits, worker_name="helios-model-worker")
        self._startup_seconds = dict(startup_seconds or {})  # the load's phases (helios/runtime/startup.py)
        # graphs_captured and kernels_compiled of the device half, read at scrape time (RuntimeMetrics)
        self._device_counters = device_counters
        self._page_bytes = page_bytes  # one cache page of every plane (and rank): a host-tier page's bytes
        self._executor = executor
        self._scheduler = scheduler
        self._capacity = dict(capacity or {})
        self._ingress: collections.deque[RequestProgress] = collections.deque()
        self._entries: dict[str, RequestProgress] = {}
        self._cancels: set[str] = set()
        self._submitted = 0
        self._rejected = 0
        self._failed = 0
        self._finished = {t.value: 0 for t in Termination}
        self._outbox: list[tuple[EventStream, Event]] | None = None  # the round's events, while delivering

    # ------------------------------------------------------------------------------------ building

    @classmethod
    def for_executor(cls, executor: Executor, contract: PreparedContract, limits: AdmissionLimits, *, pages: int,
                     graph_names: Iterable[str] | None = None, prefix_reuse: bool = True,
                     speculative_width: int | None = None, history_drafting: bool = False,
                     adaptive_speculation: bool = False, cost_lifetime: float | None = None,
                     host_pages: int | None = None, startup_seconds: Mapping[str, float] | None = None,
                     device_counters: Callable[[], Mapping[str, int]] | None = None,
                     memory: ChoiceMemory | None = None) -> BatchingRuntime:
        """A runtime over `executor` for a `PreparedContract`; `pages` is the executor's physical cache
        page count, `graph_names` the graphs the executor loaded (default: every graph),
        `speculative_width` the width of the SPECULATIVE rounds decode lanes run (None: plain decoding)
        and `history_drafting` whether those rounds carry proposals copied from each request's tokens.
        With `adaptive_speculation` each speculative cohort runs the program of the highest expected
        rate among DECODE and every loaded width, from the executor's measured round costs
        (`executor.round_costs()`; an executor without them leaves `speculative_width` running), a
        table older than `cost_lifetime` seconds counting as stale. `host_pages` is the executor's host
        tier of evicted checkpoints in pages (None: `executor.host_pages`, 0 where it has none;
        helios/engine/host_tier.py). `startup_seconds` (phase -> seconds) and `device_counters` (a
        callable answering `graphs_captured` and `kernels_compiled`) are what the executor's load
        reports, passed through to `metrics()`. `memory`: what the scheduler's choices learn while
        serving (`ChoiceMemory`: served round costs, pooled acceptance; default: the runtime's own,
        empty); runtimes serving one executor in turn may share one, each starting where the one
        before it left off."""
        names = None if graph_names is None else set(graph_names)
        graphs = [g for g in contract.graphs if names is None or g.name in names]
        catalog = GraphCatalog.from_graphs(graphs)
        recurrent = any(h.kind == HistoryKind.RECURRENT for h in contract.cache.histories)
        config = SchedulerConfig(
            max_active=min(limits.max_active, contract.max_concurrency), queue_capacity=max(limits.queue_capacity, 1),
            page_tokens=contract.cache.page_tokens, context_tokens=contract.context_tokens,
            input_tokens=contract.input_vocabulary.input_tokens or contract.vocabulary.sampled_tokens,
            sampled_tokens=contract.vocabulary.sampled_tokens, eos_ids=tuple(contract.frontend.eos_token_ids),
            # rounds in flight: the transport's frames, as many as the executor holds
            frames=max(min(contract.manifest.frames, executor.frames, 2), 1),
            speculative_width=speculative_width or 0, history_drafting=history_drafting,
            adaptive_speculation=adaptive_speculation and bool(speculative_width), cost_lifetime=cost_lifetime,
            prompt_score_width=prompt_score_width(contract),
            snapshot_rows=continuation_rows(contract, graphs), recurrent_state=recurrent,
            image_feature_slots=contract.vision.feature_slots, image_slot_rows=contract.vision.features_per_window,
            engram_history=max((max(t.orders) - 1 for t in contract.engram_tables), default=0))
        if host_pages is None:
            host_pages = getattr(executor, "host_pages", 0)
        # A recurrent state exists only where a snapshot saved it, never at a published page's end: a
        # prefix hit would have pages without their state, so a recurrent core reuses no prefix.
        cache = PageCache(pages, contract.cache.page_tokens, contract.cache_identity,
                          prefix_reuse=prefix_reuse and not recurrent, host_pages=host_pages)
        costs = None
        if config.adaptive_speculation:
            measure = getattr(executor, "round_costs", None)
            costs = measure() if measure is not None else None
        scheduler = Scheduler(config, catalog, cache, costs=costs, memory=memory)
        capacity = {"max_concurrency": contract.max_concurrency, "page_tokens": contract.cache.page_tokens}
        return cls(executor, limits, scheduler, capacity=capacity, page_bytes=getattr(executor, "page_bytes", 0),
                   startup_seconds=startup_seconds, device_counters=device_counters)

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    @property
    def executor(self) -> Executor:
        """The executor the worker drives (a trace recorder keeps the one it wraps as `.executor`)."""
        return self._executor

    def requests_held(self) -> tuple[str, ...]:
        """Requests the runtime still tracks: progress entries (no terminal event yet), queued
        ingress and pending cancellations (read-only; an idle runtime holds none)."""
        with self._lock:
            held = set(self._entries) | {e.request.request_id for e in self._ingress} | self._cancels
            return tuple(sorted(held))

    # ------------------------------------------------------------------------------------ submission

    def _admission_check(self, request: PreparedRequest) -> str | None:
        return self._scheduler.admission_check(self._scheduler_request(request))

    def _ingress_full(self) -> bool:
        return len(self._ingress) >= max(self.limits.queue_capacity, 1)

    def _count_rejection(self) -> None:
        with self._lock:
            self._submitted += 1
            self._rejected += 1

    def _enqueue(self, request: PreparedRequest, stream: EventStream) -> None:
        with self._lock:
            if request.request_id in self._entries or self._scheduler.holds(request.request_id):
                # NOTE: an ended request stays with the scheduler until the fence of its last round
                raise DuplicateRequestId(f"request id {request.request_id!r} is already submitted")
            if self._status != "ok":  # stopped since the admission check: no worker would ever take it
                self._submitted += 1
                self._rejected += 1
                stream.put_nowait(Rejected(f"the model worker is {self._status}", temporary=True))
                return
            entry = RequestProgress(request, stream, self._scheduler.config.eos_ids)
            self._entries[request.request_id] = entry
            self._ingress.append(entry)
            self._submitted += 1
            self._lock.notify_all()

    def cancel(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._entries:
                self._cancels.add(request_id)
                self._lock.notify_all()

    @staticmethod
    def _scheduler_request(request: PreparedRequest) -> SchedulerRequest:
        return SchedulerRequest(request.request_id, request.generation, host_stop=request.host_stop,
                                constrained=request.grammar is not None, grammar=request.grammar,
                                prompt_logprobs=request.prompt_logprobs, speculation=request.speculation)

    # ------------------------------------------------------------------------------------ reporting

    def metrics(self) -> RuntimeMetrics:
        with self._lock:
            s = self._scheduler
            c = s.counters
            gauges = s.cache.gauges()
            host = s.cache.host.gauges()
            capacity = {"max_active": s.config.max_active, "queue_capacity": self.limits.queue_capacity,
                        "context_tokens": s.config.context_tokens, "pages": gauges.capacity, **self._capacity}
            # Allocatable now: free pages plus cached (published, unreferenced, evictable) ones.
            available = {"pages": gauges.free + gauges.cached, "cached_pages": gauges.cached}
            device = self._device_counters() if self._device_counters is not None else {}
            if s.rows.capacity:
                capacity["continuation_rows"] = s.rows.capacity
                # free or holding an evictable published continuation (as pages: free plus cached)
                available["continuation_rows"] = s.rows.capacity - s.rows.in_use + s.rows.published_rows
            return RuntimeMetrics(
                requests_submitted=self._submitted, requests_started=c.started, requests_rejected=self._rejected,
                requests_finished=dict(self._finished), requests_failed=self._failed,
                requests_active=s.active, requests_pending=s.pending + len(self._ingress),
                prompt_tokens=c.prompt_tokens, output_tokens=c.output_tokens, prefix_lookups=c.prefix_lookups,
                reused_prompt_tokens=c.reused_tokens, graph_launches=dict(c.launches), capacity=capacity,
                speculative_rounds=c.speculative_rounds, offered_drafts=c.offered_drafts,
                accepted_drafts=c.accepted_drafts, copied_offered=c.copied_offered, copied_accepted=c.copied_accepted,
                offered_by_position=dict(c.offered_by_position), accepted_by_position=dict(c.accepted_by_position),
                speculative_rounds_by_width=dict(c.rounds_by_width), plain_choices=c.plain_choices,
                fallback_choices=c.fallback_choices, explored_choices=c.explored_choices,
                round_costs=s.choice.costs.entries if s.choice is not None and s.choice.costs is not None else (),
                served_round_costs=s.served.entries(s.catalog),
                available=available,
                snapshots_published=gauges.published + c.snapshots_published,
                snapshots_evicted=gauges.evictions + c.snapshots_evicted + s.rows.evictions,
                snapshots_restored=c.snapshots_restored, continuations_published=s.rows.published_rows,
                continuation_hits=c.continuation_hits, continuation_evictions=s.rows.evictions,
                continuation_rows_in_use=s.rows.in_use - s.rows.published_rows, recomputed_tokens=c.recomputed_tokens,
                host_offloaded_pages=host.offloaded, host_offloaded_bytes=host.offloaded * self._page_bytes,
                host_readmitted_pages=host.readmitted, host_readmitted_bytes=host.readmitted * self._page_bytes,
                host_bytes_in_use=host.in_use * self._page_bytes, host_bytes_capacity=host.capacity * self._page_bytes,
                host_evictions=host.evictions,
                mixed_grammar_decode_steps=c.mixed_grammar_decode_steps,
                constrained_max_inflight=c.constrained_max_inflight,
                startup_seconds=dict(self._startup_seconds),
                graphs_captured=device.get("graphs_captured", 0), kernels_compiled=device.get("kernels_compiled", 0))

    def health(self) -> Health:
        """The worker's health, and the executor's: an executor of several ranks reports a failed or
        lost rank (`failure()`), which makes the runtime unhealthy while the worker still runs."""
        health = super().health()
        failure = getattr(self._executor, "failure", None)
        reason = failure() if callable(failure) else None
        if health.ok and reason is not None:
            return Health("failed", reason)
        return health

    def shutdown(self) -> None:
        """Stop the worker, then release the executor's peers when it has any (`close()`)."""
        super().shutdown()
        close = getattr(self._executor, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------------------------ worker

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except Exception as error:  # a worker failure fails every request it holds
            with self._lock:
                entries = list(self._entries.values())
                self._entries.clear()
                self._failed += len(entries)
                self._status = "stopped"
            for entry in entries:
                entry.stream.put(Failed(f"the model worker failed: {type(error).__name__}: {error}"))

    def _step(self) -> bool:
        """One scheduling step; False when the worker should exit."""
        scheduler = self._scheduler
        with self._lock:
            while self._status == "ok" and not (self._ingress or self._cancels) and scheduler.idle:
                self._lock.wait()
            if self._status != "ok":
                self._cancels.update(self._entries)
            self._apply_cancellations()
            if self._ingress and scheduler.pending < scheduler.config.queue_capacity:
                while self._ingress and scheduler.pending < scheduler.config.queue_capacity:
                    entry = self._ingress.popleft()
                    scheduler.add(self._scheduler_request(entry.request))
                self._ingress_drained()  # submitters waiting for ingress room check again
            if self._status != "ok" and scheduler.idle and not self._ingress:
                return False
            plan = scheduler.schedule()
            if plan is None and not scheduler.outstanding:
                self._lock.wait(0.05)  # nothing can run until a request arrives, ends or is cancelled
                return True
        # Each round is submitted outside the lock, and the next scheduled once it is (or failed): an
        # executor that runs the round in `submit` (the reference's) would otherwise hold every
        # submission, cancellation and metrics read of the event loop for the whole round, and
        # requests arriving meanwhile would miss the rounds after it.
        while plan is not None:
            try:
                self._executor.submit(plan)
            except Exception as error:  # the executor refused the submission: that round failed
                self._abort(plan, f"model execution failed: {type(error).__name__}: {error}")
            with self._lock:
                plan = scheduler.schedule()
        with self._lock:
            oldest = scheduler.oldest()
        if oldest is None:  # every round of the step failed at its submission
            return True
        try:
            rows = self._executor.collect(oldest)
        except Exception as error:  # the executor failed this round
            self._abort(oldest, f"model execution failed: {type(error).__name__}: {error}")
            return True
        try:
            with self._lock:
                outcomes = scheduler.complete(oldest, rows)
                get = self._entries.get
                entries = [get(request_id) for request_id in outcomes.request_ids]
                scored = [(get(request_id), event) for request_id, event in outcomes.prompt_scores]
        except Exception as error:  # an invalid completion: an execution failure of the round
            self._abort(oldest, f"model execution failed: {type(error).__name__}: {error}")
            return True
        # Token timestamps mark the validated completions right after scheduler.complete, before any
        # lane's stop handling or output parsing; the clock is read only when a timed request has one.
        timed = any(entry is not None and entry.timed for entry in entries)
        stamp = self.clock.now_ns() if timed else None
        self._deliver_round(outcomes, entries, stamp, scored)
        return True

    def _abort(self, plan: RoundPlan, message: str) -> None:
        with self._lock:
            failed = self._scheduler.abort(plan)
            entries = [self._entries.pop(rid) for rid in failed if rid in self._entries]
            self._failed += len(entries)
            self._apply_cancellations()
        for entry in entries:
            entry.stream.put(Failed(message))

    def _apply_cancellations(self) -> None:
        """Under the lock: hand cancellations to the scheduler; report the ones whose fence passed."""
        cancels, self._cancels = self._cancels, set()
        queued = {e.request.request_id: e for e in self._ingress}
        for request_id in cancels:
            if request_id in queued:
                self._ingress.remove(queued[request_id])
                self._finish(self._entries[request_id], Termination.CANCELLED, (), reused=0)
            elif request_id in self._entries:
                self._scheduler.cancel(request_id)
        for request_id in self._scheduler.released():
            entry = self._entries.get(request_id)
            if entry is not None:
                self._finish(entry, Termination.CANCELLED, (), reused=0)
