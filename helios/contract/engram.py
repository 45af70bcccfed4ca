"""The rejection rules of Engram table declarations (host side; docs/engram.md).

A `ModelContract.engram_tables` entry declares a hashed n-gram embedding table kept in host memory,
the two device staging frames it feeds and the per-token row index the consuming programs read.
`engram_problems(contract)` yields one `InvalidEngramTable` per violated rule, with its field path.
"""

from __future__ import annotations

from collections.abc import Iterator

import helios.contract.errors as e
from helios.contract.enums import BufferRole, DType, Operation
from helios.contract.model import EngramTable
from helios.contract.translated import TranslatedContract

# Operations whose packed tokens the host knows before the round runs, so it can hash their n-grams.
# A SPECULATIVE program drafts its rows on the device: no host gatherer could address them.
ENGRAM_OPERATIONS = (Operation.PREFILL, Operation.SCORED_PREFILL, Operation.DECODE, Operation.MIXED)
ENGRAM_DTYPES = (DType.F32, DType.BF16)
STAGING_FRAMES = 2  # the specification's two host staging frames per table
FIRST_VERSION = 3  # contract version that may declare Engram tables


def engram_problems(c: TranslatedContract) -> Iterator[e.ContractError]:
    if c.engram_tables and c.version < FIRST_VERSION:
        yield e.FieldNotInVersion("model.engram_tables", f"contract version {c.version} has no Engram tables "
                                  f"(version {FIRST_VERSION} does)")
        return
    names: set[str] = set()
    claimed: set[str] = set()  # staging and row-index buffers of the tables checked so far
    for i, t in enumerate(c.engram_tables):
        yield from _table(c, f"model.engram_tables[{i}]", t, names, claimed)
        names.add(t.name)


def _table(c: TranslatedContract, path: str, t: EngramTable, names: set[str],
           claimed: set[str]) -> Iterator[e.ContractError]:
    def bad(field: str, message: str) -> e.ContractError:
        return e.InvalidEngramTable(f"{path}.{field}", f"Engram table {t.name!r}: {message}")

    graphs = {g.name: g for g in c.graphs}
    bound = {b.destination for g in c.graphs for b in g.value_bindings}
    if not t.name or t.name in names:
        yield bad("name", "the name is empty or declared twice")
    if not t.resource:
        yield bad("resource", "names no WEIGHT resource")
    if t.rows < 1 or t.width < 1:
        yield bad("rows", f"rows = {t.rows} and width = {t.width} must both be >= 1")
    if not t.orders or any(n < 1 for n in t.orders) or list(t.orders) != sorted(set(t.orders)):
        yield bad("orders", f"orders {list(t.orders)} must be distinct, ascending and >= 1")
        return
    if len(t.multipliers) != sum(t.orders) or any(m % 2 == 0 for m in t.multipliers):
        yield bad("multipliers", f"{len(t.multipliers)} multipliers; the orders {list(t.orders)} need "
                  f"{sum(t.orders)}, each odd")
    staging = c.manifest.buffer(t.staging)
    row_index = c.manifest.buffer(t.row_index)
    for field, name in (("staging", t.staging), ("row_index", t.row_index)):
        if name in claimed or name in bound or t.staging == t.row_index:
            yield bad(field, f"buffer {name!r} is also written by a value binding or another table")
        claimed.add(name)
    if staging is None or staging.role != BufferRole.TRANSPORT or staging.dtype not in ENGRAM_DTYPES \
            or len(staging.shape) != 3 or staging.shape[0] != STAGING_FRAMES or staging.shape[2] != t.width \
            or staging.per_frame:
        yield bad("staging", f"{t.staging!r} must be a TRANSPORT buffer of F32 or BF16 [2, S, {t.width}] "
                  "(its two frames), not per_frame")
        return
    orders = len(t.orders)
    if row_index is None or row_index.role != BufferRole.TRANSPORT or row_index.dtype != DType.I32 \
            or len(row_index.shape) != 2 or row_index.shape[1] != orders or row_index.per_frame:
        yield bad("row_index", f"{t.row_index!r} must be a TRANSPORT buffer of I32 [R, {orders}], not per_frame")
        return
    if not t.graphs:
        yield bad("graphs", "names no consuming graph")
    for j, name in enumerate(t.graphs):
        g = graphs.get(name)
        where = f"graphs[{j}]"
        if g is None:
            yield bad(where, f"graph {name!r} is not declared")
            continue
        if g.operation not in ENGRAM_OPERATIONS:
            yield bad(where, f"graph {name!r} is {getattr(g.operation, 'name', g.operation)}; only PREFILL, "
                      "SCORED_PREFILL, DECODE and MIXED rounds have packed tokens the host knows")
            continue
        p = g.packed_token_capacity
        if row_index.shape[0] < p or staging.shape[1] < p * orders:
            yield bad(where, f"graph {name!r} packs {p} tokens: the row index needs {p} rows (has "
                      f"{row_index.shape[0]}) and each staging frame {p * orders} (has {staging.shape[1]})")
        if t.resource not in g.resource_dependencies:
            yield bad(where, f"graph {name!r} does not list the table's resource {t.resource!r} among its "
                      "resource dependencies")
