"""Level 1, operators (device side: imports torch): every operator, reference against production.

For each operator of the registry (and each fusion production performs: add+rms_norm,
rotary+paged_cache_write, and a layer's attention prologue as one launch, with and without q/k head
norms) and each cohort of `cases/operators.json`, one small program is built with
the program builder over fresh random inputs, then executed twice: by the reference interpreter
(NumPy) and by the production lowering (Triton kernels and torch; under `TRITON_INTERPRET=1` on a
CPU). Every output is compared: integers exactly, floats within the dtype's tolerance
(`conformance.tolerance`). Cohorts are ragged (lanes with different histories and query lengths,
padding rows), cross page boundaries and run attention with and without a sliding window.

The first mismatching element of a case is its divergence: field `OUTPUT[index]`, lane = the row.

The product fusions (`PRODUCT_FUSIONS`: q/k/v as one multi-output launch, gate/up with the activation,
either with the residual add and RMS norm in its prologue, and either past the Triton products' rows
with its torch products on side streams) have cases too: production takes them where the Triton
products (or the streams) are chosen (timed on a GPU; the norm prologue on CUDA-core tiles, one row
of 16-bit operands), and runs them unfused on torch elsewhere. With `gpu_paths` (`helios conform --gpu-paths`) every case is
lowered in the GPU-paths mode (helios/production/gpu_paths.py: Triton products at small tiles, several
programs of several rows, attention split along the context with the combine pass, blocked
vocabulary scans), and attention also runs over a cohort whose contexts reach past one split
(`split_cohort`), so every split carries keys.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from conformance.report import CaseResult, Divergence, LevelResult
from conformance.tolerance import first_mismatch, tolerance
from helios.program import OPERATORS
from helios.program.builder import ProgramBuilder
from helios.program.speculative import PROPOSAL_DRAW
from helios.program.types import DTYPES_BY_NAME
from helios.program.validate import validate_program
from helios.reference import sampling
from helios.reference.interpreter import execute, round_to_dtype
from helios.reference.operators import sample

QK_PROLOGUE = "head_rms_norm+rotary & head_rms_norm+rotary+paged_cache_write*2"  # Qwen3-style layer
PLAIN_PROLOGUE = "rotary & rotary+paged_cache_write*2"  # without head norms
MOVES = "copy+fill*5"  # a completion record's copies and fills, one launch (a GPU's, or the GPU-paths mode's)
FUSIONS = ("add+rms_norm", "rotary+paged_cache_write", QK_PROLOGUE, PLAIN_PROLOGUE, MOVES)
# taken only on the Triton products (a GPU's timed choice, or the GPU-paths mode); torch runs them unfused
NORM_QKV, NORM_GATE_UP = "add+rms_norm+matmul*3", "rms_norm+gate_up+activation"  # the norm in the prologue
# the same groups past the Triton products' rows, their torch products side by side on streams where timed faster
STREAM_QKV, STREAM_GATE_UP = "streams:matmul*3", "streams:gate_up+activation"
PRODUCT_FUSIONS = ("matmul*3", "gate_up+activation", NORM_QKV, NORM_GATE_UP, STREAM_QKV, STREAM_GATE_UP)
INTEGER = ("i32", "i64")
# operators whose inputs do not take the case's dtype: run in the f32 pass only
F32_ONLY = ("argmax", "sample", "fill", "token_probability", "speculative_allocate", "speculative_pack",
            "speculative_verify", "speculative_commit", "copied_proposal", "speculative_grammar_mask",
            "prompt_scores")


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    history: tuple[int, ...]  # committed tokens per lane
    queries: tuple[int, ...]  # new rows per lane
    padding: int  # rows of no lane

    def __post_init__(self) -> None:
        if len(self.history) != len(self.queries) or not self.history:
            raise ValueError(f"cohort {self.name}: history and queries need one entry per lane")


@dataclass(frozen=True, slots=True)
class OperatorCases:
    seed: int
    geometry: dict
    cohorts: tuple[Cohort, ...]
    windows: tuple[int | None, ...]
    softcap: float

    @classmethod
    def from_json(cls, data: dict) -> OperatorCases:
        cohorts = tuple(Cohort(c["name"], tuple(c["history"]), tuple(c["queries"]), int(c.get("padding", 0)))
                        for c in data["cohorts"])
        return cls(int(data["seed"]), dict(data["geometry"]), cohorts, tuple(data.get("windows", [None])),
                   float(data.get("softcap", 30.0)))


@dataclass(slots=True)
class OperatorProgram:
    """One case under construction: named inputs (NumPy values, dtype names) and compared outputs."""

    dtype: str
    builder: ProgramBuilder
    values: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    # per output: the absolute slack of an intermediate a fusion may keep unrounded, from the
    # reference's values and the dtype's unit roundoff (`conformance.tolerance`)
    slack: dict[str, Callable[[Mapping[str, np.ndarray], float], np.ndarray]] = field(default_factory=dict)

    def input(self, name: str, value: np.ndarray, dtype: str | None = None) -> str:
        dtype = dtype or self.dtype
        value = np.ascontiguousarray(round_to_dtype(value, DTYPES_BY_NAME[dtype]))
        self.builder.state(name, buffer=name, dtype=dtype, shape=list(value.shape))
        self.values[name] = value
        return name

    def output(self, name: str, shape: Sequence[int], dtype: str | None = None) -> str:
        dtype = dtype or self.dtype
        self.input(name, np.zeros(shape, np.float32 if dtype not in INTEGER else np.int64), dtype)
        self.outputs.append(name)
        return name

    def allow(self, output: str, slack: Callable[[Mapping[str, np.ndarray], float], np.ndarray]) -> None:
        """`output` may differ from the unfused chain by `slack(reference values, unit roundoff)` more
        than its own rounding: a fusion it reaches keeps an intermediate in FP32."""
        self.slack[output] = slack


def _rows(cohort: Cohort) -> tuple[np.ndarray, np.ndarray]:
    lanes, positions = [], []
    for lane, (history, queries) in enumerate(zip(cohort.history, cohort.queries, strict=True)):
        lanes += [lane] * queries
        positions += list(range(history, history + queries))
    return (np.array(lanes + [-1] * cohort.padding, np.int32),
            np.array(positions + [0] * cohort.padding, np.int32))


def _page_table(rng: np.random.Generator, lanes: int, max_pages: int) -> tuple[np.ndarray, int]:
    pages = lanes * max_pages + 2
    return rng.permutation(pages)[: lanes * max_pages].reshape(lanes, max_pages).astype(np.int32), pages


Builder = Callable[[OperatorProgram, np.random.Generator, Cohort, dict, "OperatorCases"], None]


def _normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def split_cohort(cases: OperatorCases, keys: int) -> Cohort | None:
    """A cohort whose first lane's context reaches past `keys` keys (one attention split of the GPU-paths
    mode), within the cases' page tables; None when the geometry is too short for one."""
    top = int(cases.geometry["max_pages"]) * int(cases.geometry["page_tokens"])
    if top - 3 <= keys:
        return None
    return Cohort("split_context", (top - 3, keys // 2, 0), (3, 2, 1), 1)


def case_builders(cases: OperatorCases, *, gpu_paths: bool = False) -> Iterator[tuple[str, str, Cohort, Builder]]:
    """(operator or fusion, variant, cohort, builder) for every case (`gpu_paths`: and the attention
    cases over `split_cohort`)."""
    first = cases.cohorts[0]
    for cohort in cases.cohorts:
        yield "embedding", cohort.name, cohort, _embedding
        yield "rms_norm", cohort.name, cohort, _rms_norm
        yield "layer_norm", cohort.name, cohort, _layer_norm
        yield "head_rms_norm", cohort.name, cohort, _head_rms_norm
        yield "matmul", cohort.name, cohort, _matmul
        yield "add", cohort.name, cohort, _binary("add")
        yield "mul", cohort.name, cohort, _binary("mul")
        yield "copy", cohort.name, cohort, _copy
        yield "gather", cohort.name, cohort, _gather
        yield "where", cohort.name, cohort, _where
        yield "rotary", cohort.name, cohort, _rotary
        yield "paged_cache_write", cohort.name, cohort, _cache_write
        yield "last_row_gather", cohort.name, cohort, _last_row_gather
        yield "add+rms_norm", cohort.name, cohort, _add_rms_norm
        yield "rotary+paged_cache_write", cohort.name, cohort, _rotary_cache
        yield QK_PROLOGUE, cohort.name, cohort, _prologue(head_norms=True)
        yield PLAIN_PROLOGUE, cohort.name, cohort, _prologue(head_norms=False)
        yield "matmul*3", cohort.name, cohort, _qkv
        yield NORM_QKV, cohort.name, cohort, _norm_qkv(None)
        for window in cases.windows:
            suffix = "full" if window is None else f"window{window}"
            yield "paged_attention", f"{cohort.name}/{suffix}", cohort, _attention(window, None)
    yield "paged_attention", f"{first.name}/softcap", first, _attention(None, cases.softcap)
    split = None
    if gpu_paths:
        from helios.production.gpu_paths import GpuPaths

        split = split_cohort(cases, GpuPaths().attention_keys)
    if split is not None:
        for window in cases.windows:
            suffix = "full" if window is None else f"window{window}"
            yield "paged_attention", f"{split.name}/{suffix}", split, _attention(window, None)
        yield "paged_attention", f"{split.name}/softcap", split, _attention(None, cases.softcap)
        yield "latent_attention", split.name, split, _latent_attention
    # one row, a batch-1 decode step's: the products' CUDA-core tile, where the norm joins them
    yield NORM_QKV, "one_row", first, _norm_qkv(1)
    # more rows than the Triton products take: the groups' torch products on side streams
    yield STREAM_QKV, "past_the_tiles", first, _qkv_past_the_tiles
    for activation in ("silu", "gelu_tanh", "gelu"):
        yield "gated_activation", activation, first, _gated(activation)
        yield "gate_up+activation", activation, first, _gate_up(activation)
        yield NORM_GATE_UP, f"{activation}/one_row", first, _norm_gate_up(activation)
    yield STREAM_GATE_UP, "silu/past_the_tiles", first, _gate_up("silu", past_the_tiles=True)
    yield "logits", "plain", first, _logits(None)
    yield "logits", "softcap", first, _logits(cases.softcap)
    yield "argmax", "rows", first, _argmax
    yield "sample", "filters", first, _sample
    yield "scatter", "rows", first, _scatter
    yield "column_write", "columns", first, _column_write
    yield "token_probability", "filters", first, _token_probability
    yield "speculative_allocate", "ties", first, _speculative_allocate
    yield "speculative_pack", "lanes", first, _speculative_pack
    yield "speculative_verify", "greedy_and_sampled", first, _speculative_verify
    yield "speculative_commit", "lanes", first, _speculative_commit
    yield "copied_proposal", "runs", first, _copied_proposal
    yield "speculative_grammar_mask", "positions", first, _speculative_grammar_mask
    yield "embedding", "row_offset", first, _embedding_slice
    yield "all_reduce", "one_rank", first, _one_rank("all_reduce")
    yield "all_gather", "one_rank", first, _one_rank("all_gather")
    yield "prompt_scores", "rows", first, _prompt_scores
    for cohort in cases.cohorts:
        yield "page_snapshot", cohort.name, cohort, _page_copy("page_snapshot")
        yield "page_restore", cohort.name, cohort, _page_copy("page_restore")
        yield "short_convolution", cohort.name, cohort, _short_convolution(bias=True)
    yield "short_convolution", f"{first.name}/no_bias", first, _short_convolution(bias=False)
    yield "state_row_copy", "rows", first, _state_row_copy
    for activation in ("silu", "gelu", "gelu_tanh", "quick_gelu"):
        yield "activation", activation, first, _plain_activation(activation)
    yield "bidirectional_attention", "groups", first, _bidirectional_attention(grouped=False)
    yield "bidirectional_attention", "groups/gqa", first, _bidirectional_attention(grouped=True)
    for cohort in cases.cohorts:
        yield "latent_attention", cohort.name, cohort, _latent_attention
    yield "head_matmul", "heads", first, _head_matmul
    for cohort in cases.cohorts:
        yield "engram_gather", cohort.name, cohort, _engram_gather
    yield "fill", "f32", first, _fill
    yield MOVES, "completion", first, _moves


def _embedding(p, rng, cohort, g, cases):
    lanes, _ = _rows(cohort)
    ids = rng.integers(0, g["vocab"], size=lanes.shape[0]).astype(np.int32)
    ids[lanes < 0] = -1
    out = p.output("out", (ids.shape[0], g["hidden"]))
    p.builder.embedding(p.input("ids", ids, "i32"), p.input("table", _normal(rng, g["vocab"], g["hidden"])), into=out)


def _embedding_slice(p, rng, cohort, g, cases):
    """A tensor-parallel rank's vocabulary slice: ids of the whole vocabulary, the table's rows those
    from `row_offset` on (ids of other slices and padding read zero rows)."""
    lanes, _ = _rows(cohort)
    ids = rng.integers(0, g["vocab"], size=lanes.shape[0]).astype(np.int32)
    ids[lanes < 0] = -1
    offset, rows = g["vocab"] // 4, g["vocab"] // 2
    out = p.output("out", (ids.shape[0], g["hidden"]))
    p.builder.embedding(p.input("ids", ids, "i32"), p.input("table", _normal(rng, rows, g["hidden"])),
                        row_offset=offset, into=out)


def _one_rank(op):
    """A collective over one rank (its input): what a program of a one-rank core may hold; the
    collectives over several ranks are compared by the lockstep tests of the reference."""
    def case(p, rng, cohort, g, cases):
        rows = len(_rows(cohort)[0])
        out = p.output("out", (rows, g["hidden"]))
        getattr(p.builder, op)(p.input("x", _normal(rng, rows, g["hidden"])), ranks=1, into=out)
    return case


def _rms_norm(p, rng, cohort, g, cases):
    rows = len(_rows(cohort)[0])
    out = p.output("out", (rows, g["hidden"]))
    p.builder.rms_norm(p.input("x", _normal(rng, rows, g["hidden"], scale=3.0)),
                       p.input("w", _normal(rng, g["hidden"])), eps=1e-5, weight_offset=0.5, into=out)


def _layer_norm(p, rng, cohort, g, cases):
    rows = len(_rows(cohort)[0])
    out = p.output("out", (rows, g["hidden"]))
    p.builder.layer_norm(p.input("x", _normal(rng, rows, g["hidden"]) + 2.0), p.input("w", _normal(rng, g["hidden"])),
                         p.input("b", _normal(rng, g["hidden"])), eps=1e-5, into=out)


def _head_rms_norm(p, rng, cohort, g, cases):
    rows, width = len(_rows(cohort)[0]), g["heads"] * g["head_dim"]
    out = p.output("out", (rows, width))
    p.builder.head_rms_norm(p.input("x", _normal(rng, rows, width)), p.input("w", _normal(rng, g["head_dim"])),
                            eps=1e-6, head_dim=g["head_dim"], into=out)


def _matmul(p, rng, cohort, g, cases):
    rows = len(_rows(cohort)[0])
    out = p.output("out", (rows, g["ffn"]))
    p.builder.matmul(p.input("x", _normal(rng, rows, g["hidden"])), p.input("w", _normal(rng, g["ffn"], g["hidden"])),
                     p.input("bias", _normal(rng, g["ffn"])), into=out)


def _binary(op: str) -> Builder:
    def build(p, rng, cohort, g, cases):
        rows = len(_rows(cohort)[0])
        out = p.output("out", (rows, g["hidden"]))
        getattr(p.builder, op)(p.input("a", _normal(rng, rows, g["hidden"])),
                               p.input("b", _normal(rng, rows, g["hidden"])), into=out)
    return build


def _copy(p, rng, cohort, g, cases):
    rows = len(_rows(cohort)[0])
    out = p.output("out", (rows, g["hidden"]))
    p.builder.copy(p.input("x", _normal(rng, rows, g["hidden"])), into=out)


def _gather(p, rng, cohort, g, cases):
    """Each packed row picks its lane's row of x (padding rows, lane -1, read a zero row); and the
    integer case the recipe uses: a lane's pending token out of a [slots] i32 row."""
    lanes, _ = _rows(cohort)
    slots = len(cohort.history) + 1
    out = p.output("out", (len(lanes), g["hidden"]))
    p.builder.gather(p.input("x", _normal(rng, slots, g["hidden"])), p.input("index", lanes, "i32"), into=out)
    tokens = p.output("tokens", (len(lanes),), "i32")
    p.builder.gather(p.input("pending", rng.integers(0, g["vocab"], size=slots).astype(np.int32), "i32"),
                     p.input("lane", lanes, "i32"), into=tokens)


def _where(p, rng, cohort, g, cases):
    """Floats elementwise, and the pending-token update in place (a STATE row kept where cond is 0)."""
    rows = len(_rows(cohort)[0])
    cond = rng.integers(-1, 2, size=(rows, g["hidden"])).astype(np.int32)
    out = p.output("out", (rows, g["hidden"]))
    p.builder.where(p.input("cond", cond, "i32"), p.input("a", _normal(rng, rows, g["hidden"])),
                    p.input("b", _normal(rng, rows, g["hidden"])), into=out)
    slots = len(cohort.history) + 1
    state = p.input("pending", rng.integers(0, g["vocab"], size=slots).astype(np.int32), "i32")
    p.outputs.append(state)
    p.builder.where(p.input("decision", rng.integers(0, 2, size=slots).astype(np.int32), "i32"),
                    p.input("sampled", rng.integers(0, g["vocab"], size=slots).astype(np.int32), "i32"), state,
                    into=state)


def _rope(g: dict) -> dict:
    return dict(theta=500000.0, head_dim=g["head_dim"], rope_type="frequency_band", factor=8.0,
                low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)


def _rotary(p, rng, cohort, g, cases):
    _, positions = _rows(cohort)
    width = g["heads"] * g["head_dim"]
    out = p.output("out", (len(positions), width))
    p.builder.rotary(p.input("x", _normal(rng, len(positions), width)), p.input("positions", positions, "i32"),
                     rotary_dim=g["head_dim"] // 2, into=out, **_rope(g))


def _cache(p, rng, g, lanes: int, name: str, random: bool) -> tuple[str, str]:
    table, pages = _page_table(rng, lanes, g["max_pages"])
    shape = (pages, g["page_tokens"], g["kv_heads"], g["head_dim"])
    cache = _normal(rng, *shape) if random else np.zeros(shape, np.float32)
    return p.input(name, cache), p.input("page_table", table, "i32")


def _cache_write(p, rng, cohort, g, cases):
    lanes, positions = _rows(cohort)
    cache, table = _cache(p, rng, g, len(cohort.history), "cache", random=True)
    p.outputs.append(cache)
    values = p.input("values", _normal(rng, len(lanes), g["kv_heads"] * g["head_dim"]))
    p.builder.paged_cache_write(cache, values, p.input("token_lane", lanes, "i32"),
                                p.input("positions", positions, "i32"), table)


def _rotary_cache(p, rng, cohort, g, cases):
    lanes, positions = _rows(cohort)
    cache, table = _cache(p, rng, g, len(cohort.history), "cache", random=True)
    p.outputs.append(cache)
    pos = p.input("positions", positions, "i32")
    x = p.input("x", _normal(rng, len(lanes), g["kv_heads"] * g["head_dim"]))
    rotated = p.builder.rotary(x, pos, name="rotated", **_rope(g))
    p.builder.paged_cache_write(cache, rotated, p.input("token_lane", lanes, "i32"), pos, table)


def _prologue(*, head_norms: bool) -> Builder:
    """q and k (optionally head-normed) rotated, k and v written to their cache planes: one launch."""
    def build(p, rng, cohort, g, cases):
        lanes, positions = _rows(cohort)
        rows, head_dim = len(lanes), g["head_dim"]
        key_cache, table = _cache(p, rng, g, len(cohort.history), "key_cache", random=True)
        value_cache = p.input("value_cache", _normal(rng, *p.values[key_cache].shape))
        p.outputs += [key_cache, value_cache]
        pos = p.input("positions", positions, "i32")
        q = p.input("q", _normal(rng, rows, g["heads"] * head_dim))
        k = p.input("k", _normal(rng, rows, g["kv_heads"] * head_dim))
        v = p.input("v", _normal(rng, rows, g["kv_heads"] * head_dim))
        if head_norms:
            q = p.builder.head_rms_norm(q, p.input("q_norm", _normal(rng, head_dim)), eps=1e-6, head_dim=head_dim,
                                        name="q_normed")
            k = p.builder.head_rms_norm(k, p.input("k_norm", _normal(rng, head_dim)), eps=1e-6, head_dim=head_dim,
                                        name="k_normed")
        q_rot = p.output("q_rot", (rows, g["heads"] * head_dim))
        p.builder.rotary(q, pos, into=q_rot, **_rope(g))
        k_rot = p.builder.rotary(k, pos, name="k_rot", **_rope(g))
        lane = p.input("token_lane", lanes, "i32")
        p.builder.paged_cache_write(key_cache, k_rot, lane, pos, table)
        p.builder.paged_cache_write(value_cache, v, lane, pos, table)
    return build


def _rows_past_the_tiles() -> int:
    """Rows of a product group past what the Triton products take (kernels/linear.py MAX_ROWS), where
    production runs its torch products on side streams (on a GPU where timed faster, in the GPU-paths
    mode always: one after another on a CPU)."""
    from helios.production.kernels.linear import MAX_ROWS

    return MAX_ROWS + 3


def _qkv_past_the_tiles(p, rng, cohort, g, cases):
    _qkv(p, rng, cohort, g, cases, rows=_rows_past_the_tiles())


def _qkv(p, rng, cohort, g, cases, rows: int | None = None):
    """Three matmuls of one input with biases into scratch (q, k, v), copied out: one launch of three
    groups on the Triton products (`rows`: that many, else the cohort's)."""
    rows, hidden = rows or len(_rows(cohort)[0]), g["hidden"]
    x = p.input("x", _normal(rng, rows, hidden))
    widths = {"q": g["heads"] * g["head_dim"], "k": g["kv_heads"] * g["head_dim"], "v": g["kv_heads"] * g["head_dim"]}
    products = [p.builder.matmul(x, p.input(f"w{n}", _normal(rng, width, hidden)),
                                 p.input(f"b{n}", _normal(rng, width)), name=n) for n, width in widths.items()]
    for n, product in zip(widths, products, strict=True):
        p.builder.copy(product, into=p.output(f"{n}_out", (rows, widths[n])))


def _gate_up(activation: str, *, past_the_tiles: bool = False) -> Builder:
    """gate and up matmuls into scratch read by the activation alone: one gated launch on the Triton
    products (`past_the_tiles`: more rows than they take, the products side by side on streams)."""
    def build(p, rng, cohort, g, cases):
        rows, hidden = _rows_past_the_tiles() if past_the_tiles else len(_rows(cohort)[0]), g["hidden"]
        x = p.input("x", _normal(rng, rows, hidden))
        scale = 2.0 / math.sqrt(hidden)  # gate and up of order 1: act(gate) * up not a cancellation
        gate = p.builder.matmul(x, p.input("w_gate", _normal(rng, g["ffn"], hidden, scale=scale)), name="gate")
        up = p.builder.matmul(x, p.input("w_up", _normal(rng, g["ffn"], hidden, scale=scale)), name="up")
        p.builder.gated_activation(gate, up, activation=activation, into=p.output("out", (rows, g["ffn"])))
    return build


def _norm_qkv(rows: int | None) -> Builder:
    """add (the sum an output), rms_norm into scratch, and q/k/v matmuls with biases of the normalized
    rows, copied out (`rows`: that many, else the cohort's): where the Triton products take the q/k/v
    group on a CUDA-core tile, one launch with the add and the norm in its prologue."""
    def build(p, rng, cohort, g, cases):
        n, hidden = rows or len(_rows(cohort)[0]), g["hidden"]
        total = p.output("total", (n, hidden))
        p.builder.add(p.input("a", _normal(rng, n, hidden)), p.input("b", _normal(rng, n, hidden)), into=total)
        normed = p.builder.rms_norm(total, p.input("w", _normal(rng, hidden)), eps=1e-5, name="normed")
        widths = {"q": g["heads"] * g["head_dim"], "k": g["kv_heads"] * g["head_dim"],
                  "v": g["kv_heads"] * g["head_dim"]}
        products = [p.builder.matmul(normed, p.input(f"w{k}", _normal(rng, width, hidden)),
                                     p.input(f"b{k}", _normal(rng, width)), name=k) for k, width in widths.items()]
        for k, product in zip(widths, products, strict=True):
            p.builder.copy(product, into=p.output(f"{k}_out", (n, widths[k])))
            p.allow(f"{k}_out", functools.partial(_unrounded_rows, "normed", f"w{k}"))
    return build


def _unrounded_rows(rows: str, weight: str, env: Mapping[str, np.ndarray], u: float) -> np.ndarray:
    """The slack of `rows @ weight^T` where the rows stay unrounded: each of the sum's inputs moved by
    at most u of itself, u |rows| @ |weight|^T."""
    return u * (np.abs(env[rows].astype(np.float64)) @ np.abs(env[weight].astype(np.float64)).T)


# the largest |activation'(x)| of silu, gelu and gelu_tanh (gelu's, about 1.1289), rounded up
ACTIVATION_SLOPE = 1.13


def _unrounded_gated(env: Mapping[str, np.ndarray], u: float) -> np.ndarray:
    """The slack of act(gate) * up where both products read unrounded normalized rows: to first
    order |act'(gate)| |up| s_gate + |act(gate)| s_up, with |act(g)| <= |g| for silu and gelu."""
    s_gate, s_up = _unrounded_rows("normed", "w_gate", env, u), _unrounded_rows("normed", "w_up", env, u)
    gate, up = np.abs(env["gate"].astype(np.float64)), np.abs(env["up"].astype(np.float64))
    return ACTIVATION_SLOPE * up * s_gate + gate * s_up + ACTIVATION_SLOPE * s_gate * s_up


def _norm_gate_up(activation: str) -> Builder:
    """rms_norm (weight offset 1, as Gemma stores its norms) of one row into scratch read by the gate
    and up matmuls alone, then the activation: one gated launch with the norm in its prologue."""
    def build(p, rng, cohort, g, cases):
        hidden = g["hidden"]
        normed = p.builder.rms_norm(p.input("x", _normal(rng, 1, hidden)), p.input("w", _normal(rng, hidden, scale=0.2)),
                                    eps=1e-6, weight_offset=1.0, name="normed")
        scale = 2.0 / math.sqrt(hidden)
        gate = p.builder.matmul(normed, p.input("w_gate", _normal(rng, g["ffn"], hidden, scale=scale)), name="gate")
        up = p.builder.matmul(normed, p.input("w_up", _normal(rng, g["ffn"], hidden, scale=scale)), name="up")
        p.builder.gated_activation(gate, up, activation=activation, into=p.output("out", (1, g["ffn"])))
        p.allow("out", _unrounded_gated)
    return build


def _add_rms_norm(p, rng, cohort, g, cases):
    rows = len(_rows(cohort)[0])
    total = p.output("total", (rows, g["hidden"]))
    out = p.output("out", (rows, g["hidden"]))
    p.builder.add(p.input("a", _normal(rng, rows, g["hidden"])), p.input("b", _normal(rng, rows, g["hidden"])),
                  into=total)
    p.builder.rms_norm(total, p.input("w", _normal(rng, g["hidden"])), eps=1e-5, into=out)


def _attention(window: int | None, softcap: float | None) -> Builder:
    def build(p, rng, cohort, g, cases):
        lanes, positions = _rows(cohort)
        key, table = _cache(p, rng, g, len(cohort.history), "key_cache", random=True)
        value = p.input("value_cache", _normal(rng, *p.values[key].shape))
        width = g["heads"] * g["head_dim"]
        out = p.output("out", (len(lanes), width))
        p.builder.paged_attention(p.input("q", _normal(rng, len(lanes), width)), key, value,
                                  p.input("token_lane", lanes, "i32"), p.input("positions", positions, "i32"), table,
                                  scale=1.0 / math.sqrt(g["head_dim"]), sliding_window=window, softcap=softcap,
                                  into=out)
    return build


def _last_row_gather(p, rng, cohort, g, cases):
    lanes, _ = _rows(cohort)
    count = len(cohort.history) + 1  # one lane without rows: a zero row
    out = p.output("out", (count, g["hidden"]))
    p.builder.last_row_gather(p.input("x", _normal(rng, len(lanes), g["hidden"])), p.input("token_lane", lanes, "i32"),
                              lanes=count, into=out)


def _gated(activation: str) -> Builder:
    def build(p, rng, cohort, g, cases):
        out = p.output("out", (7, g["ffn"]))
        p.builder.gated_activation(p.input("gate", _normal(rng, 7, g["ffn"], scale=3.0)),
                                   p.input("up", _normal(rng, 7, g["ffn"])), activation=activation, into=out)
    return build


def _logits(softcap: float | None) -> Builder:
    def build(p, rng, cohort, g, cases):
        out = p.output("out", (4, g["vocab"]), "f32")
        p.builder.logits(p.input("h", _normal(rng, 4, g["hidden"])), p.input("w", _normal(rng, g["vocab"], g["hidden"])),
                         sampled_tokens=g["sampled_tokens"], softcap=softcap, into=out)
    return build


def _argmax(p, rng, cohort, g, cases):
    logits = _normal(rng, 5, g["vocab"], scale=4.0)
    logits[1, 7] = logits[1, 9] = logits[1].max() + 1.0  # a tie: the lowest index wins
    out = p.output("ids", (5,), "i32")
    p.builder.argmax(p.input("logits", logits, "f32"), into=out)


def _sample(p, rng, cohort, g, cases):
    rows, vocab = 5, g["vocab"]
    logits = _normal(rng, rows, vocab, scale=3.0)
    logits[:, g["sampled_tokens"]:] = -np.inf
    # temperature, top_p, top_k, min_p, repetition, presence, frequency
    parameters = np.array([[0.0, 1.0, 0, 0.0, 1.0, 0.0, 0.0],
                           [0.8, 1.0, 20, 0.0, 1.0, 0.0, 0.0],
                           [1.0, 0.9, 0, 0.05, 1.2, 0.5, 0.0],
                           [0.7, 1.0, 0, 0.0, 1.0, 0.0, 0.3],
                           [1.3, 0.95, 40, 0.02, 1.1, -0.5, 0.2]], np.float32)
    mask = np.full((rows, -(-vocab // 32)), -1, np.int64)
    mask[3, :4] = rng.integers(0, 2**32, size=4)  # a grammar mask allowing some of the first 128 ids
    mask[3, 4:] = 0
    mask = mask.astype(np.uint32).view(np.int32)
    out = p.output("ids", (rows,), "i32")
    p.builder.sample(p.input("logits", logits, "f32"),
                     p.input("seed", rng.integers(-2**62, 2**62, size=rows).astype(np.int64), "i64"),
                     p.input("positions", rng.integers(0, 4000, size=rows).astype(np.int32), "i32"),
                     p.input("parameters", parameters, "f32"),
                     p.input("histogram", rng.integers(0, 3, size=(rows, vocab)).astype(np.int32), "i32"),
                     p.input("grammar_mask", mask, "i32"), into=out)


def _scatter(p, rng, cohort, g, cases):
    """Per-lane rows into their physical rows (padding lanes, -1, and an index past the rows skipped),
    and the integer case a speculative program uses: each lane's pending token into its slot."""
    slots = len(cohort.history) + 2
    index = rng.permutation(slots).astype(np.int32)
    index[1], index[3] = -1, slots  # skipped: the other rows of out keep their values
    out = p.input("out", _normal(rng, slots, g["hidden"]))
    p.outputs.append(out)
    p.builder.emit("scatter", [out, p.input("x", _normal(rng, slots, g["hidden"])), p.input("index", index, "i32")])
    pending = p.input("pending", rng.integers(0, g["vocab"], size=slots).astype(np.int32), "i32")
    p.outputs.append(pending)
    p.builder.emit("scatter", [pending, p.input("tokens", rng.integers(0, g["vocab"], size=slots).astype(np.int32),
                                                 "i32"), p.input("lane", index, "i32")])


def _page_copy(op: str) -> Builder:
    def build(p, rng, cohort, g, cases):
        """Each lane's page at its endpoint (the cohort's history, mid-page or on a boundary) to or from
        a distinct continuation row; a padding lane (slot -1), a lane without a row (-1), a row past the
        plane and an endpoint past the page table copy nothing, and every other row keeps its bytes."""
        lanes = len(cohort.history)
        cache, table = _cache(p, rng, g, lanes, "cache", random=True)
        rows = lanes + 3
        continuation = p.input("continuation", _normal(rng, rows, g["page_tokens"], g["kv_heads"], g["head_dim"]))
        slots = np.array(list(range(lanes)) + [-1, 0, 1, 0], np.int32)
        endpoint = np.array(list(cohort.history) + [0, 1, 2, g["page_tokens"] * g["max_pages"]], np.int32)
        row_index = np.array(list(rng.permutation(rows)[:lanes]) + [0, -1, rows, 1], np.int32)
        inputs = [p.input("lane_slot", slots, "i32"), p.input("endpoint", endpoint, "i32"),
                  p.input("rows", row_index, "i32")]
        if op == "page_snapshot":
            p.outputs.append(continuation)
            p.builder.page_snapshot(continuation, cache, table, *inputs)
        else:
            p.outputs.append(cache)
            p.builder.page_restore(cache, continuation, table, *inputs)
    return build


def _short_convolution(*, bias: bool) -> Builder:
    def build(p, rng, cohort, g, cases):
        """Each lane's rows convolved with its state row's inputs (a lane at position 0 ignores its
        row's bytes: nothing precedes it) and a random state; a slot without rows and the rows of no
        lane keep their state bytes, padding rows give 0."""
        lanes, positions = _rows(cohort)
        taps, channels = 4, g["hidden"]
        slots = len(cohort.history) + 1
        rows = slots + 2
        state = p.input("state", _normal(rng, rows, taps - 1, channels))
        p.outputs.append(state)
        out = p.output("out", (len(lanes), channels))
        inputs = [p.input("x", _normal(rng, len(lanes), channels)),
                  p.input("weight", _normal(rng, channels, 1, taps)), p.input("token_lane", lanes, "i32"),
                  p.input("positions", positions, "i32"),
                  p.input("state_rows", rng.permutation(rows)[:slots].astype(np.int32), "i32")]
        if bias:
            inputs.append(p.input("bias", _normal(rng, channels)))
        p.builder.emit("short_convolution", [state, *inputs], into=[state, out])
    return build


def _engram_gather(p, rng, cohort, g, cases):
    """Each packed token's rows of three n-gram orders from two staging frames: rows of both frames,
    -1 (an n-gram reaching before position 0, and every padding row) and a row past the frames read
    zero blocks; the row index has rows past the packed ones (a buffer of a larger capacity)."""
    lanes, positions = _rows(cohort)
    frames, rows, width, orders = 2, 3 * len(lanes), g["head_dim"], 3
    staging = p.input("staging", _normal(rng, frames, rows, width))
    index = rng.integers(0, frames * rows, size=(len(lanes) + 2, orders)).astype(np.int32)
    index[:len(lanes)][positions[:, None] < np.arange(orders)[None, :]] = -1  # order o + 1: o earlier tokens
    index[:len(lanes)][lanes < 0] = -1
    index[0, -1] = frames * rows  # outside the staging
    out = p.output("out", (len(lanes), orders * width))
    p.builder.engram_gather(staging, p.input("row_index", index, "i32"), packed_tokens=len(lanes), into=out)


def _state_row_copy(p, rng, cohort, g, cases):
    """Snapshot rows and restores in one call (every read before any write: a row both read and
    written keeps its value for its reader); -1 and rows past the state copy nothing."""
    state = p.input("state", _normal(rng, 8, 3, g["hidden"]))
    p.outputs.append(state)
    source = np.array([0, 5, 2, -1, 7, 9], np.int32)
    destination = np.array([4, 0, 6, 1, -1, 3], np.int32)
    p.builder.state_row_copy(state, p.input("source", source, "i32"), p.input("destination", destination, "i32"))
def _latent_attention(p, rng, cohort, g, cases):
    """Each lane's rows over its latent and rotary-key records (one record a position shared by every
    head; ragged lanes, rows crossing pages, padding rows give zeros)."""
    lanes, positions = _rows(cohort)
    heads, latent, rope = g["heads"], 2 * g["head_dim"], g["head_dim"] // 2
    table, pages = _page_table(rng, len(cohort.history), g["max_pages"])
    latent_cache = p.input("latent_cache", _normal(rng, pages, g["page_tokens"], 1, latent))
    rope_cache = p.input("rope_cache", _normal(rng, pages, g["page_tokens"], 1, rope))
    out = p.output("out", (len(lanes), heads * latent))
    p.builder.latent_attention(p.input("q_latent", _normal(rng, len(lanes), heads * latent)),
                               p.input("q_rope", _normal(rng, len(lanes), heads * rope)), latent_cache, rope_cache,
                               p.input("token_lane", lanes, "i32"), p.input("positions", positions, "i32"),
                               p.input("page_table", table, "i32"), scale=(latent + rope) ** -0.5, into=out)


def _head_matmul(p, rng, cohort, g, cases):
    """Per-head products of 7 rows: [7, heads * 16] by [heads, 12, 16] (a value block) and by
    [heads, 32, 16] (an absorbed key block)."""
    heads, width = g["heads"], g["head_dim"]
    x = p.input("x", _normal(rng, 7, heads * width))
    for name, out_width in (("values", 12), ("latent", 2 * width)):
        scale = 1.0 / math.sqrt(width)
        out = p.output(name, (7, heads * out_width))
        p.builder.head_matmul(x, p.input(f"w_{name}", _normal(rng, heads, out_width, width, scale=scale)), into=out)


def _plain_activation(activation: str) -> Builder:
    def build(p, rng, cohort, g, cases):
        out = p.output("out", (7, g["ffn"]))
        p.builder.activation(p.input("x", _normal(rng, 7, g["ffn"], scale=3.0)), activation=activation, into=out)
    return build


def _bidirectional_attention(*, grouped: bool) -> Builder:
    def build(p, rng, cohort, g, cases):
        """Three images of 5, 1 and 4 patches, interleaved with padding rows (group -1: zeros); each
        row attends its whole image, before and after it."""
        heads, head_dim = g["heads"], g["head_dim"]
        kv_heads = g["kv_heads"] if grouped else heads
        group = np.array([0, 0, 1, -1, 2, 0, 2, 0, 2, -1, 0, 2], np.int32)
        rows = group.shape[0]
        out = p.output("out", (rows, heads * head_dim))
        p.builder.bidirectional_attention(
            p.input("q", _normal(rng, rows, heads * head_dim)), p.input("k", _normal(rng, rows, kv_heads * head_dim)),
            p.input("v", _normal(rng, rows, kv_heads * head_dim)), p.input("group", group, "i32"),
            scale=head_dim ** -0.5, head_dim=head_dim, into=out)
    return build


def _column_write(p, rng, cohort, g, cases):
    """Stacked draft passes: a [B, D] i32 column of proposals, a [B, D, hidden] column of rows."""
    lanes, drafts = len(cohort.history) + 1, 3
    proposals = p.input("proposals", rng.integers(0, g["vocab"], size=(lanes, drafts)).astype(np.int32), "i32")
    rows = p.input("rows", _normal(rng, lanes, drafts, g["hidden"]))
    p.outputs += [proposals, rows]
    p.builder.emit("column_write", [proposals, p.input("proposal", rng.integers(0, g["vocab"], size=lanes)
                                                       .astype(np.int32), "i32")], {"index": 1})
    p.builder.emit("column_write", [rows, p.input("row", _normal(rng, lanes, g["hidden"]))], {"index": drafts - 1})


# temperature, top_p, top_k, min_p, repetition, presence, frequency
_LANE_PARAMETERS = np.array([[0.8, 1.0, 20, 0.0, 1.0, 0.0, 0.0],
                             [0.0, 1.0, 0, 0.0, 1.2, 0.0, 0.0],
                             [1.0, 0.9, 0, 0.05, 1.2, 0.5, 0.0],
                             [0.7, 0.95, 40, 0.02, 1.1, -0.5, 0.2],
                             [1.3, 1.0, 0, 0.0, 1.0, 0.0, 0.3]], np.float32)


def _lane_sampling(rng: np.random.Generator, lanes: int, vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parameters, histogram, grammar_mask) of `lanes` lanes: greedy and sampled lanes, rank filters,
    penalties, and a grammar mask allowing some of the first 128 ids on lane 3."""
    parameters = _LANE_PARAMETERS[np.arange(lanes) % len(_LANE_PARAMETERS)]
    mask = np.full((lanes, -(-vocab // 32)), -1, np.int64)
    if lanes > 3:
        mask[3, :4] = rng.integers(0, 2**32, size=4)
        mask[3, 4:] = 0
    histogram = rng.integers(0, 3, size=(lanes, vocab)).astype(np.int32)
    return parameters, histogram, mask.astype(np.uint32).view(np.int32)


def _sampling_inputs(p, parameters, histogram, mask) -> list[str]:
    return [p.input("parameters", parameters, "f32"), p.input("histogram", histogram, "i32"),
            p.input("grammar_mask", mask, "i32")]


def _token_probability(p, rng, cohort, g, cases):
    """A proposal's probability under its lane's filters (a greedy lane scored at temperature 1), one id
    outside the row."""
    rows, vocab = 5, g["vocab"]
    logits = _normal(rng, rows, vocab, scale=3.0)
    logits[:, g["sampled_tokens"]:] = -np.inf
    parameters, histogram, mask = _lane_sampling(rng, rows, vocab)
    ids = np.argsort(-logits, axis=1)[:, 2].astype(np.int32)  # a likely id of each row
    ids[4] = vocab + 1
    out = p.output("probability", (rows,), "f32")
    p.builder.emit("token_probability", [p.input("logits", logits, "f32"), p.input("ids", ids, "i32"),
                                         *_sampling_inputs(p, parameters, histogram, mask)], into=[out])


def _speculative_allocate(p, rng, cohort, g, cases):
    """Two lanes (slots 3 and 5) with equal confidences contest an odd number of rows, so exact ties
    of survival decide who gets the last one (the lower slot); NaN and values outside [0, 1] sit in
    other lanes, with a padding row, and ceilings and P both binding."""
    lanes, drafts = 6, 3
    confidence = np.array([[0.5, 0.5, 0.5], [0.1, 0.1, 0.1], [0.9, 0.9, 0.9], [0.5, 0.5, 0.5],
                           [1.0, 1.0, 1.0], [np.nan, 1.5, 0.1]], np.float32)
    confidence[1:3] *= rng.choice(np.array([0.5, 1.0], np.float32), size=(2, drafts))  # lanes that never win
    ceilings = np.array([4, 2, 3, 4, 1, 4], np.int32)
    lane_order = np.array([3, 0, -1, 5, 1, 2], np.int32)
    out = p.output("lengths", (lanes,), "i32")
    p.builder.emit("speculative_allocate", [p.input("confidence", confidence, "f32"),
                                            p.input("ceilings", ceilings, "i32"),
                                            p.input("lane_order", lane_order, "i32")], {"packed_tokens": 10},
                   into=[out])


def _speculative_pack(p, rng, cohort, g, cases):
    lanes, width, packed = 5, 4, 14
    lengths = np.array([3, 0, 4, 1, 6], np.int32)  # the last lane's 6 clipped to C = 4
    outputs = [p.output(name, (packed,), "i32") for name in ("tokens", "positions", "next_positions", "token_lane")]
    p.builder.emit("speculative_pack", [p.input("lane_order", np.array([2, -1, 0, 4, 1], np.int32), "i32"),
                                        p.input("lengths", lengths, "i32"),
                                        p.input("consumed", rng.integers(0, 4000, size=lanes).astype(np.int32), "i32"),
                                        p.input("candidates", rng.integers(0, g["vocab"], size=(lanes, width))
                                                .astype(np.int32), "i32")], {"packed_tokens": packed},
                   into=outputs)


def _speculative_verify(p, rng, cohort, g, cases):
    """Greedy and sampled lanes in one batch, every length 0..D+1, a padding target row: proposals
    drawn as a program draws them (`sample`, draw_index 1, over draft rows near the target's), the
    greedy lane's first proposal its target's greedy id."""
    lanes, drafts, vocab = 5, 2, g["vocab"]
    lengths = np.array([3, 2, 0, 3, 1], np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    packed = int(lengths.sum()) + 1
    parameters, histogram, mask = _lane_sampling(rng, lanes, vocab)
    consumed = rng.integers(0, 4000, size=lanes).astype(np.int32)
    seed = rng.integers(-2**62, 2**62, size=lanes).astype(np.int64)
    logits = _normal(rng, packed, vocab, scale=3.0)
    logits[:, g["sampled_tokens"]:] = -np.inf
    draft_logits = _normal(rng, lanes, drafts, vocab, scale=3.0)
    candidates = rng.integers(0, g["sampled_tokens"], size=(lanes, drafts + 1)).astype(np.int32)
    for b in range(lanes):
        for k in range(1, int(lengths[b])):
            row = logits[starts[b] + k - 1]
            draft_logits[b, k - 1] = row + _normal(rng, vocab, scale=0.3)
            if parameters[b, 0] > 0:
                candidates[b, k] = sample(draft_logits[b, k - 1][None], seed[b:b + 1],
                                                    consumed[b:b + 1] + k - 1, parameters[b:b + 1],
                                                    histogram[b:b + 1], mask[b:b + 1], draw_index=PROPOSAL_DRAW)[0]
            elif k == 1:
                candidates[b, k] = sampling.greedy(sampling.masked_logits(row, parameters[b], histogram[b], mask[b]))
    ids = p.output("ids", (lanes, drafts + 1), "i32")
    accepted = p.output("accepted", (lanes,), "i32")
    p.builder.emit("speculative_verify", [
        p.input("logits", logits, "f32"), p.input("draft_logits", draft_logits, "f32"),
        p.input("candidates", candidates, "i32"), p.input("lengths", lengths, "i32"),
        p.input("consumed", consumed, "i32"), p.input("seed", seed, "i64"),
        *_sampling_inputs(p, parameters, histogram, mask)], {"verify_tokens": drafts + 1}, into=[ids, accepted])


def _speculative_commit(p, rng, cohort, g, cases):
    lanes, width = 5, 3
    outputs = [p.output(name, (lanes,), "i32") for name in ("pending", "emitted", "endpoint")]
    p.builder.emit("speculative_commit", [
        p.input("ids", rng.integers(-1, g["vocab"], size=(lanes, width)).astype(np.int32), "i32"),
        p.input("accepted", rng.integers(0, width, size=lanes).astype(np.int32), "i32"),
        p.input("lengths", np.array([3, 0, 1, 2, 0], np.int32), "i32"),
        p.input("consumed", rng.integers(0, 4000, size=lanes).astype(np.int32), "i32")], into=outputs)


def _copied_proposal(p, rng, cohort, g, cases):
    """Copied runs of every length at proposal column 1: a run past it, one ending at it, none, a run cut
    by an id outside the vocabulary, a count above D and a negative count."""
    lanes, drafts, vocab = 6, 3, g["vocab"]
    copied = rng.integers(0, vocab, size=(lanes, drafts)).astype(np.int32)
    copied[3, 1] = vocab  # outside the row: the run stops before it
    count = np.array([3, 2, 0, 3, 9, -1], np.int32)
    token, logits = p.output("token", (lanes,), "i32"), p.output("logits", (lanes, vocab), "f32")
    p.builder.emit("copied_proposal", [
        p.input("drawn", rng.integers(0, vocab, size=lanes).astype(np.int32), "i32"),
        p.input("draft_logits", _normal(rng, lanes, vocab, scale=3.0), "f32"),
        p.input("copied_ids", copied, "i32"), p.input("copied_count", count, "i32")], {"index": 1},
        into=[token, logits])


def _speculative_grammar_mask(p, rng, cohort, g, cases):
    """Per-position grammar masks over packed target rows and draft rows: lanes of every length up to
    W, a padding lane, padding rows past the lanes, random masks, an all-ones row and an all-zero one."""
    lanes, drafts, width, vocab = 5, 3, 4, g["vocab"]
    words = (vocab + 31) // 32
    lengths = np.array([4, 0, 1, 3, 2], np.int32)
    masks = rng.integers(0, 2**32, size=(lanes, width, words), dtype=np.uint64).astype(np.uint32).view(np.int32)
    masks[0, 1], masks[3, 0] = -1, 0
    logits = p.input("logits", _normal(rng, int(lengths.sum()) + 2, vocab, scale=3.0), "f32")
    draft_logits = p.input("draft_logits", _normal(rng, lanes, drafts, vocab, scale=3.0), "f32")
    p.outputs += [logits, draft_logits]
    p.builder.speculative_grammar_mask(logits, draft_logits, p.input("masks", masks, "i32"),
                                       p.input("lengths", lengths, "i32"))


def _prompt_scores(p, rng, cohort, g, cases):
    """A scored chunk's rows into the leading rows of larger completion buffers (the rows past it keep
    their values): -inf columns past the sampled vocabulary, a target outside the row, a padding
    target, and a row of exact ties, where the lower id comes first."""
    rows, vocab, top = 6, g["vocab"], 5
    logits = _normal(rng, rows, vocab, scale=3.0)
    logits[:, g["sampled_tokens"]:] = -np.inf
    logits[2, :] = np.where(np.arange(vocab) < g["sampled_tokens"], 1.5, -np.inf)  # every sampled id tied
    targets = rng.integers(0, g["sampled_tokens"], size=rows).astype(np.int32)
    targets[3], targets[5] = -1, vocab + 2
    scores = p.input("scores", _normal(rng, rows + 2, top + 1), "f32")
    ids = p.input("ids", rng.integers(0, vocab, size=(rows + 2, top)).astype(np.int32), "i32")
    p.outputs += [scores, ids]
    p.builder.prompt_scores(p.input("logits", logits, "f32"), p.input("targets", targets, "i32"), scores=scores,
                            ids=ids)


def _moves(p, rng, cohort, g, cases):
    """A completion record's writes: copies of integer and float tensors (one longer than a GPU-paths
    block) and fills of integer and float fields, one launch where the copy+fill group is lowered."""
    lanes = len(_rows(cohort)[0])
    generation = p.input("generation", rng.integers(0, 1 << 20, size=lanes).astype(np.int64), "i32")
    p.builder.copy(generation, into=p.output("completion_generation", (lanes,), "i32"))
    p.builder.fill(-1, into=p.output("draft_cursor", (lanes,), "i32"))
    hidden = p.input("hidden", _normal(rng, 3, g["hidden"]))
    p.builder.copy(hidden, into=p.output("hidden_out", (3, g["hidden"])))
    p.builder.fill(0.25, into=p.output("scale", (2, g["hidden"])))
    p.builder.fill(7, into=p.output("status", (1,), "i32"))


def _fill(p, rng, cohort, g, cases):
    out = p.output("out", (3, g["hidden"]))
    p.builder.fill(0.25, into=out)


def run_operator_case(operator: str, variant: str, cohort: Cohort, build: Builder, cases: OperatorCases,
                      dtype: str, device: str, rng: np.random.Generator, *, gpu_paths: bool = False) -> CaseResult:
    """Build, run on both sides, compare every output (production lowered in the GPU-paths mode with
    `gpu_paths`)."""
    import torch

    from helios.production.buffers import ScratchArena
    from helios.production.gpu_paths import GpuPaths
    from helios.production.lowering import lower_program

    name = f"{operator}/{variant}/{dtype}"
    p = OperatorProgram(dtype, ProgramBuilder(f"conform_{operator}"))
    build(p, rng, cohort, cases.geometry, cases)
    program = p.builder.build()
    operators = validate_program(program)
    reference = {k: v.copy() for k, v in p.values.items()}
    env = execute(program, reference, operators)
    dtypes = {d.name: d.dtype for d in program.tensors}
    target = torch.device(device)
    buffers = {}
    for key, value in p.values.items():
        t = torch.from_numpy(value.copy())
        if dtypes[key] == DTYPES_BY_NAME["bf16"]:
            t = t.to(torch.bfloat16)
        buffers[key] = t.to(target)
    plan = lower_program(program, operators, weights={}, buffers=buffers, arena=ScratchArena(target), device=target,
                         gpu_paths=GpuPaths() if gpu_paths else None)
    plan.run()
    for output in p.outputs:
        produced = buffers[output]
        production = (produced.float() if produced.is_floating_point() else produced).cpu().numpy()
        expected = np.asarray(env[output])
        integer = not np.issubdtype(expected.dtype, np.floating)
        limits = tolerance(dtype)
        slack = None if integer or output not in p.slack else p.slack[output](env, limits.roundoff)
        index = first_mismatch(expected, production, None if integer else limits.relative, slack=slack)
        if index is not None:
            where = f"{output}[{', '.join(map(str, index))}]" if index else f"{output} (shape)"
            return CaseResult(name, "divergence", Divergence(
                case=name, field=where,
                reference=expected[index].item() if index else list(expected.shape),
                production=production[index].item() if index else list(production.shape),
                lane=index[0] if index else None,
                detail=f"{operator}: {output} differs at {where}"))
    return CaseResult(name, "pass")


def run_operators(cases: OperatorCases, *, device: str, dtypes: Sequence[str] = ("f32",),
                  only: Sequence[str] | None = None, gpu_paths: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> LevelResult:
    """Every case of every operator (or of `only`), in every dtype; each case a fresh random draw;
    `gpu_paths`: production in the GPU-paths mode (the module docstring); `progress(done, total)`
    before the first case and after each."""
    known = set(OPERATORS) | set(FUSIONS) | set(PRODUCT_FUSIONS)
    unknown = sorted(set(only or ()) - known)
    if unknown:
        raise ValueError(f"unknown operators {unknown}; the registry has {sorted(OPERATORS)}")
    builders = [case for case in case_builders(cases, gpu_paths=gpu_paths) if only is None or case[0] in only]
    missing = sorted(set(OPERATORS) - {case[0] for case in case_builders(cases)})
    if missing:
        raise ValueError(f"operators without a conformance case: {missing}")
    rng = np.random.default_rng(cases.seed)
    # f32-only operators' inputs are f32 logits, integers or no tensor at all: the f32 pass covers them
    runs = [(dtype, case) for dtype in dtypes for case in builders if dtype == "f32" or case[0] not in F32_ONLY]
    report = progress or (lambda done, total: None)
    report(0, len(runs))
    results = []
    for dtype, (operator, variant, cohort, build) in runs:
        results.append(run_operator_case(operator, variant, cohort, build, cases, dtype, device, rng,
                                         gpu_paths=gpu_paths))
        report(len(results), len(runs))
    return LevelResult("operators", tuple(results))
