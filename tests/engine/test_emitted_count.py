"""An executor that reports an emitted count above a lane's sampling decision is caught by the one
validator (`Scheduler.complete` -> `validate_round`), whether its rows come back as columns
(`CompletionRows`, as executors read them) or as `Completion` rows: the request fails as an
execution failure naming the check, and no token of that round is delivered."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helios.contract import PreparedContract
from helios.engine.worker import BatchingRuntime
from helios.reference.executor import ReferenceExecutor
from helios.runtime.completion import CompletionRows
from helios.runtime.events import Failed
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import serve
from tests.engine.test_validation_once import core  # noqa: F401  (the module's core fixture)


class Overcounting:
    """The reference executor, with one lane's emitted count raised by one in the chosen round."""

    def __init__(self, executor: ReferenceExecutor, pick, as_rows: bool) -> None:
        self.executor = executor
        self.frames = executor.frames
        self.pick = pick  # (plan) -> the lane index to corrupt, or None
        self.as_rows = as_rows
        self.corrupted: list[tuple[int, int]] = []  # (sequence, emitted as reported)

    def submit(self, plan) -> None:
        self.executor.submit(plan)

    def collect(self, plan):
        rows = self.executor.collect(plan)
        lane = None if self.corrupted else self.pick(plan)
        if lane is None:
            return rows
        emitted = rows.column("emitted").copy()
        emitted[lane] += 1
        self.corrupted.append((plan.sequence, int(emitted[lane])))
        if self.as_rows:
            out = list(rows)
            out[lane] = dataclasses.replace(out[lane], emitted=int(emitted[lane]))
            return out
        names = ("frame_index", "submission_sequence", "generation", "sampled_id", "emitted", "consumed_endpoint",
                 "draft_cursor", "model_reserved", "status")
        return CompletionRows({name: emitted if name == "emitted" else np.array(rows.column(name))
                               for name in names})


def _sampling(plan):
    return next((i for i, lane in enumerate(plan.lanes) if lane.samples), None)


def _not_sampling(plan):
    return next((i for i, lane in enumerate(plan.lanes) if lane.tokens and not lane.samples), None)


@pytest.mark.parametrize("as_rows", [False, True], ids=["columns", "rows"])
@pytest.mark.parametrize("pick, expected", [(_sampling, "emitted 2 "), (_not_sampling, "emitted 1 ")],
                         ids=["sampling", "prefill-chunk"])
def test_an_emitted_count_above_the_sampling_decision_fails_the_request(core, as_rows, pick, expected):  # noqa: F811
    executor = Overcounting(ReferenceExecutor.load(core, pages=24), pick, as_rows)
    contract = PreparedContract.decode(core.contract, core.manifest)
    runtime = BatchingRuntime.for_executor(executor, contract, AdmissionLimits(max_active=1), pages=24)
    prompt = tuple(range(3, 23))  # 20 tokens: a 16-token chunk that does not sample, then one that does
    (result,) = serve(runtime, [PreparedRequest("r", GenerationRequest(prompt, max_tokens=3, sampling=SamplingParams(
        temperature=0.0)), observe_tokens=True)])
    assert executor.corrupted, "no round had such a lane"
    assert isinstance(result.terminal, Failed), result
    assert "AcceptedCountInvalid" in result.terminal.message and expected in result.terminal.message
    assert result.tokens == []  # the round's token was never delivered
    assert runtime.scheduler.residency().requests == ()  # the failed request's slot and pages came back
