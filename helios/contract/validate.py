"""Every rejection rule of the prepared contract (host side).

`problems(contract)` yields one ContractError per violated rule, each naming its field path, in a
stable order. PreparedContract.decode raises the first; `helios contract check` prints them all.
Rules are grouped as the specification groups them; each function's docstring quotes its rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import helios.contract.errors as e
from helios.contract.engram import engram_problems
from helios.contract.enums import (
    COPIED_PROPOSAL_SOURCES,
    COPIED_TOKEN_SOURCES,
    DTYPE_NBYTES,
    LENGTH_SOURCES,
    Access,
    BufferRole,
    CompletionField,
    DType,
    HistoryKind,
    ImageLayout,
    ImagePreparation,
    Indexing,
    Operation,
    ReasoningParser,
    ToolParser,
    ValueSource,
)
from helios.contract.metadata import serving_metadata
from helios.contract.model import Buffer, Graph, StateView
from helios.contract.translated import TranslatedContract
from helios.contract.variants import missing_variants

SUPPORTED_VERSIONS = (1, 2, 3)
CONFIDENCE_BUFFER = "proposal_confidence"
# Fields every completion record must carry (the rest are optional per graph family).
REQUIRED_COMPLETION_FIELDS = (
    CompletionField.FRAME_INDEX, CompletionField.SUBMISSION_SEQUENCE, CompletionField.GENERATION,
    CompletionField.SAMPLED_IDS, CompletionField.EMITTED, CompletionField.CONSUMED_ENDPOINT,
    CompletionField.DRAFT_CURSOR, CompletionField.MODEL_RESERVED, CompletionField.STATUS,
)
_PERSISTENT_ROLES = (BufferRole.STATE, BufferRole.CACHE)


def _enum_problem(path: str, value, kind, what: str) -> e.ContractError | None:
    """Zero never selects an implementation; an unknown number is an unknown identifier."""
    if not isinstance(value, kind):
        return e.UnknownEnumValue(path, f"unknown {what} {value}")
    if value == 0:
        return e.UnspecifiedEnum(path, f"{what} is unspecified; it must name an implementation")
    return None


def problems(c: TranslatedContract) -> Iterator[e.ContractError]:
    if c.version not in SUPPORTED_VERSIONS:
        yield e.UnsupportedContractVersion(
            "model.version", f"contract version {c.version} is not supported (supported: 1, 2, 3)")
        return
    yield from serving_metadata(c)
    yield from _geometry(c)
    yield from _manifest(c)
    yield from _cache(c)
    yield from _catalog(c)
    for i, graph in enumerate(c.graphs):
        yield from _graph(c, f"model.graphs[{i}]", graph)
    yield from missing_variants(c)
    yield from _confidence_storage(c)
    yield from _frontend(c)
    yield from engram_problems(c)


# ----------------------------------------------------------------------------- serving metadata


def _geometry(c: TranslatedContract) -> Iterator[e.ContractError]:
    v = c.vocabulary
    if v.sampled_tokens == 0:
        yield e.InvalidGeometry("model.vocabulary.sampled_tokens", "the sampled range is empty")
    if v.logits_width < v.sampled_tokens:
        yield e.InvalidGeometry("model.vocabulary.logits_width",
                                f"{v.logits_width} is narrower than the sampled range {v.sampled_tokens}")
    if v.histogram_width < v.sampled_tokens:
        yield e.InvalidGeometry("model.vocabulary.histogram_width",
                                f"{v.histogram_width} is narrower than the sampled range {v.sampled_tokens}")
    if v.mask_words != math.ceil(v.logits_width / 32):
        yield e.InvalidGeometry("model.vocabulary.mask_words",
                                f"{v.mask_words} words cannot mask {v.logits_width} logits "
                                f"(need ceil({v.logits_width} / 32) = {math.ceil(v.logits_width / 32)})")
    iv = c.input_vocabulary
    if iv.input_tokens < v.sampled_tokens:
        yield e.InvalidGeometry("model.input_vocabulary.input_tokens",
                                f"{iv.input_tokens} does not cover the sampled range {v.sampled_tokens}")
    for j, sentinel in enumerate(iv.image_sentinels):
        if not (v.sampled_tokens <= sentinel < iv.input_tokens):
            yield e.InvalidGeometry(f"model.input_vocabulary.image_sentinels[{j}]",
                                    f"sentinel {sentinel} must be a nonsampled input id in "
                                    f"[{v.sampled_tokens}, {iv.input_tokens})")
    if c.context_tokens == 0:
        yield e.InvalidGeometry("context_tokens", "the context extent is zero")
    if c.prefill_tokens == 0 or c.prefill_tokens > c.context_tokens:
        yield e.InvalidGeometry("prefill_tokens", f"{c.prefill_tokens} must be in [1, context_tokens={c.context_tokens}]")
    if c.max_concurrency == 0:
        yield e.InvalidGeometry("max_concurrency", "the selected concurrency is zero")
    if list(c.speculative_widths) != sorted(set(c.speculative_widths)) or 0 in c.speculative_widths:
        yield e.InvalidGeometry("speculative_widths", "widths must be positive, distinct and ascending")


# ----------------------------------------------------------------------------- manifest


def _manifest(c: TranslatedContract) -> Iterator[e.ContractError]:
    m = c.manifest
    if m.ranks == 0:
        yield e.InvalidGeometry("manifest.ranks", "at least one rank is required")
    if m.frames not in (1, 2):
        yield e.InvalidGeometry("manifest.transport.frames", f"{m.frames} frames; the transport has 1 or 2")
    seen: set[str] = set()
    for i, b in enumerate(m.buffers):
        path = f"manifest.buffers[{i}]"
        if b.name in seen:
            yield e.DuplicateName(f"{path}.name", f"buffer {b.name!r} is declared twice")
        seen.add(b.name)
        if (p := _enum_problem(f"{path}.role", b.role, BufferRole, "buffer role")) is not None:
            yield p
        if (p := _enum_problem(f"{path}.dtype", b.dtype, DType, "dtype")) is not None:
            yield p
        if not b.shape:
            yield e.InvalidGeometry(f"{path}.shape", f"buffer {b.name!r} has no extents")
        elif 0 in (b.shape[1:] if b.role == BufferRole.CACHE else b.shape):
            yield e.InvalidGeometry(f"{path}.shape", f"buffer {b.name!r} has a zero extent "
                                    "(only a cache buffer's leading extent may be 0: sized at load)")
        if b.role == BufferRole.TUNED and not b.producer:
            yield e.TunedDescriptorMismatch(f"{path}.producer", f"tuned buffer {b.name!r} names no producer")
    fields = [f for f, _ in m.completion]
    for j, (field, buffer) in enumerate(m.completion):
        path = f"manifest.completion.fields[{j}]"
        if (p := _enum_problem(f"{path}.field", field, CompletionField, "completion field")) is not None:
            yield p
        elif fields.count(field) > 1:
            yield e.InvalidCompletionLayout(f"{path}.field", f"{field.name} appears {fields.count(field)} times")
        desc = m.buffer(buffer)
        if desc is None or desc.role != BufferRole.COMPLETION:
            yield e.InvalidCompletionLayout(f"{path}.buffer", f"{buffer!r} is not a COMPLETION buffer")
    for field in REQUIRED_COMPLETION_FIELDS:
        if field not in fields:
            yield e.InvalidCompletionLayout("manifest.completion", f"the record lacks {field.name}")
    if any(g.operation == Operation.SCORED_PREFILL for g in c.graphs):
        yield from _score_fields(c, dict(m.completion))


def _score_fields(c: TranslatedContract, fields: dict) -> Iterator[e.ContractError]:
    """A core with SCORED_PREFILL graphs records their scores: [R, K + 1] f32 and [R, K] i32 rows, R
    covering the largest scored chunk."""
    scores, ids = (c.manifest.buffer(fields.get(f, "")) for f in (CompletionField.PROMPT_SCORES,
                                                                   CompletionField.PROMPT_SCORE_IDS))
    if scores is None or ids is None:
        yield e.InvalidCompletionLayout("manifest.completion", "SCORED_PREFILL graphs need the record's "
                                        "PROMPT_SCORES and PROMPT_SCORE_IDS fields")
        return
    rows = max(g.packed_token_capacity for g in c.graphs if g.operation == Operation.SCORED_PREFILL)
    if (len(ids.shape) != 2 or ids.dtype != DType.I32 or ids.shape[0] < rows or ids.shape[1] < 1
            or list(scores.shape) != [ids.shape[0], ids.shape[1] + 1] or scores.dtype != DType.F32):
        yield e.InvalidCompletionLayout("manifest.completion", f"the prompt-score buffers must be f32 [R, K + 1] and "
                                        f"i32 [R, K] with R >= {rows}, got {list(scores.shape)} and {list(ids.shape)}")


def _catalog(c: TranslatedContract) -> Iterator[e.ContractError]:
    """Missing graph variants and inconsistent contracts fail startup."""
    names = [g.name for g in c.graphs]
    handle_names = [h.name for h in c.manifest.graphs]
    for i, h in enumerate(c.manifest.graphs):
        path = f"manifest.graphs[{i}]"
        if handle_names.count(h.name) > 1:
            yield e.DuplicateName(f"{path}.name", f"graph handle {h.name!r} is declared twice")
        if h.name not in names:
            yield e.MissingGraphContract(f"{path}.name", f"graph {h.name!r} has no GraphContract")
        if len(h.program_resources) != c.manifest.ranks:
            yield e.InvalidGeometry(f"{path}.program_resources",
                                    f"{len(h.program_resources)} programs for {c.manifest.ranks} ranks")
    tuning_names = [h.name for h in c.manifest.tuning_catalog]
    for i, h in enumerate(c.manifest.tuning_catalog):
        path = f"manifest.tuning_catalog[{i}]"
        if tuning_names.count(h.name) > 1:
            yield e.DuplicateName(f"{path}.name", f"producer {h.name!r} is declared twice")
        if h.name in handle_names:
            yield e.DuplicateName(f"{path}.name", f"producer {h.name!r} is also a serving graph; the tuning "
                                  "catalog is separate")
        if len(h.program_resources) != c.manifest.ranks:
            yield e.InvalidGeometry(f"{path}.program_resources",
                                    f"{len(h.program_resources)} programs for {c.manifest.ranks} ranks")
    for i, g in enumerate(c.graphs):
        if names.count(g.name) > 1:
            yield e.DuplicateName(f"model.graphs[{i}].name", f"graph {g.name!r} is declared twice")


# ----------------------------------------------------------------------------- cache


def _cache(c: TranslatedContract) -> Iterator[e.ContractError]:
    cache = c.cache
    if cache.page_tokens == 0:
        yield e.InvalidGeometry("model.cache.page_tokens", "a page must represent at least one token")
    names = [h.name for h in cache.histories]
    for i, h in enumerate(cache.histories):
        path = f"model.cache.histories[{i}]"
        if not h.name or names.count(h.name) > 1:  # completion cursors name regions
            yield e.DuplicateName(f"{path}.name", f"history region name {h.name!r} must be nonempty and unique")
        if (p := _enum_problem(f"{path}.kind", h.kind, HistoryKind, "history kind")) is not None:
            yield p
            continue
        if h.kind != HistoryKind.SLIDING_WINDOW and h.window_tokens:
            yield e.InvalidGeometry(f"{path}.window_tokens", f"a {h.kind.name} region has no window extent "
                                    f"({h.window_tokens} declared)")
        paged = h.kind in (HistoryKind.PAGED_KEY_VALUE, HistoryKind.PAGED_LATENT, HistoryKind.SLIDING_WINDOW)
        if paged and h.tokens_per_record == 0:
            yield e.InvalidGeometry(f"{path}.tokens_per_record", "a paged region stores at least one token a record")
        if h.kind == HistoryKind.SLIDING_WINDOW and h.window_tokens == 0:
            yield e.InvalidGeometry(f"{path}.window_tokens", "a sliding window declares its token extent")
        for j, plane in enumerate(h.planes):
            b = c.manifest.buffer(plane)
            if b is None or b.role not in _PERSISTENT_ROLES:
                yield e.UnknownBuffer(f"{path}.planes[{j}]", f"{plane!r} is not a cache or state buffer")
    for i, view in enumerate(cache.page_table_views):
        b = c.manifest.buffer(view.destination)
        if b is None or b.role != BufferRole.TRANSPORT:
            yield e.UnknownBuffer(f"model.cache.page_table_views[{i}].destination",
                                  f"{view.destination!r} is not a registered transport buffer")


# ----------------------------------------------------------------------------- graphs


def _graph(c: TranslatedContract, path: str, g: Graph) -> Iterator[e.ContractError]:
    if (p := _enum_problem(f"{path}.operation", g.operation, Operation, "operation")) is not None:
        yield p
    handle = next((h for h in c.manifest.graphs if h.name == g.name), None)
    if handle is None:
        yield e.UnknownGraph(f"{path}.name", f"graph {g.name!r} has no handle in the execution catalog")
    else:
        if handle.operation != g.operation:
            yield e.OperationMismatch(f"{path}.operation",
                                      f"{_name(g.operation)} disagrees with the catalog's {_name(handle.operation)}")
        if (handle.batch_capacity, handle.packed_token_capacity) != (g.batch_capacity, g.packed_token_capacity):
            yield e.CapacityMismatch(f"{path}.capacity",
                                     f"B={g.batch_capacity}, P={g.packed_token_capacity} disagree with the catalog's "
                                     f"B={handle.batch_capacity}, P={handle.packed_token_capacity}")
    if g.batch_capacity == 0 or g.packed_token_capacity < g.batch_capacity:
        yield e.CapacityMismatch(f"{path}.capacity",
                                 f"B={g.batch_capacity}, P={g.packed_token_capacity}: need B >= 1 and P >= B")
    page_views = {v.destination for v in c.cache.page_table_views}
    for j, b in enumerate(g.value_bindings):
        bpath = f"{path}.value_bindings[{j}]"
        if (p := _enum_problem(f"{bpath}.source", b.source, ValueSource, "value source")) is not None:
            yield p
        if (p := _enum_problem(f"{bpath}.indexing", b.indexing, Indexing, "indexing")) is not None:
            yield p
        desc = c.manifest.buffer(b.destination)
        if desc is None or desc.role != BufferRole.TRANSPORT:
            yield e.UnregisteredDestination(f"{bpath}.destination",
                                            f"{b.destination!r} is not a registered transport buffer")
        if b.source == ValueSource.PAGE_TABLE and b.destination not in page_views:
            yield e.UnknownBuffer(f"{bpath}.destination",
                                  f"page-table binding {b.destination!r} matches no declared page-table view")
        if b.source == ValueSource.CONSTANT and not b.constants:
            yield e.InvalidGeometry(f"{bpath}.constants", "a CONSTANT binding declares its values")
    for j, a in enumerate(g.state_accesses):
        apath = f"{path}.state_accesses[{j}]"
        if (p := _enum_problem(f"{apath}.access", a.access, Access, "access")) is not None:
            yield p
        yield from _state_view(c, f"{apath}.view", a.view)
    if g.pending_token_state is not None:
        yield from _state_view(c, f"{path}.pending_token_state", g.pending_token_state)
        if g.bindings_of(ValueSource.PENDING_TOKEN):
            yield e.PendingTokenOwnership(f"{path}.pending_token_state",
                                          "the pending token is device-owned here and also bound from the host")
    if g.draft_cursor is not None and g.draft_cursor.committed_state not in {h.name for h in c.cache.histories}:
        yield e.UnknownHistory(f"{path}.draft_cursor.committed_state",
                               f"{g.draft_cursor.committed_state!r} names no history region")
    yield from _speculative(path, g)
    yield from _copied_proposals(c, path, g)
    yield from _tuned(c, path, g)


def _name(op) -> str:
    return op.name if isinstance(op, Operation) else str(op)


def _state_view(c: TranslatedContract, path: str, view: StateView) -> Iterator[e.ContractError]:
    b = c.manifest.buffer(view.buffer)
    if b is None or b.role not in _PERSISTENT_ROLES:
        yield e.UnknownBuffer(f"{path}.buffer", f"{view.buffer!r} is not a registered persistent buffer")
        return
    if view.byte_extent == 0:
        yield e.StateViewOutOfBounds(f"{path}.byte_extent", "a state view covers at least one byte")
    if view.row_stride and view.byte_extent > view.row_stride:
        yield e.StateViewOutOfBounds(f"{path}.byte_extent",
                                     f"extent {view.byte_extent} exceeds the row stride {view.row_stride}")
    nbytes = _nbytes(b)
    if nbytes is not None and view.byte_offset + view.byte_extent > nbytes:
        yield e.StateViewOutOfBounds(path, f"bytes [{view.byte_offset}, {view.byte_offset + view.byte_extent}) "
                                     f"lie outside {view.buffer!r} ({nbytes} bytes)")


def _nbytes(b: Buffer) -> int | None:
    """The buffer's size in bytes, or None while a cache buffer awaits load-time sizing."""
    if not isinstance(b.dtype, DType) or b.dtype == DType.UNSPECIFIED or 0 in b.shape:
        return None
    return math.prod(b.shape) * DTYPE_NBYTES[b.dtype]


def _speculative(path: str, g: Graph) -> Iterator[e.ContractError]:
    """B, D, W, P are independent; lanes are limited to min(D + 1, W); one length source."""
    is_speculative = g.operation == Operation.SPECULATIVE
    if is_speculative != (g.speculative is not None):
        yield e.SpeculativeDescriptorMismatch(
            f"{path}.speculative", "a SPECULATIVE graph needs a speculative descriptor" if is_speculative
            else f"only SPECULATIVE graphs carry a speculative descriptor, not {_name(g.operation)}")
    length_bindings = [b for b in g.value_bindings if b.source in LENGTH_SOURCES]
    if not is_speculative or g.speculative is None:
        return
    s = g.speculative
    if len(length_bindings) != 1:
        yield e.LengthSourceCount(f"{path}.value_bindings",
                                  f"a speculative program binds exactly one length source "
                                  f"(QUERY_LENGTH or SPECULATIVE_PREFIX_LIMIT), found {len(length_bindings)}")
    if (s.batch_capacity, s.packed_token_capacity) != (g.batch_capacity, g.packed_token_capacity):
        yield e.CapacityMismatch(f"{path}.speculative",
                                 f"descriptor B={s.batch_capacity}, P={s.packed_token_capacity} disagree with the "
                                 f"graph capacity B={g.batch_capacity}, P={g.packed_token_capacity}")
    if s.verify_tokens == 0:
        yield e.CapacityMismatch(f"{path}.speculative.verify_tokens", "W counts the pending token, so W >= 1")
    ceiling = min(s.draft_tokens + 1, s.verify_tokens)
    if s.lane_token_limit > ceiling:
        yield e.LaneLimitExceeded(f"{path}.speculative.lane_token_limit",
                                  f"{s.lane_token_limit} exceeds min(D + 1, W) = {ceiling}")
    if s.confidence_width not in (0, s.draft_tokens):
        yield e.ConfidenceWidthMismatch(f"{path}.speculative.confidence_width",
                                        f"{s.confidence_width} differs from the program's draft draws D = "
                                        f"{s.draft_tokens}")


def _copied_proposals(c: TranslatedContract, path: str, g: Graph) -> Iterator[e.ContractError]:
    """Copied proposals feed a SPECULATIVE program that draws proposals; its per-position grammar masks
    (CANDIDATE_GRAMMAR_MASKS) mask those proposals, one [mask_words] row per target position:
    [B, W, mask_words] i32 by submission row (or [S, W, mask_words] by physical request row)."""
    for j, b in enumerate(g.value_bindings):
        if b.source not in COPIED_PROPOSAL_SOURCES:
            continue
        bpath = f"{path}.value_bindings[{j}]"
        if g.speculative is None or g.speculative.draft_tokens == 0:
            yield e.CopiedProposalBinding(f"{bpath}.source", f"{ValueSource(b.source).name} feeds copied proposals, which only "
                                          "a SPECULATIVE graph drawing proposals (D >= 1) verifies")
            continue
        if b.source != ValueSource.CANDIDATE_GRAMMAR_MASKS:
            continue
        bound = {x.source for x in g.value_bindings}
        if not COPIED_TOKEN_SOURCES <= bound:
            yield e.CopiedProposalBinding(f"{bpath}.source", "CANDIDATE_GRAMMAR_MASKS masks copied proposals, "
                                          "but the graph binds no CANDIDATE_IDS and CANDIDATE_COUNT")
        desc = c.manifest.buffer(b.destination)
        if desc is None:
            continue  # reported as an unregistered destination
        rows = g.batch_capacity if b.indexing != Indexing.PHYSICAL_REQUEST_ROW else c.max_concurrency
        words = c.vocabulary.mask_words
        width = g.speculative.verify_tokens
        if (desc.dtype != DType.I32 or len(desc.shape) != 3 or desc.shape[0] < rows or desc.shape[1] != width
                or desc.shape[2] != words or b.indexing not in (Indexing.SUBMISSION_ROW, Indexing.ACTIVE_ROW,
                                                                  Indexing.PHYSICAL_REQUEST_ROW)):
            yield e.CopiedProposalBinding(
                f"{bpath}.destination",
                f"{b.destination!r} must be i32 [>= {rows}, W = {width}, mask_words = {words}] with a row indexing; "
                f"found {_dtype_name(desc.dtype)} {list(desc.shape)}, {_name_of(b.indexing)}")


def _name_of(value) -> str:
    return getattr(value, "name", str(value))


def _confidence_storage(c: TranslatedContract) -> Iterator[e.ContractError]:
    """proposal_confidence: contiguous FP32 [2, request_slots, draft_capacity] covering every width."""
    widths = [(i, g.speculative) for i, g in enumerate(c.graphs)
              if g.speculative is not None and g.speculative.confidence_width > 0]
    if not widths:
        return
    b = c.manifest.buffer(CONFIDENCE_BUFFER)
    path = f"model.graphs[{widths[0][0]}].speculative.confidence_width"
    if b is None:
        yield e.ConfidenceStorageInvalid(path, f"confidence is produced but the manifest has no {CONFIDENCE_BUFFER!r}")
        return
    widest = max(s.confidence_width for _, s in widths)
    if b.dtype != DType.F32 or len(b.shape) != 3 or b.shape[0] != 2 or b.shape[1] < c.max_concurrency \
            or b.shape[2] < widest or b.per_frame:
        yield e.ConfidenceStorageInvalid(
            f"manifest.buffers[{c.manifest.buffers.index(b)}]",
            f"{CONFIDENCE_BUFFER} must be one contiguous FP32 [2, request_slots >= {c.max_concurrency}, "
            f"draft_capacity >= {widest}] buffer; found {_dtype_name(b.dtype)} {list(b.shape)}")
    for i, s in widths:
        if s.draft_capacity and s.draft_capacity > b.shape[-1]:
            yield e.ConfidenceStorageInvalid(f"model.graphs[{i}].speculative.draft_capacity",
                                             f"{s.draft_capacity} exceeds the stored capacity {b.shape[-1]}")


def _dtype_name(d) -> str:
    return d.name if isinstance(d, DType) else str(d)


def _tuned(c: TranslatedContract, path: str, g: Graph) -> Iterator[e.ContractError]:
    """Tuned buffers match their descriptor exactly and overlap no input, writable state or cache."""
    if g.tuned_bindings and c.version < 3:
        yield e.FieldNotInVersion(f"{path}.tuned_bindings", f"tuned bindings arrive in version 3, not {c.version}")
    producers = {h.name for h in c.manifest.tuning_catalog}
    inputs = {b.destination for b in g.value_bindings}
    written = {a.view.buffer for a in g.state_accesses if a.access in (Access.WRITE, Access.READ_WRITE)}
    cache = {p for h in c.cache.histories for p in h.planes}
    for j, t in enumerate(g.tuned_bindings):
        tpath = f"{path}.tuned_bindings[{j}]"
        if t.producer not in producers:
            yield e.UnknownProducer(f"{tpath}.producer", f"{t.producer!r} is not in the tuning catalog")
        overlaps = [what for overlap, what in ((inputs, "a request input"), (written, "writable graph state"),
                                               (cache, "cache storage")) if t.buffer in overlap]
        for what in overlaps:  # first: the overlap says why the buffer cannot be the producer's
            yield e.TunedOutputOverlap(f"{tpath}.buffer", f"{t.buffer!r} is also {what}; a tuned producer's "
                                       "output cannot overlap request inputs, writable graph state or cache storage")
        b = c.manifest.buffer(t.buffer)
        if not overlaps and (b is None or b.role != BufferRole.TUNED or b.producer != t.producer):
            found = "no such buffer" if b is None else f"role {_role(b.role)}, producer {b.producer!r}"
            yield e.TunedDescriptorMismatch(f"{tpath}.buffer",
                                            f"{t.buffer!r} must be a TUNED buffer produced by {t.producer!r} ({found})")


def _role(r) -> str:
    return r.name if isinstance(r, BufferRole) else str(r)


# ----------------------------------------------------------------------------- frontend


def _images(c: TranslatedContract) -> Iterator[e.ContractError]:
    """The image selectors' data: CLIP preparation needs its settings (and NONE none); the feature-span
    layout one feature id, a declared image sentinel, and a vision contract with feature capacity."""
    f, settings, path = c.frontend, c.frontend.image_settings, "model.frontend.image_settings"
    if f.image_preparation == ImagePreparation.CLIP:
        if settings.image_size < 1 or settings.patch_size < 1 or settings.image_size % settings.patch_size:
            yield e.IncompatibleFrontend(f"{path}.patch_size", f"CLIP preparation needs a patch size "
                                         f"({settings.patch_size}) dividing the image size ({settings.image_size})")
        if len(settings.mean) != 3 or len(settings.std) != 3 or min(settings.std, default=0.0) <= 0:
            yield e.IncompatibleFrontend(f"{path}.std", "CLIP preparation needs 3 channel means and 3 positive stds")
    elif settings != type(settings)():
        yield e.IncompatibleFrontend(path, f"image settings without an image preparation "
                                     f"({ImagePreparation(f.image_preparation).name})")
    if f.image_layout == ImageLayout.FEATURE_SPAN:
        ids = f.image_feature_ids
        if len(ids) != 1 or ids[0] not in c.input_vocabulary.image_sentinels:
            yield e.IncompatibleFrontend("model.frontend.image_token_layout.feature_ids",
                                         f"the feature-span layout needs one feature id among the image sentinels, "
                                         f"got {list(ids)}")
        if c.vision.features_per_window < 1 or c.vision.feature_slots < 1:
            yield e.IncompatibleFrontend("model.vision", "the feature-span layout needs feature slots and "
                                         "features per window")
    if (f.image_layout == ImageLayout.NONE) != (f.image_preparation == ImagePreparation.NONE):
        yield e.IncompatibleFrontend("model.frontend.image_layout", "an image preparation and an image layout are "
                                     "selected together or not at all")


def _frontend(c: TranslatedContract) -> Iterator[e.ContractError]:
    f = c.frontend
    checks = (("tool_parser", f.tool_parser, ToolParser, "tool parser"),
              ("reasoning_parser", f.reasoning_parser, ReasoningParser, "reasoning parser"),
              ("image_preparation", f.image_preparation, ImagePreparation, "image preparation"),
              ("image_layout", f.image_layout, ImageLayout, "image layout"))
    bad = False
    for name, value, kind, what in checks:
        if (p := _enum_problem(f"model.frontend.{name}", value, kind, what)) is not None:
            bad = True
            yield p
    for j, eos in enumerate(f.eos_token_ids):
        if eos >= c.vocabulary.sampled_tokens:
            yield e.InvalidGeometry(f"model.frontend.eos_token_ids[{j}]",
                                    f"EOS id {eos} lies outside the sampled range {c.vocabulary.sampled_tokens}")
    if not f.eos_token_ids:
        yield e.InvalidGeometry("model.frontend.eos_token_ids", "a core declares at least one EOS id")
    if bad:
        return
    yield from _images(c)
    if f.reasoning_parser == ReasoningParser.XTML_THINK and f.tool_parser != ToolParser.XTML:
        yield e.IncompatibleFrontend("model.frontend.reasoning_parser",
                                     f"XTML think reasoning requires the XTML tool parser, not {f.tool_parser.name}")
    recipient = f.reasoning_parser == ReasoningParser.RECIPIENT_HEADER
    atem = f.tool_parser == ToolParser.ATEM
    if recipient != atem:
        path = "model.frontend.reasoning_parser" if recipient else "model.frontend.tool_parser"
        yield e.IncompatibleFrontend(path, "recipient-header reasoning and the ATEM tool syntax are only used together "
                                     f"(found {f.reasoning_parser.name} with {f.tool_parser.name})")
    marker = f.reasoning_syntax.terminal_marker
    if marker and marker != f.tool_syntax.opener:
        yield e.TerminalMarkerMismatch("model.frontend.reasoning_syntax.terminal_marker",
                                       f"{marker!r} is not the tool syntax's opener {f.tool_syntax.opener!r}")
