"""ProductionRuntime (host side, no torch): the `ModelRuntime` that drives the batching scheduler and
an executor.

    runtime = ProductionRuntime.for_executor(executor, contract, limits, pages=pages)
    runtime = ProductionRuntime.for_native_model(model, limits)          # the production executor

The executor is anything with the executor seam `run_round(graph_name, lanes) -> rows` (the
production executor, or the reference engine's `run_round`), optionally also `submit_round(graph_name,
lanes, frame) -> handle` and `collect(handle) -> rows`, which lets a second round be submitted before
the first completes. One worker thread owns the scheduler and the executor:

    ingress -> scheduler.add -> scheduler.schedule -> executor -> scheduler.complete (validation)
      -> observation clock (once, when the round retired a timed request's token)
      -> per retired token: EOS / output filter (decoding, host stops) / output limit -> events
         -> scheduler.finish when the request ends (an output failure fails that request alone)

This module owns intake, the worker loop (submission, collection, aborts, cancellation) and
reporting; what happens to each retired token is `TokenDelivery`'s (delivery.py), a base of
`ProductionRuntime`. The round's tokens are read from the scheduler's `RoundOutcomes` columns. Stops,
observation and output parsing are the request's own `OutputFilter` (the one the reference
worker uses). A request with string stops (`host_stop`) holds the scheduler to one outstanding round,
so its next round is submitted only after its stop check. The ingress channel and the scheduler's
pending deque each hold at most `queue_capacity` requests; a request outside the prepared capacities,
or arriving at a full ingress channel, gets a `Rejected` event (HTTP 503). Temporary page shortages
never reject: the scheduler waits, evicts and preempts.

Loading a core onto this runtime (`load_native_model`, `load_production_runtime`,
`ProductionTokenEngine`) is `loading.py`'s; this module re-exports those names.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from helios.production.delivery import RequestEntry, TokenDelivery
from helios.production.loading import (
    GenerationFailed,
    GenerationRejected,
    ProductionTokenEngine,
    ProductionUnavailable,
    load_native_model,
    load_production_runtime,
)
from helios.production.page_cache import PageCache
from helios.production.scheduling import (
    GraphCatalog,
    RoundPlan,
    Scheduler,
    SchedulerConfig,
    SchedulerRequest,
)
from helios.runtime.completion import Completion
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
from helios.runtime.packing import LaneInput

__all__ = ["GenerationFailed", "GenerationRejected", "ProductionRuntime", "ProductionTokenEngine",
           "ProductionUnavailable", "RoundExecutor", "load_native_model", "load_production_runtime"]


class RoundExecutor(Protocol):
    def run_round(self, graph_name: str, lanes: Sequence[LaneInput]) -> Sequence[Completion]: ...


class ProductionRuntime(TokenDelivery, ThreadedModelRuntime):
    """Continuous batching over one executor; see the module docstring."""

    def __init__(self, executor: Any, limits: AdmissionLimits, scheduler: Scheduler, *,
                 capacity: dict[str, int] | None = None) -> None:
        super().__init__(limits, worker_name="helios-production-worker")
        self._executor = executor
        self._framed = hasattr(executor, "submit_round") and hasattr(executor, "collect")
        self._scheduler = scheduler
        self._capacity = dict(capacity or {})
        self._ingress: collections.deque[RequestEntry] = collections.deque()
        self._entries: dict[str, RequestEntry] = {}
        self._cancels: set[str] = set()
        self._handles: dict[int, Any] = {}  # plan sequence -> executor handle (or rows, unframed)
        self._submitted = 0
        self._rejected = 0
        self._failed = 0
        self._finished = {t.value: 0 for t in Termination}
        self._outbox: list[tuple[EventStream, Event]] | None = None  # the round's events, while delivering

    # ------------------------------------------------------------------------------------ building

    @classmethod
    def for_executor(cls, executor: Any, contract: Any, limits: AdmissionLimits, *, pages: int,
                     graph_names: Iterable[str] | None = None, prefix_reuse: bool = True,
                     sequence_origin: int = 0) -> ProductionRuntime:
        """A runtime over `executor` for a `PreparedContract`; `pages` is the executor's physical cache
        page count, `graph_names` the graphs the executor loaded (default: every graph)."""
        names = None if graph_names is None else set(graph_names)
        graphs = [g for g in contract.graphs if names is None or g.name in names]
        catalog = GraphCatalog.from_graphs(graphs)
        framed = hasattr(executor, "submit_round") and hasattr(executor, "collect")
        config = SchedulerConfig(
            max_active=min(limits.max_active, contract.max_concurrency), queue_capacity=max(limits.queue_capacity, 1),
            page_tokens=contract.cache.page_tokens, context_tokens=contract.context_tokens,
            input_tokens=contract.input_vocabulary.input_tokens or contract.vocabulary.sampled_tokens,
            sampled_tokens=contract.vocabulary.sampled_tokens, eos_ids=tuple(contract.frontend.eos_token_ids),
            # an executor without submit_round/collect runs every round in frame 0
            frames=min(max(contract.manifest.frames, 1), 2) if framed else 1)
        cache = PageCache(pages, contract.cache.page_tokens, contract.cache_identity, prefix_reuse=prefix_reuse)
        scheduler = Scheduler(config, catalog, cache, framed_executor=framed, sequence_origin=sequence_origin)
        capacity = {"max_concurrency": contract.max_concurrency, "page_tokens": contract.cache.page_tokens}
        return cls(executor, limits, scheduler, capacity=capacity)

    @classmethod
    def for_native_model(cls, model: Any, limits: AdmissionLimits, *, prefix_reuse: bool = True) -> ProductionRuntime:
        """A runtime over a loaded `helios.production.native_model.NativeModel`."""
        executor = model.executor
        return cls.for_executor(executor, model.contract, limits, pages=model.pages, graph_names=model.graphs,
                                prefix_reuse=prefix_reuse, sequence_origin=executor.sequence)

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    # ------------------------------------------------------------------------------------ submission

    def _admission_check(self, request: PreparedRequest) -> str | None:
        reason = self._scheduler.admission_check(self._scheduler_request(request))
        if reason is not None:
            return reason
        with self._lock:
            if self._status != "ok":
                return f"the model worker is {self._status}"
            if len(self._ingress) >= max(self.limits.queue_capacity, 1):
                return f"the ingress channel is full ({self.limits.queue_capacity} requests)"
        return None

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
                stream.put_nowait(Rejected(f"the model worker is {self._status}"))
                return
            generation = request.generation
            eos = () if generation.ignore_eos else tuple(generation.eos_token_ids or self._scheduler.config.eos_ids)
            entry = RequestEntry(request, stream, plain=request.grammar is None and request.output_filter is None,
                           ends_at=eos, observe=request.observe_tokens, timed=request.observe_timestamps,
                           max_tokens=generation.max_tokens)
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
                                constrained=request.grammar is not None, grammar=request.grammar)

    # ------------------------------------------------------------------------------------ reporting

    def health(self) -> Health:
        alive = self._thread is not None and self._thread.is_alive()
        if self._status == "ok" and not alive:
            return Health("stopped", "the model worker thread has exited")
        return Health(self._status)

    def metrics(self) -> RuntimeMetrics:
        with self._lock:
            s = self._scheduler
            c = s.counters
            gauges = s.cache.gauges()
            capacity = {"max_active": s.config.max_active, "queue_capacity": self.limits.queue_capacity,
                        "context_tokens": s.config.context_tokens, "pages": gauges.capacity, **self._capacity}
            # Allocatable now: free pages plus cached (published, unreferenced, evictable) ones.
            available = {"pages": gauges.free + gauges.cached, "cached_pages": gauges.cached}
            return RuntimeMetrics(
                requests_submitted=self._submitted, requests_started=c.started, requests_rejected=self._rejected,
                requests_finished=dict(self._finished), requests_failed=self._failed,
                requests_active=s.active, requests_pending=s.pending + len(self._ingress),
                prompt_tokens=c.prompt_tokens, output_tokens=c.output_tokens, prefix_lookups=c.prefix_lookups,
                reused_prompt_tokens=c.reused_tokens, graph_launches=dict(c.launches), capacity=capacity,
                available=available,
                mixed_grammar_decode_steps=c.mixed_grammar_decode_steps,
                constrained_max_inflight=c.constrained_max_inflight)

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
            while self._ingress and scheduler.pending < scheduler.config.queue_capacity:
                entry = self._ingress.popleft()
                scheduler.add(self._scheduler_request(entry.request))
            if self._status != "ok" and scheduler.idle and not self._ingress:
                return False
            submitted = []
            while (plan := scheduler.schedule()) is not None:
                submitted.append(plan)
                try:
                    self._submit(plan)
                except Exception as error:  # the executor refused the submission: that round failed
                    self._abort(plan, f"model execution failed: {type(error).__name__}: {error}")
            if not scheduler.outstanding:
                if not submitted:
                    self._lock.wait(0.05)  # nothing can run until a request arrives, ends or is cancelled
                return True
        oldest = self._oldest()
        try:
            rows = self._collect(oldest)
        except Exception as error:  # the executor failed this round
            self._abort(oldest, f"model execution failed: {type(error).__name__}: {error}")
            return True
        try:
            with self._lock:
                outcomes = scheduler.complete(oldest, rows)
                get = self._entries.get
                entries = [get(request_id) for request_id in outcomes.request_ids]
        except Exception as error:  # an invalid completion: an execution failure of the round
            self._abort(oldest, f"model execution failed: {type(error).__name__}: {error}")
            return True
        # Token timestamps mark the validated completions right after scheduler.complete, before any
        # lane's stop handling or output parsing; the clock is read only when a timed request has one.
        timed = any(entry is not None and entry.timed for entry in entries)
        stamp = self.clock.now_ns() if timed else None
        self._deliver_round(outcomes, entries, stamp)
        return True

    def _submit(self, plan: RoundPlan) -> None:
        if self._framed:
            self._handles[plan.sequence] = self._executor.submit_round(plan.graph, plan.lanes, plan.frame)
        else:
            self._handles[plan.sequence] = plan  # run when collected: the executor is synchronous

    def _oldest(self) -> RoundPlan:
        with self._lock:
            plan = self._scheduler.oldest()
        assert plan is not None
        return plan

    def _collect(self, plan: RoundPlan) -> Sequence[Completion]:
        handle = self._handles.pop(plan.sequence)
        if self._framed:
            return self._executor.collect(handle)
        return self._executor.run_round(plan.graph, plan.lanes)  # the plan's tuple: its columns are shared

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
