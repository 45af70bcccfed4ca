"""Conformance of scored prefill: a production whose prompt scores are off by more than the tolerance
is an end-to-end divergence naming the prompt token. (That a scored request passes, and that the
coverage table reports scored prefill exercised, is checked on every generated workload by
test_generated_workloads.py and on the shipped `mixed` workload by test_conform_passes.py.)"""

from __future__ import annotations

import numpy as np

from conformance.coverage import NOT_OBSERVED, SCORED
from tests.conformance.helpers import only_divergence, run, workload

SCORED_WORKLOAD = workload(
    "scored",
    {"name": "scored", "prompt": "Scores, chunk by chunk", "echo": True, "logprobs": 3, "max_tokens": 0,
     "temperature": 0},
)


class _OffScores:
    """Production as conform runs it, every score it reads back moved by 1e-3."""

    def __init__(self) -> None:
        from conformance.runner import Production
        from tests.conformance.conftest import DEVICE

        self.inner = Production(DEVICE)

    def runtime(self, core, workload, sink):
        runtime, header = self.inner.runtime(core, workload, sink)
        executor = runtime._executor
        collect = executor.collect

        def shifted(plan):
            rows = collect(plan)
            scores = getattr(rows, "scores", None)  # a scored round's
            if scores is not None:
                scores.target[:] = scores.target - np.float32(1e-3)
            return rows

        executor.collect = shifted
        return runtime, header


def test_scores_off_by_more_than_the_tolerance_are_a_divergence_naming_the_token(conform_core):
    report = run(conform_core, ("e2e",), SCORED_WORKLOAD, production=_OffScores())
    divergence = only_divergence(report, "e2e")
    assert divergence.case == "scored/scored" and divergence.field == "prompt_scores[1].logprob"
    assert abs(divergence.reference - divergence.production - 1e-3) < 1e-5
    assert NOT_OBSERVED == next(r for r in report.coverage.rows if r.mechanism == SCORED).states.get("trace",
                                                                                                     NOT_OBSERVED)
