"""`helios conform` on a core of two tensor-parallel ranks: production ranks (rank 0 here, rank 1 a
spawned peer over gloo) against the reference's lockstep ranks, at the trace level (every round's
transport, completion, cache writes and logits of rank 0 audited on the reference's rank 0, every
peer's completion held to rank 0's by the agreement) and end to end."""

from __future__ import annotations

import functools

from conformance.runner import ConformOptions, conform
from helios.runtime.options import RankOptions
from tests.conformance.conftest import DEVICE
from tests.conformance.helpers import workload

RANKS = workload(
    "ranks",
    {"name": "greedy", "prompt": "The quick fox", "max_tokens": 5, "temperature": 0},
    {"name": "seeded", "prompt": "The quick cat", "max_tokens": 5, "temperature": 0.9, "top_k": 40, "seed": 7},
    pages=8,  # two 13-token prompts admitted together and growing: production preempts and readmits
)


def test_a_two_rank_core_conforms_at_the_trace_level_and_end_to_end(signed_tp_core):
    from helios.core import open_core

    path, public = signed_tp_core
    opener = functools.partial(open_core, str(path), trusted_keys=[public], accept="acme/tests")
    with opener() as core:
        assert core.manifest.ranks == 2
        report = conform(core, ConformOptions(levels=("trace", "e2e"), device=DEVICE, extra_workloads=(RANKS,),
                                              ranks=RankOptions(open_core=opener, timeout=20.0)))
    assert report.verdict == "pass", report.table()
    assert report.level("trace").passed >= 1 and not report.level("trace").divergences
    assert report.level("e2e").passed + report.level("e2e").numeric_ties == len(RANKS.requests)
