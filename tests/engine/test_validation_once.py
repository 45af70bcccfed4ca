"""Each completion row is validated exactly once per round, by the one validator
(`helios.runtime.completion.validate_round`, called from `Scheduler.complete`), whichever executor
runs the round: a counting spy on the validator over the batching engine and the reference executor
(the production executor's run is tests/production/test_validation_once.py)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import prepare_checkpoint
from helios.reference.executor import ReferenceExecutor
from helios.runtime import completion
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import OPTIONS

REQUESTS = (GenerationRequest(tuple(range(3, 14)), max_tokens=4, sampling=SamplingParams(temperature=0.0)),
            GenerationRequest((7, 8, 9), max_tokens=5, sampling=SamplingParams(temperature=0.8, seed=3)),
            GenerationRequest(tuple(range(30, 50)), max_tokens=3, sampling=SamplingParams(temperature=0.0)))


def count_validations(monkeypatch, runtime: BatchingRuntime) -> tuple[Counter, int]:
    """Serve REQUESTS to the end; returns (rows validated per submission sequence, lanes submitted)."""
    validated: Counter = Counter()
    real = completion.validate_round

    def spy(graph_name, lanes, rows, *, sequence, **checks):
        validated[sequence] += len(rows)
        return real(graph_name, lanes, rows, sequence=sequence, **checks)

    monkeypatch.setattr(completion, "validate_round", spy)
    submitted: list[int] = []
    schedule = runtime.scheduler.schedule

    def planned():
        plan = schedule()
        if plan is not None:
            submitted.append(len(plan.lanes))
        return plan

    monkeypatch.setattr(runtime.scheduler, "schedule", planned)

    async def main() -> list:
        runtime.start()
        try:
            streams = [runtime.submit(PreparedRequest(f"r{i}", r)) for i, r in enumerate(REQUESTS)]
            ends = []
            for stream in streams:
                async for event in stream:
                    ends.append(event)
            return ends
        finally:
            runtime.shutdown()

    ends = asyncio.run(main())
    assert sum(isinstance(e, Finished) for e in ends) == len(REQUESTS), ends
    rounds = sum(runtime.scheduler.counters.launches.values())
    assert len(submitted) == rounds == len(validated), (submitted, validated)
    return validated, sum(submitted)


def assert_once(validated: Counter, lanes: int) -> None:
    assert sorted(validated) == list(range(1, len(validated) + 1))  # every round, each once, in order
    assert sum(validated.values()) == lanes  # every row of every round, once


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def test_the_reference_executor_rows_are_validated_once(core, monkeypatch):
    from helios.contract import PreparedContract

    executor = ReferenceExecutor.load(core, pages=24)
    contract = PreparedContract.decode(core.contract, core.manifest)
    runtime = BatchingRuntime.for_executor(executor, contract, AdmissionLimits(max_active=2, queue_capacity=4),
                                           pages=24)
    assert_once(*count_validations(monkeypatch, runtime))
