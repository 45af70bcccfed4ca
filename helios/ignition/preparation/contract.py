"""Reusable contract declarations for text graphs (preparation side, host).

The specification's shared components, each a small declaration a recipe composes: the manifest
buffers it needs (registered once, whatever the number of graphs using them), the ValueBindings that
fill them, and the program tensors bound to them.

- `paged_text_inputs`: packed tokens (prompt tokens and the host-owned pending token share one
  destination), positions, the lane of each packed row, the page table and its page-table view, and
  `paged_history` for one layer's key/value planes (paged or sliding-window).
- `device_pending_tokens`: the device-owned alternative to the host's PENDING_TOKEN binding: a
  persistent STATE row of one token per slot that packed rows the host leaves at padding read, and
  that every sampling lane writes its sampled token into (`pending_token_view` is its StateView).
- `admission_inputs`: request identity and lane geometry (slot generation, sampling decision).
- `sampling_inputs`: admission sampling (seed bits, parameters, prompt histogram, grammar mask) and
  the `sample` operator over them.
- `state_transfer`: the completion record (one COMPLETION buffer per field) and the program tail
  that writes it.
- `prompt_score_inputs`, `prompt_score_layout`, `write_prompt_scores`: a scored prefill's targets
  (SCORED_PREFILL_TARGETS), its two score buffers in the completion record, and the tail that
  scores every packed row.

Lanes are addressed by physical request slot: the lane of a packed row is its request's SLOT, and
every per-lane input and completion row is a physical request row, so admission values are written
once per request and a lane's completion row is its slot's row. The transport owns the completion's
frame index and submission sequence (the runtime writes them; programs never do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from helios.errors import HeliosError
from helios.program import SAMPLING_PARAMETERS, ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C = contract_pb2
M = manifest_pb2


class DeclarationConflict(HeliosError):
    """Two declarations registered one buffer name with different descriptors."""


@dataclass(frozen=True, slots=True)
class TextGeometry:
    """The extents every text graph of one core shares."""

    slots: int  # S: physical request slots (the largest batch capacity)
    page_tokens: int  # T: tokens per page
    max_pages: int  # pages one request may hold: ceil(context_tokens / T)
    sampled_tokens: int  # sampled ids lie in [0, sampled_tokens)
    logits_width: int  # logits row width (the output head's rows)

    def __post_init__(self) -> None:
        for name in ("slots", "page_tokens", "max_pages", "sampled_tokens", "logits_width"):
            if getattr(self, name) < 1:
                raise ValueError(f"TextGeometry.{name} must be >= 1, got {getattr(self, name)}")
        if self.logits_width < self.sampled_tokens:
            raise ValueError("TextGeometry.logits_width must cover sampled_tokens")

    @property
    def histogram_width(self) -> int:
        return self.logits_width

    @property
    def mask_words(self) -> int:
        return math.ceil(self.logits_width / 32)


@dataclass(slots=True)
class Declarations:
    """The manifest buffers of one core, registered once each, in first-registration order."""

    buffers: dict[str, manifest_pb2.BufferDescriptor] = field(default_factory=dict)

    def buffer(self, name: str, role: int, dtype: int, shape: tuple[int, ...]) -> str:
        descriptor = manifest_pb2.BufferDescriptor(name=name, role=role, dtype=dtype, shape=list(shape))
        existing = self.buffers.get(name)
        if existing is None:
            self.buffers[name] = descriptor
        elif existing != descriptor:
            raise DeclarationConflict(f"buffer {name!r} declared as {existing} and as {descriptor}")
        return name


def _binding(destination: str, source: int, indexing: int, *, padding: int = 0, offset: int = 0) -> C.ValueBinding:
    return C.ValueBinding(destination=destination, source=source, indexing=indexing, padding=padding, offset=offset)


# ---------------------------------------------------------------------------------------------- paged text


@dataclass(frozen=True, slots=True)
class PagedTextInputs:
    tokens: str  # [P] i32 program tensor: packed token ids, -1 on padding rows
    positions: str  # [P] i32: sequence position of each packed token
    next_positions: str  # [P] i32: position + 1 (the consumed endpoint a lane reaches at its last row)
    token_lane: str  # [P] i32: the lane (physical slot) of each packed row, -1 on padding rows
    page_table: str  # [S, max_pages] i32
    bindings: tuple[C.ValueBinding, ...]


PAGE_TABLE_BUFFER = "lane_page_table"


def paged_text_inputs(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder,
                      packed_tokens: int, *, host_pending: bool = True) -> PagedTextInputs:
    """Packed tokens, positions and lanes for P = `packed_tokens` rows, plus the page table.
    Without `host_pending` no PENDING_TOKEN binding feeds the pending token's row: the host leaves it
    at padding -1 and `device_pending_tokens` fills it on the device."""
    p = packed_tokens
    names = {what: decl.buffer(f"{what}_p{p}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (p,))
             for what in ("tokens", "positions", "next_positions", "token_lane")}
    decl.buffer(PAGE_TABLE_BUFFER, M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (geometry.slots, geometry.max_pages))
    bindings = (
        _binding(names["tokens"], C.VALUE_SOURCE_PROMPT_TOKENS, C.INDEXING_PACKED_TOKEN, padding=-1),
        *([_binding(names["tokens"], C.VALUE_SOURCE_PENDING_TOKEN, C.INDEXING_PACKED_TOKEN, padding=-1)]
          if host_pending else []),
        _binding(names["positions"], C.VALUE_SOURCE_PROMPT_POSITIONS, C.INDEXING_PACKED_TOKEN),
        _binding(names["next_positions"], C.VALUE_SOURCE_PROMPT_POSITIONS, C.INDEXING_PACKED_TOKEN, offset=1),
        _binding(names["token_lane"], C.VALUE_SOURCE_SLOT, C.INDEXING_PACKED_TOKEN, padding=-1),
        _binding(PAGE_TABLE_BUFFER, C.VALUE_SOURCE_PAGE_TABLE, C.INDEXING_PHYSICAL_REQUEST_ROW),
    )
    return PagedTextInputs(
        tokens=b.transport("tokens", names["tokens"], "i32", (p,)),
        positions=b.transport("positions", names["positions"], "i32", (p,)),
        next_positions=b.transport("next_positions", names["next_positions"], "i32", (p,)),
        token_lane=b.transport("token_lane", names["token_lane"], "i32", (p,)),
        page_table=b.transport("page_table", PAGE_TABLE_BUFFER, "i32", (geometry.slots, geometry.max_pages)),
        bindings=bindings,
    )


PENDING_TOKEN_BUFFER = "pending_tokens"


@dataclass(frozen=True, slots=True)
class DevicePendingTokens:
    """A device-owned pending token: one i32 per request slot in a persistent STATE buffer."""

    state: str  # [S] i32 STATE program tensor: each slot's pending token (the last id it sampled)
    tokens: str  # [P] i32: the packed tokens, host prompt tokens where fed, else the lane's pending token
    bindings: tuple[C.ValueBinding, ...]

    def commit(self, b: ProgramBuilder, sampled: str, sampling_decision: str, in_round: str) -> None:
        """Each lane of the round whose sampling decision says it sampled keeps its sampled id ([S]
        i32) as its pending token; every other slot keeps its own.

        `in_round` ([S] i32) is nonzero exactly for the slots that have rows this round (e.g. each
        lane's consumed endpoint: position + 1 of its last row, 0 for a slot without rows). It is
        needed because physical request rows of slots outside the round keep whatever an earlier
        round packed there, their sampling decision included.
        """
        decided = b.where(sampling_decision, sampled, self.state, name="pending_decided")
        b.where(in_round, decided, self.state, into=self.state)


def device_pending_tokens(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder,
                          text: PagedTextInputs) -> DevicePendingTokens:
    """Packed tokens with the pending token read on the device.

    A second destination receives PROMPT_TOKENS with offset 1 and padding 0, so it is nonzero exactly
    on the rows the host fed a prompt token (a token id may be 0, so the tokens themselves cannot
    say). Every other row takes its lane's row of the pending-token state (`gather` by token_lane;
    padding rows, lane -1, read 0 and are ignored downstream as before).
    """
    p = b.type_of(text.tokens).shape[0]
    buffer = decl.buffer(PENDING_TOKEN_BUFFER, M.BUFFER_ROLE_STATE, M.DTYPE_I32, (geometry.slots,))
    mark_buffer = decl.buffer(f"prompt_mark_p{p}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (p,))
    state = b.state("pending_tokens", buffer, "i32", (geometry.slots,))
    mark = b.transport("prompt_mark", mark_buffer, "i32", (p,))
    pending_rows = b.gather(state, text.token_lane, name="pending_rows")
    tokens = b.where(mark, text.tokens, pending_rows, name="packed_tokens")
    bindings = (_binding(mark_buffer, C.VALUE_SOURCE_PROMPT_TOKENS, C.INDEXING_PACKED_TOKEN, padding=0, offset=1),)
    return DevicePendingTokens(state, tokens, bindings)


def pending_token_view(geometry: TextGeometry) -> C.StateView:
    """The pending-token state: one 4-byte row per request slot of `PENDING_TOKEN_BUFFER`."""
    return C.StateView(buffer=PENDING_TOKEN_BUFFER, byte_offset=0, row_stride=4, byte_extent=4)


def page_table_views() -> list[C.PageTableView]:
    """The page-table view every text graph shares: the lane page table, unshifted."""
    return [C.PageTableView(destination=PAGE_TABLE_BUFFER, page_offset=0)]


@dataclass(frozen=True, slots=True)
class HistoryPlanes:
    """One layer's two cache planes and the history region naming them: keys and values of a paged
    key/value or sliding-window region, or the latent and rotary-key planes of a paged latent one
    (helios/ignition/preparation/latent.py)."""

    region: C.HistoryRegion
    key: str  # CACHE buffer names (a latent region: the latent plane, then the rotary-key plane)
    value: str
    dtype: int
    shape: tuple[int, ...]  # [0 (pages, sized at load), T, kv_heads, head_dim]
    value_shape: tuple[int, ...] | None = None  # the second plane's, when it differs (a latent region's)

    @property
    def plane_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(plane, shape) of both planes, in region order."""
        return (self.key, self.shape), (self.value, self.value_shape or self.shape)


def paged_history(decl: Declarations, geometry: TextGeometry, *, layer: int, kv_heads: int, head_dim: int,
                  dtype: int, window_tokens: int | None = None, prefix: str = "") -> HistoryPlanes:
    """One layer's key and value cache planes and the history region naming them (`prefix`
    "draft." for a speculative core's draft model)."""
    shape = (0, geometry.page_tokens, kv_heads, head_dim)
    key = decl.buffer(f"{prefix}layer{layer}.key", M.BUFFER_ROLE_CACHE, dtype, shape)
    value = decl.buffer(f"{prefix}layer{layer}.value", M.BUFFER_ROLE_CACHE, dtype, shape)
    if window_tokens is None:
        region = C.HistoryRegion(name=f"{prefix}layer{layer}", kind=C.HISTORY_KIND_PAGED_KEY_VALUE, planes=[key, value],
                                 tokens_per_record=1, layers=[layer])
    else:
        region = C.HistoryRegion(name=f"{prefix}layer{layer}", kind=C.HISTORY_KIND_SLIDING_WINDOW, planes=[key, value],
                                 tokens_per_record=1, window_tokens=window_tokens, layers=[layer])
    return HistoryPlanes(region, key, value, dtype, shape)


# ---------------------------------------------------------------------------------------------- admission


@dataclass(frozen=True, slots=True)
class AdmissionInputs:
    generation: str  # [S] i32: slot generation of each lane
    sampling_decision: str  # [S] i32: 1 when the lane emits a token this round
    bindings: tuple[C.ValueBinding, ...]


def admission_inputs(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder, *,
                     sampling_decision: bool = True) -> AdmissionInputs:
    s = geometry.slots
    generation = decl.buffer("lane_generation", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (s,))
    bindings = [_binding(generation, C.VALUE_SOURCE_GENERATION, C.INDEXING_PHYSICAL_REQUEST_ROW)]
    decision = ""
    if sampling_decision:
        decision_buffer = decl.buffer("lane_sampling_decision", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (s,))
        bindings.append(_binding(decision_buffer, C.VALUE_SOURCE_SAMPLING_DECISION, C.INDEXING_PHYSICAL_REQUEST_ROW))
        decision = b.transport("sampling_decision", decision_buffer, "i32", (s,))
    return AdmissionInputs(b.transport("generation", generation, "i32", (s,)), decision, tuple(bindings))


# ---------------------------------------------------------------------------------------------- sampling


@dataclass(frozen=True, slots=True)
class SamplingInputs:
    seed: str  # [S] i64
    parameters: str  # [S, 7] f32 (helios.program.SAMPLING_PARAMETERS order)
    histogram: str  # [S, histogram_width] i32: the prompt histogram
    grammar_mask: str  # [S, mask_words] i32: allowed-token bits (all set without a grammar)
    bindings: tuple[C.ValueBinding, ...]

    def sample(self, b: ProgramBuilder, logits: str, positions: str, *, name: str = "sampled") -> str:
        """The sampled id of each lane; `positions` is the position of the row whose logits are sampled."""
        return b.sample(logits, self.seed, positions, self.parameters, self.histogram, self.grammar_mask, name=name)


def sampling_inputs(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder) -> SamplingInputs:
    s = geometry.slots
    buffers = {
        "seed": decl.buffer("lane_seed", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I64, (s,)),
        "parameters": decl.buffer("lane_sampling_parameters", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_F32,
                                  (s, len(SAMPLING_PARAMETERS))),
        "histogram": decl.buffer("lane_prompt_histogram", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32,
                                 (s, geometry.histogram_width)),
        "grammar_mask": decl.buffer("lane_grammar_mask", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (s, geometry.mask_words)),
    }
    row = C.INDEXING_PHYSICAL_REQUEST_ROW
    bindings = (
        _binding(buffers["seed"], C.VALUE_SOURCE_SEED_BITS, row),
        # Padding 1 keeps every column in its valid range (temperature 1, top_p 1, top_k 1, ...).
        _binding(buffers["parameters"], C.VALUE_SOURCE_SAMPLING_PARAMETERS, row, padding=1),
        _binding(buffers["histogram"], C.VALUE_SOURCE_PROMPT_HISTOGRAM, row),
        _binding(buffers["grammar_mask"], C.VALUE_SOURCE_GRAMMAR_MASK, row, padding=-1),
    )
    return SamplingInputs(
        seed=b.transport("seed", buffers["seed"], "i64", (s,)),
        parameters=b.transport("sampling_parameters", buffers["parameters"], "f32", (s, len(SAMPLING_PARAMETERS))),
        histogram=b.transport("prompt_histogram", buffers["histogram"], "i32", (s, geometry.histogram_width)),
        grammar_mask=b.transport("grammar_mask", buffers["grammar_mask"], "i32", (s, geometry.mask_words)),
        bindings=bindings,
    )


# ---------------------------------------------------------------------------------------------- submission rows


def submission_slots(decl: Declarations, b: ProgramBuilder, batch: int) -> tuple[str, C.ValueBinding]:
    """[B] i32: the physical slot of each submission row (lane order), -1 on padding rows, and its
    binding: what a graph of B < S lanes gathers its lanes' per-slot rows with (the head and the
    sampler then run over B rows, not S)."""
    buffer = decl.buffer(f"submission_slots_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
    return (b.transport("submission_slots", buffer, "i32", (batch,)),
            _binding(buffer, C.VALUE_SOURCE_SLOT, C.INDEXING_SUBMISSION_ROW, padding=-1))


# ---------------------------------------------------------------------------------------------- state transfer

# Completion record fields and their [rows] shapes; S rows are physical request slots.
_COMPLETION_FIELDS: tuple[tuple[int, str, str], ...] = (
    (M.COMPLETION_FIELD_FRAME_INDEX, "completion.frame_index", "one"),
    (M.COMPLETION_FIELD_SUBMISSION_SEQUENCE, "completion.submission_sequence", "one"),
    (M.COMPLETION_FIELD_GENERATION, "completion.generation", "lanes"),
    (M.COMPLETION_FIELD_SAMPLED_IDS, "completion.sampled_ids", "lanes_by_width"),
    (M.COMPLETION_FIELD_EMITTED, "completion.emitted", "lanes"),
    (M.COMPLETION_FIELD_CONSUMED_ENDPOINT, "completion.consumed_endpoint", "lanes"),
    (M.COMPLETION_FIELD_DRAFT_CURSOR, "completion.draft_cursor", "lanes"),
    (M.COMPLETION_FIELD_MODEL_RESERVED, "completion.model_reserved", "lanes"),
    (M.COMPLETION_FIELD_STATUS, "completion.status", "one"),
)


# The fields a speculative core's record adds: what each lane offered and accepted.
SPECULATIVE_COMPLETION_FIELDS: tuple[tuple[int, str, str], ...] = (
    (M.COMPLETION_FIELD_OFFERS, "completion.offers", "lanes"),
    (M.COMPLETION_FIELD_ACCEPTED_DRAFTS, "completion.accepted_drafts", "lanes"),
)


def _completion_shape(kind: str, slots: int, width: int = 1) -> tuple[int, ...]:
    return {"one": (1,), "lanes": (slots,), "lanes_by_width": (slots, width)}[kind]


def completion_layout(decl: Declarations, geometry: TextGeometry, *, width: int = 1,
                      speculative: bool = False) -> manifest_pb2.CompletionLayout:
    """Register one COMPLETION buffer per field and return the record's layout. `width` is the
    sampled-ids row (the widest speculative W); a speculative core also records offers and accepted
    drafts."""
    layout = manifest_pb2.CompletionLayout()
    fields = _COMPLETION_FIELDS + (SPECULATIVE_COMPLETION_FIELDS if speculative else ())
    for completion_field, name, kind in fields:
        decl.buffer(name, M.BUFFER_ROLE_COMPLETION, M.DTYPE_I32, _completion_shape(kind, geometry.slots, width))
        layout.fields.append(manifest_pb2.CompletionSlot(field=completion_field, buffer=name))
    return layout


def completion_tensors(b: ProgramBuilder, geometry: TextGeometry, width: int, *,
                       speculative: bool = False) -> dict[str, str]:
    """The program tensors of the completion record's buffers (per-submission fields: status only)."""
    fields = _COMPLETION_FIELDS + (SPECULATIVE_COMPLETION_FIELDS if speculative else ())
    return {name: b.completion(name, name, "i32", _completion_shape(kind, geometry.slots, width))
            for _, name, kind in fields if kind != "one" or name == "completion.status"}


def state_transfer(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder, *, generation: str,
                   emitted: str | None, sampled: str | None, consumed_endpoint: str | None,
                   width: int = 1) -> None:
    """Write the completion record: echoes, emitted count, endpoint, no draft cursor, status 0.

    `emitted`, `sampled` and `consumed_endpoint` are [S] i32 tensors; None writes 0 (a program that
    emits nothing and has consumed nothing, such as initialization). With a sampled-ids row `width`
    wider than 1 (a speculative core), the sampled id is its first column.
    """
    tensors = completion_tensors(b, geometry, width)
    b.copy(generation, into=tensors["completion.generation"])
    for name, value in (("completion.emitted", emitted), ("completion.sampled_ids", sampled),
                        ("completion.consumed_endpoint", consumed_endpoint)):
        if value is None:
            b.fill(0, into=tensors[name])
        elif name == "completion.sampled_ids" and width > 1:
            b.column_write(value, index=0, into=tensors[name])
        else:
            b.copy(value, into=tensors[name])
    b.fill(-1, into=tensors["completion.draft_cursor"])
    b.fill(-1, into=tensors["completion.model_reserved"])
    b.fill(0, into=tensors["completion.status"])


# ---------------------------------------------------------------------------------------------- prompt scores

PROMPT_SCORES_BUFFER = "completion.prompt_scores"
PROMPT_SCORE_IDS_BUFFER = "completion.prompt_score_ids"


def prompt_score_layout(decl: Declarations, layout: manifest_pb2.CompletionLayout, *, rows: int,
                        top: int) -> None:
    """Register the scored prefill's two COMPLETION buffers and add them to the record's layout: one
    row per packed token of the largest scored chunk (`rows`), the target's log-probability then the
    `top` most likely ids' ([rows, top + 1] f32), and those ids ([rows, top] i32)."""
    decl.buffer(PROMPT_SCORES_BUFFER, M.BUFFER_ROLE_COMPLETION, M.DTYPE_F32, (rows, top + 1))
    decl.buffer(PROMPT_SCORE_IDS_BUFFER, M.BUFFER_ROLE_COMPLETION, M.DTYPE_I32, (rows, top))
    layout.fields.append(manifest_pb2.CompletionSlot(field=M.COMPLETION_FIELD_PROMPT_SCORES,
                                                     buffer=PROMPT_SCORES_BUFFER))
    layout.fields.append(manifest_pb2.CompletionSlot(field=M.COMPLETION_FIELD_PROMPT_SCORE_IDS,
                                                     buffer=PROMPT_SCORE_IDS_BUFFER))


@dataclass(frozen=True, slots=True)
class PromptScoreInputs:
    targets: str  # [P] i32 program tensor: each packed row's scored-prefill target, -1 where none
    bindings: tuple[C.ValueBinding, ...]


def prompt_score_inputs(decl: Declarations, b: ProgramBuilder, packed_tokens: int) -> PromptScoreInputs:
    """The SCORED_PREFILL_TARGETS of P = `packed_tokens` rows: the prompt token after each row's own
    (padding -1 past the prompt's last token and on padding rows)."""
    name = decl.buffer(f"score_targets_p{packed_tokens}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (packed_tokens,))
    return PromptScoreInputs(
        targets=b.transport("score_targets", name, "i32", (packed_tokens,)),
        bindings=(_binding(name, C.VALUE_SOURCE_SCORED_PREFILL_TARGETS, C.INDEXING_PACKED_TOKEN, padding=-1),))


def write_prompt_scores(b: ProgramBuilder, logits: str, targets: str, *, rows: int, top: int) -> None:
    """The program tail of a scored prefill: `prompt_scores` of every packed row's logits into the
    leading rows of the two score buffers."""
    scores = b.completion("prompt_scores", PROMPT_SCORES_BUFFER, "f32", (rows, top + 1))
    ids = b.completion("prompt_score_ids", PROMPT_SCORE_IDS_BUFFER, "i32", (rows, top))
    b.prompt_scores(logits, targets, scores=scores, ids=ids)
