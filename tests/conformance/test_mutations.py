"""The mutation check: five deliberate bugs injected into production, one at a time, each caught by
conformance as a divergence that names the right field.

    off-by-one page-table length   the executor uploads one page-table entry too few  -> transport.lane_page_table
    stale slot generation          a reused slot keeps its previous generation row    -> transport.lane_generation
    dropped stop-buffer flush      output-limit termination drops the filter's flush  -> e2e text
    swapped lane order             completion rows come back in reverse lane order    -> lane_order
    wrong Philox offset            the sampling kernel draws at position + 1          -> operators ids / sampled_id
"""

from __future__ import annotations

from helios.proto import contract_pb2
from tests.conformance.helpers import only_divergence, run, workload

V = contract_pb2


def test_off_by_one_page_table_length(conform_core, monkeypatch):
    from helios.production.executor import NativeExecutor

    pack = NativeExecutor._pack

    def short_rows(self, graph, lanes, page_table_updates=None):
        pack(self, graph, lanes, page_table_updates)
        for binding in graph.packing.bindings:
            if binding.source == V.VALUE_SOURCE_PAGE_TABLE:
                host = self.host_view[binding.destination]
                for lane in lanes:
                    if lane.page_ids:  # the row holds one page fewer than the lane's
                        host[lane.slot, len(lane.page_ids) - 1] = binding.padding
                self._upload(binding.destination)

    monkeypatch.setattr(NativeExecutor, "_pack", short_rows)
    report = run(conform_core, ("trace",), workload("pages", {"prompt": [3, 1, 4, 1, 5, 9], "max_tokens": 2,
                                                              "temperature": 0}))
    found = only_divergence(report, "trace")
    assert found.field == "transport.lane_page_table", report.table()
    assert report.exit_code == 1


def test_stale_slot_generation(conform_core, monkeypatch):
    import helios.production.executor as executor

    row_key = executor._row_key

    def stale(binding, lane):  # the generation row is packed once per slot, never per request
        return (binding.source,) if binding.source == V.VALUE_SOURCE_GENERATION else row_key(binding, lane)

    monkeypatch.setattr(executor, "_row_key", stale)
    one_slot = workload("reuse", {"prompt": [7, 7, 7], "max_tokens": 1, "temperature": 0},
                        {"prompt": [8, 8, 8], "max_tokens": 1, "temperature": 0}, max_active=1)
    report = run(conform_core, ("trace",), one_slot)
    found = only_divergence(report, "trace")
    assert found.field == "transport.lane_generation", report.table()
    assert (found.reference, found.production, found.lane) == (2, 1, 0)


def test_dropped_stop_buffer_flush(conform_core, monkeypatch):
    from helios.engine.worker import BatchingRuntime
    from helios.reference.engine import ReferenceEngine
    from helios.runtime.request import GenerationRequest, SamplingParams

    prompt = (12, 34, 56, 78)
    tokens = list(ReferenceEngine.load(conform_core).generate(GenerationRequest(
        prompt, max_tokens=3, sampling=SamplingParams(temperature=0.0), ignore_eos=True)))
    spare = next(t for t in range(256) if t not in tokens)
    # The last token starts a stop sequence that never completes: it stays buffered until the
    # output limit's flush releases it.
    body = {"prompt": list(prompt), "max_tokens": 3, "temperature": 0, "ignore_eos": True,
            "stop_token_sequences": [[tokens[-1], spare]]}
    end = BatchingRuntime._end

    def drop_flush(self, entry, termination, pieces, *, failure=None):
        return end(self, entry, termination, (), failure=failure)

    monkeypatch.setattr(BatchingRuntime, "_end", drop_flush)
    report = run(conform_core, ("trace", "e2e"), workload("flush", body))
    assert report.level("trace").divergences == (), report.table()  # the executor is innocent
    found = only_divergence(report, "e2e")
    assert found.field == "text", report.table()
    assert found.production != found.reference and found.reference.startswith(found.production)


def test_swapped_lane_order(conform_core, monkeypatch):
    from helios.production.executor import NativeExecutor

    # The core keeps pending tokens on the device (two frames): the runtime submits and collects
    # rounds, so the rows come back through `collect` (the scheduler validates them after it). The two requests start in
    # different frames; they share a round once a decode lane joins its request's next round early,
    # which takes a few output tokens.
    assert conform_core.manifest.transport.frames == 2
    collect = NativeExecutor.collect

    def reversed_rows(self, plan):
        rows = collect(self, plan)
        return rows[::-1]

    monkeypatch.setattr(NativeExecutor, "collect", reversed_rows)
    two = workload("pair", {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0},
                   {"prompt": [4, 5, 6, 7, 8], "max_tokens": 4, "temperature": 0})
    report = run(conform_core, ("trace",), two)
    found = only_divergence(report, "trace")
    assert found.field == "lane_order", report.table()
    assert found.production == found.reference[::-1]


def test_wrong_philox_offset(conform_core, monkeypatch):
    from helios.production.kernels.sampling import Sampler

    call = Sampler.__call__

    def shifted(self, logits, seed, positions, *args, **kwargs):
        return call(self, logits, seed, positions + 1, *args, **kwargs)

    monkeypatch.setattr(Sampler, "__call__", shifted)
    seeded = workload("seeded", {"prompt": [2, 7, 1, 8], "max_tokens": 3, "temperature": 1.0, "seed": 1234})
    report = run(conform_core, ("operators", "trace"), seeded, operators=("sample",))
    operator = only_divergence(report, "operators")
    assert operator.case.startswith("sample/") and operator.field.startswith("ids["), report.table()
    traced = only_divergence(report, "trace")
    assert traced.field == "sampled_id" and traced.margin is not None, report.table()
