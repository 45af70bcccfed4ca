"""The reference collectives (host side, NumPy only): how the ranks of a core combine, executably.

The reference interpreter runs the ranks of a tensor-parallel core in lockstep in one process
(`helios.reference.interpreter.execute_ranks`): every rank runs operator i before any rank runs
operator i + 1, and at a collective the interpreter hands the inputs of every rank, in rank order,
to the function of `RANK_COLLECTIVES`, which returns each rank's output. These functions are the
executable specification of `all_reduce` and `all_gather` (docs/operators.md), against which the
production ranks are compared.

`REFERENCE_OPERATORS` holds the one-rank reading of each (`all_reduce` and `all_gather` over a single
rank return their input), used when one program runs alone; a collective over more ranks there is
`CollectiveWithoutPeers`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from helios.errors import HeliosError

F = np.float32


class CollectiveWithoutPeers(HeliosError):
    """A collective over several ranks ran in a program executed alone, or with another count of peers."""


def _peers(xs: Sequence[np.ndarray], ranks: int, op: str) -> None:
    if len(xs) != ranks:
        raise CollectiveWithoutPeers(f"{op} over {ranks} ranks was given {len(xs)} ranks' inputs")


def all_reduce_ranks(xs: Sequence[np.ndarray], *, ranks: int) -> list[np.ndarray]:
    """out = x[0] + x[1] + ... + x[ranks - 1], accumulated in f32 in rank order; the same on every rank."""
    _peers(xs, ranks, "all_reduce")
    total = np.zeros(np.shape(xs[0]), dtype=F)
    for x in xs:
        total = (total + np.asarray(x, dtype=F)).astype(F)
    return [total.copy() for _ in xs]


def all_gather_ranks(xs: Sequence[np.ndarray], *, ranks: int) -> list[np.ndarray]:
    """out = [x[0] | x[1] | ... ] along the last axis; the same on every rank."""
    _peers(xs, ranks, "all_gather")
    joined = np.concatenate([np.asarray(x) for x in xs], axis=-1)
    return [joined.copy() for _ in xs]


def all_reduce(x: np.ndarray, *, ranks: int) -> np.ndarray:
    """One rank's reading: the sum over a single rank is its input."""
    return all_reduce_ranks([x], ranks=ranks)[0]


def all_gather(x: np.ndarray, *, ranks: int) -> np.ndarray:
    """One rank's reading: a single rank's gather is its input."""
    return all_gather_ranks([x], ranks=ranks)[0]


RANK_COLLECTIVES: Mapping[str, Callable[..., list[np.ndarray]]] = MappingProxyType({
    "all_reduce": all_reduce_ranks,
    "all_gather": all_gather_ranks,
})
