"""The Engram test recipe's core on the reference runtime (docs/engram.md): the table is what moves
the tokens (with its rows zeroed, the core generates exactly what the same checkpoint without a
table generates, and with them it does not), every round of a consuming graph is staged, and the
table is never a program weight (it stays on the host)."""

from __future__ import annotations

from helios.ignition.prepare import PreparedCore, PreparedResource
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams

PROMPT = (5, 9, 17, 3, 44, 12, 7, 7, 9, 30, 2)  # two prefill chunks of the 8-token graph
GREEDY = SamplingParams(temperature=0.0)


def _tokens(core, max_tokens: int = 6) -> tuple[list[int], ReferenceEngine]:
    engine = ReferenceEngine.load(core, pages=16)
    return list(engine.generate(GenerationRequest(PROMPT, max_tokens=max_tokens, sampling=GREEDY,
                                                  ignore_eos=True))), engine


def test_the_table_moves_the_tokens_and_a_zero_table_is_the_plain_model(engram_core):
    core, plain = engram_core
    (table,) = core.contract.model.engram_tables
    tokens, engine = _tokens(core)
    (gatherer,) = engine.executor.engram
    assert gatherer.fills == 2 + 5  # two prefill chunks, then every decode round but the last token's
    assert table.resource not in engine.executor.weights  # held by the gatherer only, never a program tensor
    zeroed = tuple(PreparedResource(r.id, r.kind, (lambda n=len(r.data): bytes(n)) if r.id == table.resource
                                    else r.produce) for r in core.resource_list)
    zero_tokens, _ = _tokens(PreparedCore(core.contract, core.manifest, zeroed))
    plain_tokens, _ = _tokens(plain)
    assert zero_tokens == plain_tokens
    assert tokens != plain_tokens


def test_lockstep_ranks_share_the_frames_and_generate_the_one_rank_tokens(engram_core, tiny_checkpoint):
    """--tp 2: every rank computes the Engram sum whole from the one staging both read; the frame is
    retired by each rank at the round's collection."""
    import dataclasses

    from helios.ignition.preparation.engram import EngramOptions
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from tests.conftest import ENGRAM_CAPACITIES

    core, _ = engram_core
    two = prepare_checkpoint(tiny_checkpoint("llama"), dataclasses.replace(
        PreparationOptions(**ENGRAM_CAPACITIES, engram=EngramOptions(layer=1)), tensor_parallel=2))
    tokens, engine = _tokens(two)
    (gatherer,) = engine.executor.engram
    assert gatherer.ranks == 2 and gatherer.held() == (None, None)
    assert tokens == _tokens(core)[0]
