"""/metrics (host side): Prometheus text from prometheus-client.

Owns: `HeliosCollector`, which reads the runtime's `RuntimeMetrics` snapshot and the server's own
counters at scrape time. Labels carry only bounded enumerations (termination, operation, resource,
endpoint, status code): never request ids, prompts or token ids.

`flare_mixed_grammar_decode_steps_total` counts successful decode submissions whose request lanes
mix constrained and unconstrained requests; `flare_constrained_max_inflight` records the maximum
outstanding executor frames right after a successful constrained submission (0 before any, 1
after: a constrained request keeps one outstanding round). The runtime counts both; the sequential
reference worker submits one lane a round, so it never mixes lanes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from helios.runtime.interface import RuntimeMetrics


class ServerCounters:
    """HTTP-side counts, updated on the event loop thread."""

    def __init__(self) -> None:
        self.responses: Counter[tuple[str, int]] = Counter()  # (endpoint, status) -> count
        self.cancelled_by_client = 0  # dropped connections that cancelled their request

    def record(self, endpoint: str, status: int) -> None:
        self.responses[(endpoint, status)] += 1


class HeliosCollector(Collector):
    def __init__(
        self,
        runtime_metrics: Callable[[], RuntimeMetrics],
        counters: ServerCounters,
        admission_in_use: Callable[[], int],
        admission_capacity: int,
    ) -> None:
        self._runtime_metrics = runtime_metrics
        self._counters = counters
        self._in_use = admission_in_use
        self._capacity = admission_capacity

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        m = self._runtime_metrics()

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        def labeled_counter(name: str, doc: str, label: str, values: dict) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=[label])
            for key, value in sorted(values.items()):
                family.add_metric([str(key)], value)
            return family

        # request lifecycle
        yield counter(
            "helios_requests_submitted", "Requests submitted to the model runtime.", m.requests_submitted
        )
        yield counter(
            "helios_requests_started", "Requests that left the pending deque for a slot.", m.requests_started
        )
        yield counter(
            "helios_requests_rejected",
            "Scheduler admission rejections (HTTP 503 or SSE error).",
            m.requests_rejected,
        )
        yield counter("helios_requests_failed", "Requests ended by an execution failure.", m.requests_failed)
        yield labeled_counter("helios_requests_finished", "Requests finished, by termination.", "termination",
                              m.requests_finished)
        yield gauge("helios_requests_active", "Requests holding a model slot.", m.requests_active)
        yield gauge(
            "helios_requests_pending",
            "Requests in the ingress channel and pending deque.",
            m.requests_pending,
        )
        yield counter("helios_prompt_tokens", "Prompt tokens of started requests.", m.prompt_tokens)
        yield counter(
            "helios_generation_tokens",
            "Sampled tokens, EOS and stop-crossing ones included.",
            m.output_tokens,
        )
        # graph launches
        yield labeled_counter("helios_graph_launches", "Rounds submitted to the engine, by operation.", "operation",
                              m.graph_launches)
        # learned speculation
        yield counter("helios_speculative_rounds", "SPECULATIVE rounds completed.", m.speculative_rounds)
        yield counter("helios_speculative_offered_drafts", "Draft proposals offered for verification.",
                      m.offered_drafts)
        yield counter("helios_speculative_accepted_drafts", "Draft proposals accepted by verification.",
                      m.accepted_drafts)
        yield counter("helios_speculative_copied_offered", "Proposals copied from request histories (history "
                      "drafting) offered for verification.", m.copied_offered)
        yield counter("helios_speculative_copied_accepted", "Copied proposals accepted by verification.",
                      m.copied_accepted)
        # per draft position (1-based), per width, and the adaptive program choice
        yield labeled_counter("helios_speculative_position_offered",
                              "Speculative lanes offered a proposal at this draft position.", "position",
                              m.offered_by_position)
        yield labeled_counter("helios_speculative_position_accepted",
                              "Speculative lanes whose proposal at this draft position was accepted.", "position",
                              m.accepted_by_position)
        yield labeled_counter("helios_speculative_width_rounds", "SPECULATIVE rounds completed, by width W.", "width",
                              m.speculative_rounds_by_width)
        yield counter("helios_speculative_plain_choices", "Cohorts ready to speculate for which the adaptive "
                      "choice ran plain DECODE (its expected rate was not below speculation's).", m.plain_choices)
        yield counter("helios_speculative_fallback_choices", "Speculative rounds run at the fallback width because "
                      "the measured round costs were unknown or stale, or no acceptance was observed yet.",
                      m.fallback_choices)
        yield counter("helios_speculative_explored_choices", "Speculative rounds of a wider program that no served "
                      "round had measured, run to measure it (its table rate above plain decoding's).",
                      m.explored_choices)
        costs = GaugeMetricFamily("helios_round_cost_seconds", "Measured cost of one round of a selected graph "
                                  "(the adaptive choice's table).", labels=["operation", "lanes", "width"])
        for cost in sorted(m.round_costs, key=lambda c: (c.operation, c.width, c.lanes)):
            costs.add_metric([cost.operation_name, str(cost.lanes), str(cost.width)], cost.seconds)
        yield costs
        served = GaugeMetricFamily("helios_served_round_cost_seconds", "Wall time of one served round of a graph, "
                                   "host work and lost overlap included: the moving average over its served rounds "
                                   "(the adaptive choice's cost once a graph has 3).",
                                   labels=["graph", "operation", "lanes", "width"])
        rounds = CounterMetricFamily("helios_served_rounds", "Served rounds whose wall time was observed, by graph.",
                                     labels=["graph", "operation", "lanes", "width"])
        for cost in sorted(m.served_round_costs, key=lambda c: (c.operation, c.width, c.lanes, c.graph)):
            labels = [cost.graph, cost.operation_name, str(cost.lanes), str(cost.width)]
            served.add_metric(labels, cost.seconds)
            rounds.add_metric(labels, cost.rounds)
        yield served
        yield rounds
        # prefix reuse
        yield counter("helios_prefix_lookups", "Prefix-cache lookups at admission.", m.prefix_lookups)
        yield counter(
            "helios_prefix_reused_tokens",
            "Prompt tokens served from cached prefixes.",
            m.reused_prompt_tokens,
        )
        # snapshots
        yield counter("helios_snapshots_published", "Immutable checkpoints and continuation snapshots published "
                      "after their round's fence.", m.snapshots_published)
        yield counter("helios_snapshots_evicted", "Checkpoints evicted from the page cache and snapshots given up "
                      "under page pressure.", m.snapshots_evicted)
        yield counter("helios_snapshots_restored", "Continuation snapshots restored into private pages.",
                      m.snapshots_restored)
        yield gauge("helios_continuation_rows_in_use", "Continuation storage rows holding a snapshot.",
                    m.continuation_rows_in_use)
        yield gauge("helios_continuations_published", "Continuation rows holding a published mid-page prefix.",
                    m.continuations_published)
        yield counter("helios_continuation_hits", "Admissions whose prefix ends mid-page in a published "
                      "continuation (restored, not recomputed).", m.continuation_hits)
        yield counter("helios_continuation_evictions", "Published continuations evicted for a row, least "
                      "recently published or matched first.", m.continuation_evictions)
        yield counter("helios_recomputed_tokens", "Positions consumed again after a readmission (work a "
                      "preemption threw away).", m.recomputed_tokens)
        # the host tier of evicted checkpoints
        yield counter("helios_host_cache_offloaded_pages", "Evicted checkpoint pages copied to the host tier.",
                      m.host_offloaded_pages)
        yield counter("helios_host_cache_offloaded_bytes", "Bytes copied to the host tier at evictions.",
                      m.host_offloaded_bytes)
        yield counter("helios_host_cache_readmitted_pages", "Host-tier pages copied back to device pages on a "
                      "prefix hit.", m.host_readmitted_pages)
        yield counter("helios_host_cache_readmitted_bytes", "Bytes copied back from the host tier on prefix hits.",
                      m.host_readmitted_bytes)
        yield gauge("helios_host_cache_bytes", "Host-tier bytes holding a checkpoint.", m.host_bytes_in_use)
        yield gauge("helios_host_cache_capacity_bytes", "The host tier's bound (--host-cache-gib, whole pages).",
                    m.host_bytes_capacity)
        yield counter("helios_host_cache_evictions", "Host-tier checkpoints dropped to make room, least recently "
                      "stored first.", m.host_evictions)
        # startup, and what the device half made (all of it at startup: serving captures and compiles none)
        startup = GaugeMetricFamily("helios_startup_seconds", "Seconds the runtime's load spent in each startup "
                                    "phase.", labels=["phase"])
        for phase, seconds in m.startup_seconds.items():
            startup.add_metric([phase], seconds)
        yield startup
        yield counter("helios_graphs_captured", "CUDA graphs captured by this process (at startup).",
                      m.graphs_captured)
        yield counter("helios_kernels_compiled", "Triton kernel specializations compiled by this process "
                      "(at startup).", m.kernels_compiled)
        # resource capacity
        capacity = GaugeMetricFamily(
            "helios_capacity", "Prepared and selected capacities.", labels=["resource"]
        )
        for resource, value in sorted(m.capacity.items()):
            capacity.add_metric([resource], value)
        capacity.add_metric(["http_admission"], self._capacity)
        yield capacity
        available = GaugeMetricFamily("helios_available", "Resources free right now.", labels=["resource"])
        for resource, value in sorted(m.available.items()):
            available.add_metric([resource], value)
        yield available
        yield gauge(
            "helios_http_admission_in_use",
            "Requests holding an HTTP admission permit (preparing, queued, generating or awaiting delivery).",
            self._in_use(),
        )
        responses = CounterMetricFamily(
            "helios_http_responses",
            "HTTP responses, by endpoint and status code.",
            labels=["endpoint", "code"],
        )
        for (endpoint, status), value in sorted(self._counters.responses.items()):
            responses.add_metric([endpoint, str(status)], value)
        yield responses
        yield counter(
            "helios_http_client_cancellations",
            "Requests cancelled because their client dropped the connection.",
            self._counters.cancelled_by_client,
        )
        # the native model worker's grammar measurements, named as the specification names them
        yield counter(
            "flare_mixed_grammar_decode_steps",
            "Successful decode submissions whose request lanes include constrained and unconstrained requests.",
            m.mixed_grammar_decode_steps,
        )
        yield gauge(
            "flare_constrained_max_inflight",
            "Maximum outstanding executor frames right after a successful constrained submission (0 before any).",
            m.constrained_max_inflight,
        )


def build_registry(collector: HeliosCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
