"""The reference runs a tensor-parallel core's startup tuning producer on every rank in lockstep
(`execute_ranks`) before any serving graph: the offset-norm test recipe on a --tp 2 core fills each
rank's own TUNED arrays with the same bytes and generates the plain --tp 2 core's tokens."""

from __future__ import annotations

import dataclasses

import numpy as np

from helios.ignition.preparation.tuning import PRODUCER, offset_norm_storage
from helios.ignition.prepare import prepare_checkpoint
from helios.reference import executor as reference_executor
from helios.reference.executor import ReferenceExecutor
from tests.reference.test_tensor_parallel import OPTIONS, REQUESTS, _tokens


def test_every_rank_runs_the_producer_first_and_the_tokens_are_the_plain_cores(tiny_checkpoint, monkeypatch):
    plain = prepare_checkpoint(tiny_checkpoint("llama"), dataclasses.replace(OPTIONS, tensor_parallel=2))
    core = offset_norm_storage(plain)
    assert len(core.manifest.tuning_catalog[0].program_resources) == 2
    expected = _tokens(plain, REQUESTS[0])

    ran: list[tuple[str, ...]] = []
    lockstep = reference_executor.execute_ranks

    def instrumented(programs, tensors, operators=None):
        ran.append(tuple(f"{p.graph}/{p.rank}" for p in programs))
        return lockstep(programs, tensors, operators)

    monkeypatch.setattr(reference_executor, "execute_ranks", instrumented)
    executor = ReferenceExecutor.load(core, pages=4)
    assert ran == [(f"{PRODUCER}/0", f"{PRODUCER}/1")]  # at load, before any serving graph: only the producer
    assert executor.tuned and all(
        np.array_equal(rank[name], executor.buffers[name]) and rank[name] is not executor.buffers[name]
        for rank in executor.rank_buffers[1:] for name in executor.tuned)
    assert all(executor.buffers[name].any() for name in executor.tuned)
    assert _tokens(core, REQUESTS[0]) == expected
    # the runtime's own load ran the producer once more, before every serving round it then ran
    assert ran[1] == (f"{PRODUCER}/0", f"{PRODUCER}/1") and len(ran) > 2
    assert all(not r[0].startswith(PRODUCER) for r in ran[2:])
