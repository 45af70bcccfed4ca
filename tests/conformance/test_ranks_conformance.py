"""`helios conform` on a core of two tensor-parallel ranks: production ranks (rank 0 here, rank 1 a
spawned peer over gloo) against the reference's lockstep ranks, at the trace level (every round's
transport, completion, cache writes and logits of rank 0 audited on the reference's rank 0, every
peer's completion held to rank 0's by the agreement) and end to end."""

from __future__ import annotations

import functools

from conformance.runner import ConformOptions, Production, conform
from helios.runtime.options import RankOptions
from tests.conformance.conftest import DEVICE
from tests.conformance.helpers import workload

RANKS = workload(
    "ranks",
    {"name": "greedy", "prompt": "The quick fox", "max_tokens": 5, "temperature": 0},
    {"name": "seeded", "prompt": "The quick cat", "max_tokens": 5, "temperature": 0.9, "top_k": 40, "seed": 7},
    pages=8,  # two 13-token prompts admitted together and growing: production preempts and readmits
)


class Recorded:
    """Production ranks as conform runs them, keeping each workload's records for the test to read."""

    def __init__(self, ranks: RankOptions) -> None:
        self.inner = Production(DEVICE, ranks=ranks)
        self.sinks: list = []
        self.headers: list = []

    def runtime(self, core, workload, sink):
        self.sinks.append(sink)
        runtime, header = self.inner.runtime(core, workload, sink)
        self.headers.append(header)
        return runtime, header


def test_a_two_rank_core_conforms_at_the_trace_level_and_end_to_end(signed_tp_core):
    from helios.core import open_core

    path, public = signed_tp_core
    opener = functools.partial(open_core, str(path), trusted_keys=[public], accept="acme/tests")
    production = Recorded(RankOptions(open_core=opener, timeout=20.0))
    with opener() as core:
        assert core.manifest.ranks == 2
        report = conform(core, ConformOptions(levels=("trace", "e2e"), device=DEVICE, extra_workloads=(RANKS,),
                                              production=production))
    assert report.verdict == "pass", report.table()
    assert report.level("trace").passed >= 1 and not report.level("trace").divergences
    assert report.level("e2e").passed + report.level("e2e").numeric_ties == len(RANKS.requests)
    # the audit per rank had something to compare: rank 1's own cache writes of every round
    (sink,) = production.sinks
    assert sink.records and all(len(record.rank_states) == 1 for record in sink.records)
    written = [(key, record) for record in sink.records for key in record.rank_states[0] if key.startswith("cache.")]
    assert written  # each rank holds its own key/value head: rank 1 wrote other values than rank 0
    assert any((record.rank_states[0][key][1] != record.state[key][1]).any() for key, record in written)
    # ...and the audit reads them: rank 1's cache write of one round, changed, is a divergence of rank 1
    import dataclasses

    from conformance.audit import audit_trace

    key, record = written[0]
    rows, values = record.rank_states[0][key]
    changed = dataclasses.replace(record, rank_states=({**record.rank_states[0], key: (rows, values + 1.0)},))
    records = [changed if r is record else r for r in sink.records]
    with opener() as core:
        case = audit_trace(core, production.headers[0], records, case="ranks")
    assert case.divergence is not None and case.divergence.field == f"rank1.{key}", case
