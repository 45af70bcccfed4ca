"""Engram tables on the host (host side, NumPy only): the hash rule, the tables held in host memory,
and the gatherer that fills one of two staging frames per table for each round (docs/engram.md).

    tables = load_engram_tables(serving, manifest, core.read, raw_bf16=False)  # [rows, width], host memory
    gatherer = EngramGatherer(table, values, staging, row_index)       # staging [2, S, W], row_index [R, O]
    frame = gatherer.fill(plan.sequence, plan.lanes)                   # before the round is launched
    gatherer.retire(plan.sequence)                                     # once the round's completion is collected

The hash. For order n (the k-th of the table's orders, multipliers m_k,0 .. m_k,n-1, taken in order
from `EngramTable.multipliers`), the n-gram ending at sequence position p is the tokens x at
positions p-n+1 .. p, and it addresses table row

    h = XOR_{j=0}^{n-1} ((x[p-n+1+j] + 1) * m_k,j  mod 2**64)        row = h mod rows

(unsigned 64-bit arithmetic). An n-gram that would start before position 0 addresses no row: its
row index is -1 and the operator reads a zero block for it. A lane's tokens before this round are
its `LaneInput.history` (the last `max(orders) - 1` known tokens before `consumed`, or all of them
near the start of the sequence).

The frames. Each table has exactly two host staging frames ([S, W] each, `staging[f]`); the
gatherer fills the frame no outstanding round holds, with the distinct rows the round addresses, and
writes `row_index[t, o] = f * S + (row of token t's order-o n-gram within the frame)`. A frame is
held from its fill until every participating rank retired the round that consumes it (`retire`,
called with each rank at the round's completion, or once for all of them). With both frames held a
fill raises `EngramFrameBusy` before writing a byte: the host never overwrites a frame in use, and
the staging never grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from helios.errors import HeliosError
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.lanes import LaneInput

FRAMES = 2  # host staging frames per table (the specification's two)


class EngramError(HeliosError):
    """An Engram table cannot be served as declared, or a round cannot be staged."""


class EngramFrameBusy(EngramError):
    """Both staging frames of a table are held by rounds not yet retired on every rank."""


class EngramHistoryMissing(EngramError):
    """A lane lacks the history tokens (or carries a token unknown to the host) its n-grams need."""


def history_tokens(serving: contract_pb2.ServingContract) -> int:
    """Tokens before a round's first that a lane must carry: the longest n-gram order minus one over
    every Engram table (0 without tables)."""
    return max((max(t.orders) - 1 for t in serving.model.engram_tables if t.orders), default=0)


@dataclass(frozen=True, slots=True)
class EngramHash:
    """The row rule of one table: its rows, orders and each order's multipliers."""

    rows: int
    orders: tuple[int, ...]
    multipliers: tuple[tuple[int, ...], ...]  # one tuple of orders[k] multipliers per order

    @classmethod
    def of(cls, table: contract_pb2.EngramTable) -> EngramHash:
        multipliers, start = [], 0
        for n in table.orders:
            multipliers.append(tuple(table.multipliers[start:start + n]))
            start += n
        return cls(int(table.rows), tuple(table.orders), tuple(multipliers))

    def lane_rows(self, history: Sequence[int], tokens: Sequence[int], consumed: int) -> np.ndarray:
        """[len(tokens), orders] int64: the table row of each token's n-gram of each order, -1 where
        it would start before position 0. `history` holds the tokens at positions
        [consumed - len(history), consumed)."""
        longest = max(self.orders)
        needed = min(consumed, longest - 1)
        if len(history) < needed:
            raise EngramHistoryMissing(f"a lane at position {consumed} carries {len(history)} history tokens; "
                                       f"order {longest} n-grams need {needed}")
        sequence = np.asarray((*history[len(history) - needed:], *tokens), dtype=np.int64)
        if sequence.size and sequence.min() < 0:
            raise EngramHistoryMissing("a lane's token is not known on the host (a device-owned pending token "
                                       "in flight): Engram rounds need completion feedback")
        count = len(tokens)
        out = np.full((count, len(self.orders)), -1, dtype=np.int64)
        if not count:
            return out
        shifted = sequence.astype(np.uint64) + np.uint64(1)  # ids are below 2**31: no wrap
        positions = consumed + np.arange(count)
        for k, (n, multipliers) in enumerate(zip(self.orders, self.multipliers, strict=True)):
            h = np.zeros(count, dtype=np.uint64)
            ok = positions - (n - 1) >= 0
            for j, m in enumerate(multipliers):
                # token at position p - n + 1 + j sits at index needed + i - n + 1 + j of `sequence`
                index = needed + np.arange(count) - n + 1 + j
                values = shifted[np.clip(index, 0, len(sequence) - 1)]
                with np.errstate(over="ignore"):
                    h ^= values * np.uint64(m)
            out[:, k] = np.where(ok, (h % np.uint64(self.rows)).astype(np.int64), -1)
        return out


def round_rows(rule: EngramHash, lanes: Sequence[LaneInput]) -> np.ndarray:
    """[T, orders] int64 for the round's packed tokens, lane after lane (`lane_rows` of each)."""
    parts = [rule.lane_rows(lane.history, lane.tokens, lane.consumed) for lane in lanes]
    return np.concatenate(parts) if parts else np.zeros((0, len(rule.orders)), np.int64)


def load_engram_tables(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                       read: Callable[[str], bytes], *,
                       raw_bf16: bool) -> list[tuple[contract_pb2.EngramTable, np.ndarray]]:
    """Each table and its [rows, width] values in host memory, decoded from its resource with the
    element type of its staging buffer: F32 as float32; BF16 as float32 (`raw_bf16` False) or as its
    raw 16-bit patterns (`raw_bf16` True: copied bit for bit into bf16 frames)."""
    dtypes = {b.name: b.dtype for b in manifest.buffers}
    return [(table, table_values(table, read(table.resource), dtypes[table.staging], raw_bf16=raw_bf16))
            for table in serving.model.engram_tables]


def table_values(table: contract_pb2.EngramTable, data: bytes, dtype: int, *, raw_bf16: bool) -> np.ndarray:
    """The [rows, width] values of `table` from its resource bytes, of staging dtype `dtype`."""
    M = manifest_pb2
    count = int(table.rows) * int(table.width)
    element = 4 if dtype == M.DTYPE_F32 else 2
    if len(data) != count * element:
        raise EngramError(f"Engram table {table.name!r}: resource {table.resource!r} holds {len(data)} bytes, "
                          f"[{table.rows}, {table.width}] of {M.DType.Name(dtype)} needs {count * element}")
    if dtype == M.DTYPE_F32:
        values = np.frombuffer(data, dtype="<f4")
    else:
        bits = np.frombuffer(data, dtype="<u2")
        values = bits.view(np.int16) if raw_bf16 else (bits.astype(np.uint32) << 16).view(np.float32)
    return values.reshape(int(table.rows), int(table.width))


class EngramGatherer:
    """One table's two staging frames and the rounds holding them; see the module docstring."""

    def __init__(self, table: contract_pb2.EngramTable, values: np.ndarray, staging: np.ndarray,
                 row_index: np.ndarray, *, ranks: int = 1,
                 upload: Callable[[int], None] | None = None) -> None:
        if staging.ndim != 3 or staging.shape[0] != FRAMES or staging.shape[2] != values.shape[1]:
            raise EngramError(f"Engram table {table.name!r}: staging {list(staging.shape)} is not "
                              f"[{FRAMES}, S, {values.shape[1]}]")
        self.name = table.name
        self.graphs = frozenset(table.graphs)
        self.rule = EngramHash.of(table)
        self.values = values  # [rows, width], host memory: never uploaded whole
        self.staging = staging  # [2, S, width]: the two host staging frames
        self.row_index = row_index  # [R, orders] int32 host staging of the row index
        self.ranks = ranks
        self.upload = upload  # frame -> copies that frame and the row index to the device (None: shared memory)
        self._held: list[tuple[int, set[int]] | None] = [None] * FRAMES  # frame -> (sequence, ranks yet to retire)
        self._last = FRAMES - 1  # the frame filled last: the next fill prefers the other
        self.fills = 0  # rounds staged
        self.rows_staged = 0  # table rows copied into frames, over every fill

    @property
    def frame_rows(self) -> int:
        return int(self.staging.shape[1])

    def held(self) -> tuple[int | None, ...]:
        """The sequence of the round holding each frame (None: free)."""
        return tuple(None if h is None else h[0] for h in self._held)

    def fill(self, sequence: int, lanes: Sequence[LaneInput]) -> int:
        """Stage round `sequence`: its rows into a free frame and every packed token's row index;
        returns the frame. Raises EngramFrameBusy (writing nothing) when both frames are held."""
        order = ((self._last + 1) % FRAMES, self._last)
        frame = next((f for f in order if self._held[f] is None), None)
        if frame is None:
            raise EngramFrameBusy(f"Engram table {self.name!r}: both staging frames are held (rounds "
                                  f"{list(self.held())}), round {sequence} cannot be staged until one retires")
        rows = round_rows(self.rule, lanes)
        tokens = rows.shape[0]
        if tokens > self.row_index.shape[0]:
            raise EngramError(f"Engram table {self.name!r}: {tokens} packed tokens exceed the row index's "
                              f"{self.row_index.shape[0]} rows")
        addressed = rows >= 0
        distinct, inverse = np.unique(rows[addressed], return_inverse=True)
        if distinct.size > self.frame_rows:
            raise EngramError(f"Engram table {self.name!r}: a round addresses {distinct.size} rows, a frame "
                              f"holds {self.frame_rows}")
        self._held[frame] = (sequence, set(range(self.ranks)))
        self._last = frame
        self.staging[frame, :distinct.size] = self.values[distinct]
        index = np.full(rows.shape, -1, dtype=np.int64)
        index[addressed] = frame * self.frame_rows + inverse.reshape(-1)
        self.row_index[:tokens] = index
        self.row_index[tokens:] = -1
        if self.upload is not None:
            self.upload(frame)
        self.fills += 1
        self.rows_staged += int(distinct.size)
        return frame

    def retire(self, sequence: int, rank: int | None = None) -> None:
        """Rank `rank` (None: every rank) retired round `sequence`'s consumer; its frame is free once
        every participating rank has. A round this table did not stage is ignored."""
        for frame, held in enumerate(self._held):
            if held is not None and held[0] == sequence:
                pending = held[1]
                if rank is None:
                    pending.clear()
                else:
                    pending.discard(rank)
                if not pending:
                    self._held[frame] = None

    def release_all(self) -> None:
        """Forget every held frame (the executor drained: no round is outstanding)."""
        self._held = [None] * FRAMES


def gatherers_for(gatherers: Sequence[EngramGatherer], graph: str) -> tuple[EngramGatherer, ...]:
    """The tables a round of `graph` consumes."""
    return tuple(g for g in gatherers if graph in g.graphs)


__all__ = ["FRAMES", "EngramError", "EngramFrameBusy", "EngramGatherer", "EngramHash", "EngramHistoryMissing",
           "gatherers_for", "history_tokens", "load_engram_tables", "round_rows",
           "table_values"]
