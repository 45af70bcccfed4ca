"""Validation agreement (device side): every rank validates each round's completion, and the round
commits only when every rank accepts it and holds rank 0's record.

After each collection every rank contributes `[verdict, digest]` (int64) to one all-gather over the
data group: the verdict is 0 when the rank's own validation of its rows (the engine's one validation,
`helios.runtime.completion.validate_round`, with the plan's lanes) accepted them, 1 when it rejected
them, 2 when the rank could not read them; the digest is a hash of the rank's completion rows. Rank 0
raises `RankDisagreement` when any rank's verdict is not 0 or its digest is not rank 0's: the round
then fails as an execution error of its requests (the scheduler's abort), on every rank at once, since
only rank 0's scheduler retires tokens: no rank commits a token of the round, and every rank stays
in step for the next one.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from helios.errors import HeliosError
from helios.runtime.completion import CompletionRows

ACCEPTED, REJECTED, UNREADABLE = 0, 1, 2
_VERDICTS = {REJECTED: "rejected", UNREADABLE: "could not read"}


class RankDisagreement(HeliosError):
    """A rank rejected a round's completion, or its record differs from rank 0's: the round fails."""


def digest(rows) -> int:
    """A 63-bit hash of a round's completion rows (columns when the executor read columns)."""
    h = hashlib.blake2b(digest_size=8)
    if isinstance(rows, CompletionRows):
        for name in ("frame_index", "submission_sequence", "generation", "sampled_id", "emitted",
                     "consumed_endpoint", "offer", "accepted_drafts"):
            h.update(np.ascontiguousarray(rows.column(name), dtype=np.int64).tobytes())
        ids = getattr(rows, "_ids", None)
        if ids is not None:
            h.update(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    else:
        h.update(repr(list(rows)).encode())
    return int.from_bytes(h.digest(), "little") >> 1


def agree(group, sequence: int, verdict: int, rows_digest: int, device: torch.device) -> None:
    """Exchange this rank's verdict and digest with every rank; on rank 0 raise `RankDisagreement`
    naming the first rank that rejected the round or differs from rank 0 (module docstring)."""
    local = torch.tensor([verdict, rows_digest], dtype=torch.int64, device=device)
    parts = [p.cpu() for p in group.gather_rows(local)]
    if group.rank != 0:
        return
    if int(parts[0][0]) != ACCEPTED:
        return  # rank 0's own failure is raised by its caller
    for rank, part in enumerate(parts[1:], start=1):
        if int(part[0]) != ACCEPTED:
            raise RankDisagreement(f"rank {rank} {_VERDICTS.get(int(part[0]), 'rejected')} its completion of "
                                   f"round {sequence}: no rank commits it")
        if int(part[1]) != int(parts[0][1]):
            raise RankDisagreement(f"rank {rank}'s completion of round {sequence} differs from rank 0's: "
                                   "no rank commits it")
