"""The ModelRuntime interface (host side): the one seam both runtimes implement and the server uses.

Owns: `ModelRuntime` (submit a prepared request and read its events; cancel; health; metrics),
`PreparedRequest`, `OutputFilter` (the protocol of the per-request stop and decoding object the
worker calls after each validated token), `EventStream`, `Health` and `RuntimeMetrics`.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from helios.errors import HeliosError
from helios.runtime.clock import ObservationClock
from helios.runtime.costs import RoundCost, ServedCost
from helios.runtime.events import TERMINAL, Event, Rejected
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest


class DuplicateRequestId(HeliosError):
    """A request id was submitted twice while the first is still known to the runtime."""


class FilterStep(Protocol):
    pieces: Sequence[object]
    stopped: bool


class OutputFilter(Protocol):
    """Per-request decoding and host stops (e.g. `helios.frontend.stops.OutputFilter`)."""

    def push(self, token_id: int) -> FilterStep: ...

    def finish(self) -> Sequence[object]: ...


class GrammarMatcher(Protocol):
    """A request's grammar on the host (e.g. `helios.frontend.structured.GrammarState`): the mask of
    the next sampled token, and advancing it with each validated token."""

    def mask(self) -> Sequence[int]:
        """The allowed ids as the core's `mask_words` int32 words (bit t % 32 of word t // 32)."""
        ...

    def advance(self, token: int) -> None:
        """Consume a validated token; raises if the token was outside the mask."""
        ...

    def fork(self) -> GrammarMatcher:
        """An independent copy in the same state: advancing it leaves this one unchanged (the
        per-position masks of a speculative round's copied proposals are computed on a fork)."""
        ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """What the frontend hands a runtime: the generation, its output filter, what to observe."""

    request_id: str
    generation: GenerationRequest
    output_filter: OutputFilter | None = None  # None: no decoding, no host stops
    observe_tokens: bool = False  # return_token_ids: every sampled id is delivered as an event
    observe_timestamps: bool = False  # return_token_timestamps: read the clock per validated token
    host_stop: bool = False  # string stops: width one, one outstanding round (the host-stop barrier)
    grammar: GrammarMatcher | None = None  # structured output: a mask every round, one outstanding round
    # prompt scores (echo with logprobs, prompt_logprobs): the prompt runs through SCORED_PREFILL rounds
    # and its scores reach the stream as `PromptScoreEvent`s with this many alternatives a token
    # (0: each token's own log-probability only); None: no scores
    prompt_logprobs: int | None = None
    speculation: bool = True  # False: the request opted out of learned speculation and decodes plainly

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be non-empty")
        if self.observe_timestamps and not self.observe_tokens:
            raise ValueError("observe_timestamps requires observe_tokens")
        if self.prompt_logprobs is not None and self.prompt_logprobs < 0:
            raise ValueError("prompt_logprobs must be >= 0")


@dataclass(frozen=True, slots=True)
class Health:
    status: str  # "starting", "ok", "stopping", "stopped", "failed" (a lost rank)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class RuntimeMetrics:
    """A snapshot of the runtime's counters and gauges (no request ids, prompts or token ids)."""

    requests_submitted: int = 0
    requests_started: int = 0  # left the pending deque for a model slot
    requests_rejected: int = 0  # scheduler admission rejections
    requests_finished: dict[str, int] = field(default_factory=dict)  # Termination value -> count
    requests_failed: int = 0
    requests_active: int = 0
    requests_pending: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    prefix_lookups: int = 0
    reused_prompt_tokens: int = 0
    graph_launches: dict[str, int] = field(default_factory=dict)  # operation -> rounds submitted
    speculative_rounds: int = 0  # SPECULATIVE rounds completed
    offered_drafts: int = 0  # proposals offered for verification
    accepted_drafts: int = 0  # proposals accepted
    copied_offered: int = 0  # of the offered proposals, those copied from the request's history
    copied_accepted: int = 0  # of the accepted proposals, the copied ones
    # per draft position k (1-based): lanes offered a proposal at k, lanes whose proposal k was accepted
    offered_by_position: dict[int, int] = field(default_factory=dict)
    accepted_by_position: dict[int, int] = field(default_factory=dict)
    speculative_rounds_by_width: dict[int, int] = field(default_factory=dict)  # W -> SPECULATIVE rounds completed
    plain_choices: int = 0  # adaptive choice: cohorts ready to speculate that decoded plainly instead
    fallback_choices: int = 0  # adaptive choice: rounds at the fallback width (costs unknown or stale)
    explored_choices: int = 0  # adaptive choice: rounds of a wider program chosen to be measured
    round_costs: tuple[RoundCost, ...] = ()  # the measured round costs the adaptive choice reads
    served_round_costs: tuple[ServedCost, ...] = ()  # served rounds' wall time per graph (moving average)
    snapshots_published: int = 0  # immutable checkpoints (complete pages) and continuation snapshots published
    snapshots_evicted: int = 0  # checkpoints evicted from the cache and snapshots given up under page pressure
    snapshots_restored: int = 0  # continuation snapshots restored into private pages
    continuation_rows_in_use: int = 0  # continuation storage rows holding a snapshot now
    recomputed_tokens: int = 0  # positions consumed again after a readmission (0 while snapshots hold)
    continuations_published: int = 0  # rows holding a published continuation (a mid-page prefix) now
    continuation_hits: int = 0  # admissions that matched a published continuation (restored mid-page)
    continuation_evictions: int = 0  # published continuations evicted for a row (least recently used first)
    # the host tier of evicted checkpoints (helios/engine/host_tier.py)
    host_offloaded_pages: int = 0  # checkpoints copied device -> host at their eviction
    host_offloaded_bytes: int = 0
    host_readmitted_pages: int = 0  # checkpoints copied host -> device on a prefix hit
    host_readmitted_bytes: int = 0
    host_bytes_in_use: int = 0  # host-tier bytes holding a checkpoint now
    host_bytes_capacity: int = 0  # the tier's bound (--host-cache-gib, in whole pages)
    host_evictions: int = 0  # host-tier entries dropped to make room (least recently stored first)
    capacity: dict[str, int] = field(default_factory=dict)  # resource -> capacity
    available: dict[str, int] = field(default_factory=dict)  # resource -> currently free
    mixed_grammar_decode_steps: int = 0  # flare_mixed_grammar_decode_steps_total
    constrained_max_inflight: int = 0  # flare_constrained_max_inflight
    # the load, phase by phase (helios/runtime/startup.py): phase -> seconds, in load order
    startup_seconds: dict[str, float] = field(default_factory=dict)
    # what the device half made in this process (production; 0 elsewhere): CUDA graphs captured and
    # Triton kernel specializations compiled, all at startup (serving makes none)
    graphs_captured: int = 0
    kernels_compiled: int = 0


def _put_batch(batch: list[tuple[EventStream, Event]]) -> None:
    for stream, event in batch:
        stream.put_nowait(event)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class EventStream:
    """The events of one submitted request, read asynchronously. The queue grows as events arrive
    (never allocated at the request's full event budget), so a paused reader loses nothing and
    blocks no scheduling."""

    __slots__ = ("_done", "_loop", "_queue", "enqueue_ns", "request_id")

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self.enqueue_ns: int | None = None  # observation clock at submission, for timed requests
        self._loop = loop
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._done = False

    def put(self, event: Event) -> None:
        """Deliver from any thread. After the serving loop closed nobody can read: dropped."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:
            if not self._loop.is_closed():
                raise

    def put_nowait(self, event: Event) -> None:
        """Deliver from the event loop's thread."""
        self._queue.put_nowait(event)

    @staticmethod
    def put_many(events: Sequence[tuple[EventStream, Event]]) -> None:
        """Deliver several streams' events from any thread, in order, waking each serving loop once
        (a batching worker hands over one round's events this way, not one wake-up per token)."""
        if not events:
            return
        first = events[0][0]._loop
        for stream, _ in events:  # most often every stream is served by one loop: one batch as it is
            if stream._loop is not first:
                break
        else:
            try:
                first.call_soon_threadsafe(_put_batch, list(events))
            except RuntimeError:
                if not first.is_closed():
                    raise
            return
        batches: dict[asyncio.AbstractEventLoop, list[tuple[EventStream, Event]]] = {}
        for stream, event in events:
            batches.setdefault(stream._loop, []).append((stream, event))
        for loop, batch in batches.items():
            try:
                loop.call_soon_threadsafe(_put_batch, batch)
            except RuntimeError:
                if not loop.is_closed():
                    raise

    @property
    def done(self) -> bool:
        """The terminal event has been read."""
        return self._done

    async def next(self) -> Event:
        event = await self._queue.get()
        if isinstance(event, TERMINAL):
            self._done = True
        return event

    def ready(self) -> list[Event]:
        """The events already delivered, without waiting (up to and including the terminal one):
        a writer that fell behind sends them in one write."""
        events: list[Event] = []
        while not self._done:
            try:
                event = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if isinstance(event, TERMINAL):
                self._done = True
            events.append(event)
        return events

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while not self._done:
            yield await self.next()


class ModelRuntime(abc.ABC):
    """Submit prepared requests, read their events, cancel them; report health and metrics.

    `submit` is called on the event loop; it never blocks. A request the scheduler cannot admit
    (outside prepared capacities) gets a `Rejected` event; so does one that finds the worker stopping
    or the ingress channel full (`Rejected.temporary`). The ingress channel is bounded the way a
    channel's sender waits: a submitter that first awaits `wait_for_ingress` (the server does) and
    then submits without yielding is never refused for queue space."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.clock = ObservationClock()

    @abc.abstractmethod
    def start(self) -> None:
        """Start the model worker; fixes the observation clock's origin."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Cancel everything and stop the worker."""

    def submit(self, request: PreparedRequest) -> EventStream:
        stream = EventStream(request.request_id, asyncio.get_running_loop())
        if request.observe_timestamps:
            stream.enqueue_ns = self.clock.now_ns()
        reason = self._admission_check(request)
        temporary = reason is None and (reason := self._refusal_now()) is not None
        if reason is not None:
            self._count_rejection()
            stream.put_nowait(Rejected(reason, temporary=temporary))
            return stream
        self._enqueue(request, stream)
        return stream

    async def wait_for_ingress(self) -> None:  # noqa: B027 (a runtime without a bounded channel never waits)
        """Wait on the event loop until the ingress channel has room (or the worker stops)."""

    def _refusal_now(self) -> str | None:
        """Why no request can be taken right now (the worker is stopping, the ingress channel is
        full), or None: a temporary refusal."""
        return None

    @abc.abstractmethod
    def _admission_check(self, request: PreparedRequest) -> str | None:
        """Why the scheduler can never admit this request, or None."""

    @abc.abstractmethod
    def _count_rejection(self) -> None: ...

    @abc.abstractmethod
    def _enqueue(self, request: PreparedRequest, stream: EventStream) -> None: ...

    @abc.abstractmethod
    def cancel(self, request_id: str) -> None:
        """Cancel a request (no-op if it already ended). Its stream ends with Finished(CANCELLED)
        once the worker released its resources."""

    @abc.abstractmethod
    def health(self) -> Health: ...

    @abc.abstractmethod
    def metrics(self) -> RuntimeMetrics: ...


class ThreadedModelRuntime(ModelRuntime):
    """A ModelRuntime whose model worker is one thread running `_run`.

    Owns the lifecycle both runtimes share: `start` fixes the clock's origin and launches the worker;
    `shutdown` moves the status to "stopping" under the lock (calling `_stopping` there), wakes the
    worker, joins it, and marks the runtime "stopped". `_lock` guards the status and whatever the
    worker and the event loop share."""

    def __init__(self, limits: AdmissionLimits, *, worker_name: str) -> None:
        super().__init__(limits)
        self._worker_name = worker_name
        self._lock = threading.Condition()
        self._status = "starting"  # starting -> ok -> stopping -> stopped
        self._thread: threading.Thread | None = None
        self._ingress_waiters: list[asyncio.Future[None]] = []  # submitters waiting for ingress room

    def start(self) -> None:
        if self._thread is not None:
            return
        self.clock.restart()
        self._status = "ok"
        self._thread = threading.Thread(target=self._run, name=self._worker_name, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._lock:
            if self._status in ("stopping", "stopped"):
                return
            self._status = "stopping"
            self._stopping()
            self._ingress_drained()
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._status = "stopped"

    def _stopping(self) -> None:
        """Called under the lock as shutdown begins (e.g. to cancel every known request)."""

    def _ingress_full(self) -> bool:
        """Under the lock: the ingress channel holds `queue_capacity` requests."""
        return False

    def _refusal_now(self) -> str | None:
        with self._lock:
            if self._status != "ok":
                return f"the model worker is {self._status}"
            if self._ingress_full():
                return f"the ingress channel is full ({self.limits.queue_capacity} requests)"
        return None

    async def wait_for_ingress(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._status != "ok" or not self._ingress_full():
                    return
                waiter = loop.create_future()
                self._ingress_waiters.append(waiter)
            await waiter

    def _ingress_drained(self) -> None:
        """Under the lock, by the worker after it took requests from the ingress channel (and at
        shutdown): wake every submitter waiting for room; each checks again."""
        waiters, self._ingress_waiters = self._ingress_waiters, []
        for waiter in waiters:
            try:
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # the waiter's loop has closed: nobody is waiting any more
                pass

    def health(self) -> Health:
        alive = self._thread is not None and self._thread.is_alive()
        if self._status == "ok" and not alive:
            return Health("stopped", "the model worker thread has exited")
        return Health(self._status)

    @abc.abstractmethod
    def _run(self) -> None:
        """The model worker's loop; returns once the status is no longer "ok" and work has drained."""
