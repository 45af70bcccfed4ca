"""An Engram table added to a decoder (preparation side, host; docs/engram.md).

A TEST recipe, not a published checkpoint: `EngramOptions` asks preparation to add one hashed n-gram
embedding table to a Llama-family model, with weights generated from a seed (no checkpoint holds
Engram tensors). It exercises the specification's mechanism end to end: the table kept in host
memory, the two staging frames, the host gatherer and the `engram_gather` operator. At one layer,
before its attention, every packed row's residual stream gains a gated sum of its n-gram rows:

    e = engram_gather(staging, row_index)                        [P, O * W]   the rows the host staged
    v = e @ value.T                                              [P, hidden]
    g = rms_norm(x, norm) @ gate.T                               [P, hidden]
    x = x + silu(g) * v                                          (gated_activation, add)

`engram_declarations` registers the staging and row-index buffers and returns the contract's
`EngramTable` (its graphs filled in by preparation); `EngramInjection.inject` writes the layer's
operators; `generated_tensors` gives the bytes of the table and of the three small weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helios.errors import HeliosError
from helios.ignition.preparation.contract import Declarations
from helios.ignition.reader import float32_to_bf16_bits
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2
TABLE = "engram"  # the table's name in the contract
STAGING_BUFFER = "engram.staging"
ROW_INDEX_BUFFER = "engram.row_index"
TABLE_RESOURCE = "engram/table"
# (not "gate_proj": the Llama-family split would read it as the MLP's, column-parallel on a rank)
VALUE_PROJ, GATE_PROJ, NORM = "engram.value.weight", "engram.gate.weight", "engram.norm.weight"


class InvalidEngramOptions(HeliosError):
    """An Engram test-recipe option is out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class EngramOptions:
    """The test recipe's table: where it joins the model and its geometry (docs/engram.md)."""

    layer: int = 0  # the decoder layer whose input gains the gated Engram sum
    rows: int = 1021  # hashed rows of the table
    width: int = 8  # features a row
    orders: tuple[int, ...] = (2, 3)  # n-gram orders
    seed: int = 0  # the generated weights and hash multipliers
    scale: float = 1.0  # standard deviation of the table's values

    def __post_init__(self) -> None:
        if self.layer < 0 or self.rows < 1 or self.width < 1 or not self.scale > 0:
            raise InvalidEngramOptions(f"engram: layer >= 0, rows >= 1, width >= 1 and scale > 0, got {self}")
        orders = tuple(self.orders)
        if not orders or any(n < 1 for n in orders) or list(orders) != sorted(set(orders)):
            raise InvalidEngramOptions(f"engram: orders {list(orders)} must be distinct, ascending and >= 1")
        object.__setattr__(self, "orders", orders)

    def argument(self) -> str:
        """The rebuild manifest's record of these options."""
        return (f"--engram=layer:{self.layer},rows:{self.rows},width:{self.width},"
                f"orders:{'/'.join(map(str, self.orders))},seed:{self.seed},scale:{self.scale}")


def multipliers(options: EngramOptions) -> list[int]:
    """The odd 64-bit hash multipliers, orders[k] of them for order k, from the seed."""
    rng = np.random.default_rng([options.seed, 0x656E6772616D])
    return [int(v) * 2 + 1 for v in rng.integers(0, 2**63, size=sum(options.orders), dtype=np.uint64)]


def engram_declarations(decl: Declarations, options: EngramOptions, *, packed_tokens: int,
                        dtype: int) -> C.EngramTable:
    """Register the staging frames ([2, packed_tokens * O, W]: a frame holds every row a round of the
    largest packed capacity may address) and the row index ([packed_tokens, O] i32); the table's
    declaration, its graphs still to be named."""
    orders = len(options.orders)
    decl.buffer(STAGING_BUFFER, M.BUFFER_ROLE_TRANSPORT, dtype, (2, packed_tokens * orders, options.width))
    decl.buffer(ROW_INDEX_BUFFER, M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (packed_tokens, orders))
    return C.EngramTable(name=TABLE, resource=TABLE_RESOURCE, rows=options.rows, width=options.width,
                         orders=list(options.orders), multipliers=multipliers(options), staging=STAGING_BUFFER,
                         row_index=ROW_INDEX_BUFFER)


@dataclass(frozen=True, slots=True)
class EngramInjection:
    """The gated Engram sum of one layer (the module docstring), as a decoder writes it."""

    options: EngramOptions
    hidden: int
    dtype: str  # program dtype of the staging frames and weights ("f32" or "bf16")
    packed_capacity: int  # rows of the row index: the largest packed capacity

    @property
    def layer(self) -> int:
        return self.options.layer

    def inject(self, b: ProgramBuilder, w, x: str, *, tag: str, eps: float) -> str:
        """x plus the gated sum of its rows' Engram embeddings; `w` declares a weight by name and shape."""
        options = self.options
        orders, width = len(options.orders), options.width
        packed = b.type_of(x).shape[0]
        staging = b.transport("engram_staging", STAGING_BUFFER, self.dtype,
                              (2, self.packed_capacity * orders, width))
        index = b.transport("engram_row_index", ROW_INDEX_BUFFER, "i32", (self.packed_capacity, orders))
        rows = b.engram_gather(staging, index, packed_tokens=packed, name=f"{tag}.engram_rows")
        value = b.matmul(rows, w(VALUE_PROJ, (self.hidden, orders * width)), name=f"{tag}.engram_value")
        normed = b.rms_norm(x, w(NORM, (self.hidden,)), eps=eps, name=f"{tag}.engram_in")
        gate = b.matmul(normed, w(GATE_PROJ, (self.hidden, self.hidden)), name=f"{tag}.engram_gate")
        added = b.gated_activation(gate, value, activation="silu", name=f"{tag}.engram_sum")
        return b.add(x, added, name=f"{tag}.x_engram")


def generated_tensors(options: EngramOptions, hidden: int) -> dict[str, np.ndarray]:
    """The table (resource TABLE_RESOURCE) and the layer's weights (by tensor name), float32, from the seed."""
    rng = np.random.default_rng([options.seed, 1])
    span = len(options.orders) * options.width
    return {
        TABLE_RESOURCE: (rng.standard_normal((options.rows, options.width)) * options.scale).astype(np.float32),
        VALUE_PROJ: (rng.standard_normal((hidden, span)) / np.sqrt(span)).astype(np.float32),
        GATE_PROJ: (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
        NORM: (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32),
    }


def tensor_bytes(values: np.ndarray, dtype: str) -> bytes:
    """Little-endian bytes of `values` in the core's weight dtype ("fp32" or "bf16")."""
    if dtype == "bf16":
        return float32_to_bf16_bits(values).astype("<u2").tobytes()
    return np.ascontiguousarray(values, dtype="<f4").tobytes()
