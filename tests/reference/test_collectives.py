"""The collectives' executable definition: all_reduce sums the ranks' inputs in f32 in rank order,
all_gather joins them along the last axis, and the lockstep interpreter runs the ranks' programs of a
graph so that a row-parallel product followed by all_reduce is the whole product."""

from __future__ import annotations

import numpy as np
import pytest

from helios.program import ProgramBuilder
from helios.reference.collectives import CollectiveWithoutPeers, all_gather_ranks, all_reduce_ranks
from helios.reference.interpreter import RankProgramsDiffer, execute, execute_ranks


def test_all_reduce_is_the_sum_in_rank_order_on_every_rank_and_all_gather_joins_the_last_axis():
    xs = [np.full((2, 3), v, np.float32) for v in (1.0, 2.0, 4.0)]
    summed = all_reduce_ranks(xs, ranks=3)
    assert len(summed) == 3 and all(np.array_equal(s, np.full((2, 3), 7.0)) for s in summed)
    assert summed[0] is not summed[1]  # each rank owns its output
    joined = all_gather_ranks([np.arange(4).reshape(2, 2), 10 + np.arange(4).reshape(2, 2)], ranks=2)
    assert joined[1].tolist() == [[0, 1, 10, 11], [2, 3, 12, 13]]
    with pytest.raises(CollectiveWithoutPeers, match="all_reduce over 2 ranks was given 3"):
        all_reduce_ranks(xs, ranks=2)


def _rank_program(rank: int, ranks: int, width: int):
    """Rank `rank` of a row-parallel product: x's column slice times the weight's column slice, summed;
    then a vocabulary-parallel head: the rank's rows of the head, gathered."""
    b = ProgramBuilder("g", rank=rank)
    x = b.transport("x", "x", "f32", [3, width // ranks])
    w = b.weight("w", resource=f"w{rank}", dtype="f32", shape=[5, width // ranks])
    part = b.matmul(x, w, name="part")
    whole = b.all_reduce(part, ranks=ranks, name="whole")
    head = b.weight("head", resource=f"head{rank}", dtype="f32", shape=[6 // ranks, 5])
    columns = b.logits(whole, head, name="columns")
    out = b.state("out", "out", "f32", [3, 6])
    b.all_gather(columns, ranks=ranks, into=out)
    return b.build()


def test_lockstep_ranks_compute_the_whole_product_and_every_rank_holds_it():
    rng = np.random.default_rng(0)
    x, w, head = rng.normal(size=(3, 8)), rng.normal(size=(5, 8)), rng.normal(size=(6, 5))
    x, w, head = (a.astype(np.float32) for a in (x, w, head))
    ranks = 2
    programs = [_rank_program(r, ranks, 8) for r in range(ranks)]
    tensors = [{"x": np.ascontiguousarray(x[:, r * 4:(r + 1) * 4]), f"w{r}": np.ascontiguousarray(w[:, r * 4:(r + 1) * 4]),
                f"head{r}": np.ascontiguousarray(head[r * 3:(r + 1) * 3]), "out": np.zeros((3, 6), np.float32)}
               for r in range(ranks)]
    envs = execute_ranks(programs, tensors)
    expected = (x @ w.T) @ head.T
    for env in envs:
        np.testing.assert_allclose(env["out"], expected, rtol=1e-5, atol=1e-5)
    assert np.array_equal(envs[0]["out"], envs[1]["out"])
    # A program run alone may not hold a collective over several ranks.
    with pytest.raises(CollectiveWithoutPeers):
        execute(programs[0], tensors[0])


def test_programs_that_cannot_run_in_lockstep_are_refused():
    first, second = _rank_program(0, 2, 8), _rank_program(1, 2, 8)
    with pytest.raises(RankProgramsDiffer, match="is rank 1"):
        execute_ranks([second, first], [{}, {}])
    other = ProgramBuilder("g", rank=1)
    other.all_reduce(other.transport("x", "x", "f32", [3, 4]), ranks=2)
    with pytest.raises(RankProgramsDiffer, match="operators differ"):
        execute_ranks([first, other.build()], [{}, {}])
    three = _rank_program(1, 3, 9)
    with pytest.raises(RankProgramsDiffer, match="over 3 ranks, the core has 2"):
        execute_ranks([_rank_program(0, 3, 9), three], [{}, {}])
