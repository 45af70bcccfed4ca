"""Shared value-binding packing (host side, NumPy only, engine-agnostic).

Owns the meaning of every ValueBinding a text graph may declare: `GraphPacking.resolve` checks each
binding's destination (a registered TRANSPORT buffer), source, dtype, extent and indexing once at
load, and `GraphPacking.pack(lanes, buffers)` fills the destinations for one round. Both runtimes
use it: the reference engine over plain arrays, the production runtime over pinned staging arrays.
A round's lanes are read once into `LaneColumns` (NumPy columns, shared by whoever packs or validates
the same tuple of lanes), and each binding fills its whole destination from them with array writes.

One round is a list of `LaneInput`s in submission order. Each lane consumes `tokens` (its next
tokens: prompt tokens, then at most one pending token, the last sampled id) starting at sequence
position `consumed`. Rows are laid out as:

    submission rows   [lane 0, lane 1, ..., lane n-1, padding ... up to B)
    packed tokens     [lane 0 tokens..., lane 1 tokens..., ..., padding ... up to P)
    physical rows     row = lane.slot (other rows untouched)

Indexing (the specification's words): SCALAR writes one value; SUBMISSION_ROW writes a row per
capacity row and `padding` in the tail; ACTIVE_ROW writes the active rows only (the tail keeps its
bytes); PHYSICAL_REQUEST_ROW writes the lane's slot row; PACKED_TOKEN writes a row per packed token
and `padding` in the tail. `offset` is added to every supplied integer value (never to padding).
A program tensor bound to a buffer views the buffer's leading rows, so a graph of capacity B
packs rows [0, B) of a buffer sized for the largest capacity.

Source layouts (the trailing extent of the destination row):

    SLOT, GENERATION, QUERY_LENGTH, SAMPLING_DECISION (0/1), CONSUMED_TOKEN_ENDPOINT (tokens consumed
        before the round), OUTPUT_LIMIT, CANDIDATE_COUNT (copied proposals) -> one integer per row
    LIVE_ROW_COUNT                                                       -> one integer (SCALAR)
    PROMPT_TOKENS, PENDING_TOKEN, PROMPT_POSITIONS                       -> one integer per packed token
        (PROMPT_TOKENS fills the prompt tokens' rows and `padding` in the pending token's row,
        PENDING_TOKEN that row, so two bindings may share one destination; PROMPT_POSITIONS is each
        packed token's sequence position)
    SCORED_PREFILL_TARGETS                                               -> one integer per packed token:
        the prompt token after the row's own (position + 1 of the lane's full prompt), `padding`
        past the prompt's last token
    IMAGE_CONTEXT_INDICES                                                -> one integer per packed token:
        the feature-store row of a prompt row's position (`LaneInput.image_context`), `padding` for
        text positions (-1 there), pending rows and lanes without images
    IMAGE_TENSOR (`image_output` names it), IMAGE_FEATURE_INDICES        -> SCALAR: the whole buffer
        from the submission's image (`LaneInput.image`, one lane at most): the layout's named tensor,
        or each encoder row's feature-store row; `padding` everywhere when no lane carries an image
        (then the encoder's rows all lie in no group and write no feature)
    PENDING_TOKEN with a row indexing                                    -> the lane's pending token
    PAGE_TABLE                                                           -> [pages] page ids, padded
    SEED_BITS                                                            -> [2] (low, high 32 bits) of
        the uint64 seed, in a 32-bit integer row; or one 64-bit integer
    GRAMMAR_MASK                                                         -> [mask_words] int32 allowed bits
        (all set when the lane has no grammar)
    SLOT, GENERATION, ... with PACKED_TOKEN indexing                     -> each token carries its lane's value
    SAMPLING_PARAMETERS -> [7] float: temperature, top_p, top_k, min_p, repetition, presence and
        frequency penalty (SAMPLING_PARAMETER_ORDER)
    EOS_IDS                                                              -> [k] ids, padded
    CANDIDATE_IDS                                                        -> [D] copied proposal ids, padded
    CANDIDATE_GRAMMAR_MASKS                                              -> [W, mask_words] int32: row k the
        mask of position k (after the pending token and k copied ids); all set for a lane without
        masks, none set past a lane's masks (a position the host has no mask for allows nothing)
    PROMPT_HISTOGRAM                                                     -> [histogram_width] counts
    CONSTANT                                                             -> the declared constants,
        one per trailing element (a single constant fills the row)
    INACTIVE_PADDING                                                     -> `padding` everywhere
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.lanes import ROW_SCALARS, LaneColumns, LaneInput, LaneOverflow, PackingError

V = contract_pb2  # enum namespace


class UnsupportedValueSource(PackingError):
    """The binding's source is one this packer does not supply (e.g. the image feature slot)."""


class ShiftedPageTableView(PackingError):
    """A page-table view declares a nonzero page offset, which no runtime applies yet."""


class UnservedHistoryKind(PackingError):
    """A history region of a kind, or declared in a way, no runtime serves."""


# The history kinds the programs' operators and the page cache serve: paged key/value planes, sliding
# windows over them, paged latent planes (docs/latent.md), recurrent state rows (docs/recurrent.md) and
# continuation storage (partial pages of the paged planes, docs/snapshots.md).
SERVED_HISTORY_KINDS = (V.HISTORY_KIND_PAGED_KEY_VALUE, V.HISTORY_KIND_PAGED_LATENT, V.HISTORY_KIND_SLIDING_WINDOW,
                        V.HISTORY_KIND_RECURRENT, V.HISTORY_KIND_CONTINUATION)
# The kinds whose planes are paged: records of token positions in the pages of a lane's page table.
PAGED_HISTORY_KINDS = (V.HISTORY_KIND_PAGED_KEY_VALUE, V.HISTORY_KIND_PAGED_LATENT, V.HISTORY_KIND_SLIDING_WINDOW)
# The operations whose programs read and write a recurrent region's live state rows.
RECURRENT_OPERATIONS = (V.OPERATION_PREFILL, V.OPERATION_SCORED_PREFILL, V.OPERATION_DECODE, V.OPERATION_MIXED,
                        V.OPERATION_RESTORATION)


def check_history_regions(serving: contract_pb2.ServingContract,
                          manifest: manifest_pb2.ExecutionManifest | None = None) -> None:
    """Refuse, in one line naming it, a history region of a kind this runtime does not serve: a core
    whose recurrent or latent state were silently ignored would be served wrong. A CONTINUATION region
    is served only as the snapshot storage of docs/snapshots.md (`continuation_problem`)."""
    histories = list(enumerate(serving.model.cache.histories))
    # the continuation region last: its planes mirror the paged regions', which are checked first
    for i, region in sorted(histories, key=lambda entry: entry[1].kind == V.HISTORY_KIND_CONTINUATION):
        kind = V.HistoryKind.Name(region.kind) if region.kind in V.HistoryKind.values() else f"#{region.kind}"
        where = f"model.cache.histories[{i}] ({region.name!r}): {kind.removeprefix('HISTORY_KIND_')} histories"
        if region.kind not in SERVED_HISTORY_KINDS:
            raise UnservedHistoryKind(
                f"{where} are not served by this runtime (it serves PAGED_KEY_VALUE, PAGED_LATENT, SLIDING_WINDOW, "
                "RECURRENT and CONTINUATION regions)")
        if region.kind in (V.HISTORY_KIND_PAGED_KEY_VALUE, V.HISTORY_KIND_SLIDING_WINDOW) \
                and region.tokens_per_record != 1:
            # the paged operators and the page cache keep one record per token position
            raise UnservedHistoryKind(f"{where} with tokens_per_record = {region.tokens_per_record} are not served "
                                      "by this runtime (it keeps one record per token)")
        if region.kind == V.HISTORY_KIND_PAGED_LATENT:
            problem = latent_problem(serving, manifest, region)
            if problem is not None:
                raise UnservedHistoryKind(f"{where} are not served by this runtime as declared: {problem}")
        if region.kind == V.HISTORY_KIND_RECURRENT:
            problem = recurrent_problem(serving, manifest, region)
            if problem is not None:
                raise UnservedHistoryKind(f"{where} are not served by this runtime as declared: {problem}")
        if region.kind == V.HISTORY_KIND_CONTINUATION:
            problem = continuation_problem(serving, manifest, region)
            if problem is not None:
                raise UnservedHistoryKind(f"{where} are not served by this runtime except as snapshot storage: "
                                          f"{problem}")


def records_per_page(page_tokens: int, tokens_per_record: int) -> int | None:
    """The records one page of a paged plane holds: `page_tokens / tokens_per_record` (the region's
    compression ratio), or None when the ratio does not divide a page."""
    if tokens_per_record < 1 or page_tokens % tokens_per_record:
        return None
    return page_tokens // tokens_per_record


def latent_problem(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest | None,
                   region: contract_pb2.HistoryRegion) -> str | None:
    """Why paged latent `region` is not one this runtime serves, or None: one record a token
    (`tokens_per_record` 1: the operators write a record at each position; compressing several
    tokens into a record is not built) and two planes, the latent and the rotary key, each a CACHE
    buffer of pages holding page_tokens / tokens_per_record records of one shared head, in one dtype."""
    page_tokens = serving.model.cache.page_tokens
    records = records_per_page(page_tokens, region.tokens_per_record)
    if records is None:
        return (f"tokens_per_record = {region.tokens_per_record} does not divide a page of {page_tokens} tokens "
                "into records")
    if region.tokens_per_record != 1:
        return (f"tokens_per_record = {region.tokens_per_record} (the latent operators write one record a token; "
                "compressing several tokens into a record is not built)")
    if len(region.planes) != 2:
        return f"{len(region.planes)} planes (a latent region names its latent plane and its rotary-key plane)"
    if manifest is None:
        return None
    buffers = {b.name: b for b in manifest.buffers}
    dtypes = set()
    for plane in region.planes:
        b = buffers.get(plane)
        if b is None or b.role != manifest_pb2.BUFFER_ROLE_CACHE or len(b.shape) != 4:
            return f"plane {plane!r} is not a CACHE buffer [pages, records, 1, width]"
        if b.shape[1] != records or b.shape[2] != 1:
            return (f"plane {plane!r} {list(b.shape)} does not hold pages of {records} records "
                    f"({page_tokens} tokens at {region.tokens_per_record} a record) of one shared head")
        dtypes.add(b.dtype)
    if len(dtypes) != 1:
        return "its planes differ in dtype"
    return None


def state_rows_per_request(serving: contract_pb2.ServingContract) -> int:
    """The maximum state_rows_per_request among the graphs (the specification's partition)."""
    return max((g.state_rows_per_request for g in serving.model.graphs), default=0)


def has_recurrent_state(serving: contract_pb2.ServingContract) -> bool:
    """Whether the core keeps recurrent state (a RECURRENT history region)."""
    return any(r.kind == V.HISTORY_KIND_RECURRENT for r in serving.model.cache.histories)


def recurrent_problem(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest | None,
                      region: contract_pb2.HistoryRegion) -> str | None:
    """Why recurrent `region` is not one this runtime serves, or None: its planes are STATE buffers
    holding every execution row (max_concurrency x state rows per request) and, with RESTORATION
    graphs, every snapshot row after them; every PREFILL, SCORED_PREFILL, DECODE, MIXED and
    RESTORATION graph declares those state rows, binds LIVE_STATE_ROWS and reads and writes every
    plane; no SPECULATIVE graph (a speculative round's commit of recurrent state is not built)."""
    if region.tokens_per_record:
        return f"tokens_per_record = {region.tokens_per_record} (a recurrent region keeps no per-token records)"
    if not region.planes:
        return "it names no state planes"
    rows = state_rows_per_request(serving)
    if rows < 1:
        return "no graph declares state_rows_per_request"
    for graph in serving.model.graphs:
        if graph.operation == V.OPERATION_SPECULATIVE:
            return f"graph {graph.name!r} is SPECULATIVE (speculative rounds over recurrent state are not built)"
        if graph.operation not in RECURRENT_OPERATIONS:
            continue
        if graph.state_rows_per_request != rows:
            return f"graph {graph.name!r} declares {graph.state_rows_per_request} state rows per request, not {rows}"
        if not any(b.source == V.VALUE_SOURCE_LIVE_STATE_ROWS for b in graph.value_bindings):
            return f"graph {graph.name!r} binds no LIVE_STATE_ROWS"
        written = {a.view.buffer for a in graph.state_accesses if a.access == V.ACCESS_READ_WRITE}
        missing = [plane for plane in region.planes if plane not in written]
        if missing:
            return f"graph {graph.name!r} does not read and write plane {missing[0]!r}"
    if manifest is None:
        return None
    restoration = any(g.operation == V.OPERATION_RESTORATION for g in serving.model.graphs)
    needed = serving.max_concurrency * rows + (serving.snapshot_capacity if restoration else 0)
    buffers = {b.name: b for b in manifest.buffers}
    for plane in region.planes:
        b = buffers.get(plane)
        if b is None or b.role != manifest_pb2.BUFFER_ROLE_STATE or not b.shape:
            return f"plane {plane!r} is not a STATE buffer"
        if b.shape[0] < needed:
            return f"plane {plane!r} holds {b.shape[0]} state rows, the partition needs {needed}"
    return None


class UnservedVision(PackingError):
    """A core declares image inputs in a form no runtime serves (docs/vision.md)."""


SERVED_IMAGE_PREPARATIONS = (V.IMAGE_PREPARATION_UNSPECIFIED, V.IMAGE_PREPARATION_NONE, V.IMAGE_PREPARATION_CLIP)
SERVED_IMAGE_LAYOUTS = (V.IMAGE_LAYOUT_UNSPECIFIED, V.IMAGE_LAYOUT_NONE, V.IMAGE_LAYOUT_FEATURE_SPAN)


def vision_declared(serving: contract_pb2.ServingContract) -> bool:
    """Whether the core declares image inputs (feature slots, patch capacities or image sentinels)."""
    model = serving.model
    return bool(model.vision.feature_slots or model.vision.patch_capacities or model.input_vocabulary.image_sentinels)


def encodes_images(graph: contract_pb2.GraphContract) -> bool:
    """Whether a graph encodes a submission's image (it binds the layout's tensors, IMAGE_TENSOR)."""
    return any(b.source == V.VALUE_SOURCE_IMAGE_TENSOR for b in graph.value_bindings)


def check_vision(serving: contract_pb2.ServingContract) -> None:
    """Refuse, in one line naming the field, image inputs in a form the engines do not serve: an image
    preparation or layout without an implementation here, or a vision core whose PREFILL graphs do
    not all encode an image (an engine encodes each image in a PREFILL round of its request; docs/vision.md)."""
    model = serving.model
    if model.frontend.image_preparation not in SERVED_IMAGE_PREPARATIONS:
        raise UnservedVision(f"model.frontend.image_preparation: {model.frontend.image_preparation} is not served "
                             "by this runtime")
    if model.frontend.image_layout not in SERVED_IMAGE_LAYOUTS:
        raise UnservedVision(f"model.frontend.image_layout: {model.frontend.image_layout} is not served by this "
                             "runtime")
    if not vision_declared(serving):
        return
    for i, graph in enumerate(model.graphs):
        if graph.operation == V.OPERATION_PREFILL and not encodes_images(graph):
            raise UnservedVision(f"model.graphs[{i}] ({graph.name}): a vision core's PREFILL graph binds no "
                                 "IMAGE_TENSOR (images are encoded in PREFILL rounds)")


def cache_planes(serving: contract_pb2.ServingContract) -> list[str]:
    """The cache planes of the paged regions (key/value, latent and sliding-window), in region order."""
    return [plane for region in serving.model.cache.histories if region.kind in PAGED_HISTORY_KINDS
            for plane in region.planes]


def continuation_planes(serving: contract_pb2.ServingContract) -> dict[str, str]:
    """Each cache plane's continuation plane (the CONTINUATION region names them in `cache_planes`
    order; `continuation_problem` checks it at load); empty without continuation storage."""
    regions = [r for r in serving.model.cache.histories if r.kind == V.HISTORY_KIND_CONTINUATION]
    planes = cache_planes(serving)
    if not regions or len(regions[0].planes) != len(planes):
        return {}
    return dict(zip(planes, regions[0].planes, strict=True))


def snapshot_rows(max_concurrency: int, snapshot_capacity: int, state_rows_per_request: int) -> range:
    """The continuation rows snapshots use. The specification's partition: the first
    `max_concurrency * state_rows_per_request` rows (`state_rows_per_request`: the maximum among the
    selected graphs) are execution rows, live state of running requests; the next
    `snapshot_capacity` are snapshot rows."""
    first = max_concurrency * state_rows_per_request
    return range(first, first + snapshot_capacity)


def continuation_problem(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest | None,
                         region: contract_pb2.HistoryRegion) -> str | None:
    """Why `region` is not the one continuation storage this runtime serves, or None: exactly one
    continuation plane per cache plane, in the same order, each a STATE buffer of page records of
    its cache plane's dtype and page shape covering every snapshot row, and RESTORATION graphs that
    snapshot and restore them."""
    regions = [r for r in serving.model.cache.histories if r.kind == V.HISTORY_KIND_CONTINUATION]
    if regions[0] is not region and regions[0] != region:
        return f"a second continuation region (the first, {regions[0].name!r}, holds every plane's partial pages)"
    if not any(g.operation == V.OPERATION_RESTORATION for g in serving.model.graphs):
        return "the core has no RESTORATION graph to snapshot and restore its rows"
    if serving.snapshot_capacity < 1:
        return "snapshot_capacity is 0"
    planes = cache_planes(serving)
    if len(region.planes) != len(planes):
        return f"{len(region.planes)} planes for the {len(planes)} cache planes"
    if manifest is None:
        return None
    buffers = {b.name: b for b in manifest.buffers}
    rows = snapshot_rows(serving.max_concurrency, serving.snapshot_capacity, state_rows_per_request(serving))
    for plane, cache in zip(region.planes, planes, strict=True):
        b, c = buffers.get(plane), buffers.get(cache)
        if b is None or c is None or b.role != manifest_pb2.BUFFER_ROLE_STATE:
            return f"plane {plane!r} is not a STATE buffer beside cache plane {cache!r}"
        if b.dtype != c.dtype or list(b.shape[1:]) != list(c.shape[1:]) or b.shape[0] < rows.stop:
            return (f"plane {plane!r} {list(b.shape)} does not hold {rows.stop} page records of cache plane "
                    f"{cache!r} {list(c.shape)}")
    return None


def check_page_table_views(serving: contract_pb2.ServingContract) -> None:
    """Refuse, in one line naming it, a page-table view with a nonzero `page_offset`: packing writes
    every view's rows unshifted, so such a core would be served with the wrong pages. (Helios's own
    speculative cores keep the draft in step with the target: their one view is unshifted.)"""
    for i, view in enumerate(serving.model.cache.page_table_views):
        if view.page_offset:
            raise ShiftedPageTableView(
                f"model.cache.page_table_views[{i}].page_offset = {view.page_offset} ({view.destination!r}): "
                "shifted page-table views are not supported by this runtime")


class BindingExtentMismatch(PackingError):
    """The destination buffer's dtype or extents cannot hold the source under the declared indexing."""


NUMPY_DTYPES: dict[int, np.dtype] = {
    manifest_pb2.DTYPE_F32: np.dtype(np.float32),
    manifest_pb2.DTYPE_BF16: np.dtype(np.uint16),  # bit patterns
    manifest_pb2.DTYPE_F16: np.dtype(np.float16),
    manifest_pb2.DTYPE_I32: np.dtype(np.int32),
    manifest_pb2.DTYPE_I64: np.dtype(np.int64),
    manifest_pb2.DTYPE_U8: np.dtype(np.uint8),
    manifest_pb2.DTYPE_U32: np.dtype(np.uint32),
    manifest_pb2.DTYPE_F64: np.dtype(np.float64),
}
_INTEGER_DTYPES = {manifest_pb2.DTYPE_I32, manifest_pb2.DTYPE_I64, manifest_pb2.DTYPE_U32, manifest_pb2.DTYPE_U8}
_FLOAT_DTYPES = {manifest_pb2.DTYPE_F32, manifest_pb2.DTYPE_F64}

SAMPLING_PARAMETER_ORDER = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                            "presence_penalty", "frequency_penalty")


_IMAGE_SOURCES = (V.VALUE_SOURCE_IMAGE_TENSOR, V.VALUE_SOURCE_IMAGE_FEATURE_INDICES)
_ROW_INDEXINGS = (V.INDEXING_SUBMISSION_ROW, V.INDEXING_ACTIVE_ROW, V.INDEXING_PHYSICAL_REQUEST_ROW)

_ROW_VECTORS = (V.VALUE_SOURCE_PAGE_TABLE, V.VALUE_SOURCE_SEED_BITS, V.VALUE_SOURCE_SAMPLING_PARAMETERS,
                V.VALUE_SOURCE_EOS_IDS, V.VALUE_SOURCE_PROMPT_HISTOGRAM, V.VALUE_SOURCE_GRAMMAR_MASK,
                V.VALUE_SOURCE_CANDIDATE_IDS, V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS)
_TOKEN_SOURCES = (V.VALUE_SOURCE_PROMPT_TOKENS, V.VALUE_SOURCE_PENDING_TOKEN, V.VALUE_SOURCE_PROMPT_POSITIONS,
                  V.VALUE_SOURCE_SCORED_PREFILL_TARGETS, V.VALUE_SOURCE_IMAGE_CONTEXT_INDICES)


def _source_name(source: int) -> str:
    return V.ValueSource.Name(source) if source in V.ValueSource.values() else f"source #{source}"


def _indexing_name(indexing: int) -> str:
    return V.Indexing.Name(indexing) if indexing in V.Indexing.values() else f"indexing #{indexing}"


@dataclass(frozen=True, slots=True)
class ResolvedBinding:
    """One binding with everything checked: where it writes, how many rows, what each row holds."""

    destination: str
    source: int
    indexing: int
    offset: int
    padding: int
    constants: tuple[int, ...]
    dtype: np.dtype
    rows: int  # rows this graph addresses (B, P, physical rows or 1)
    row_shape: tuple[int, ...]  # trailing extents of one row
    state_rows: int = 0  # LIVE_STATE_ROWS: the graph's state rows per request (a lane's rows slot * R + j)
    image_output: str = ""  # IMAGE_TENSOR: the layout output's name

    def write(self, buffer: np.ndarray, lanes: Sequence[LaneInput], columns: LaneColumns | None = None) -> None:
        """Fill this binding's rows of `buffer` for `lanes`; `columns` is their `LaneColumns` (built here
        when not given: a caller packing several bindings of one round builds it once)."""
        if self.indexing == V.INDEXING_SCALAR:
            view = buffer.reshape(1, -1)
        else:
            view = buffer.reshape(buffer.shape[0], -1)[: self.rows].reshape((self.rows, *self.row_shape))
        if self.source == V.VALUE_SOURCE_INACTIVE_PADDING:
            view[...] = self.padding
            return
        if self.source in _IMAGE_SOURCES:
            self._write_image(view, lanes)
            return
        if self.indexing == V.INDEXING_SCALAR:
            view[0] = self._scalar(lanes)
            return
        if columns is None:
            columns = LaneColumns(lanes)
        if self.indexing == V.INDEXING_PACKED_TOKEN:
            self._write_tokens(view, columns)
            return
        count = len(lanes)
        if self.indexing == V.INDEXING_PHYSICAL_REQUEST_ROW:
            rows = columns.slots
            top = int(rows.max()) if count else -1
        else:
            rows = np.arange(count)
            top = count - 1
        if top >= self.rows:
            raise LaneOverflow(f"{self.destination}: row {top} outside {self.rows} rows")
        if self.indexing == V.INDEXING_SUBMISSION_ROW:
            view[count:] = self.padding
        if not count:
            return
        source = self.source
        if source == V.VALUE_SOURCE_LIVE_STATE_ROWS:  # the lane's execution rows of the partition
            first = columns.slots.astype(np.int64) * self.state_rows + self.offset
            values = first[:, None] + np.arange(self.state_rows)
            view[rows] = values.reshape((count, *self.row_shape))
            return
        if source in ROW_SCALARS:
            values = columns.scalar(source) + self.offset
        elif source == V.VALUE_SOURCE_PENDING_TOKEN:
            values = np.where(columns.has_pending, columns.pending + self.offset, self.padding)
        elif source == V.VALUE_SOURCE_CONSTANT:
            view[rows] = self._constants_row()
            return
        elif source == V.VALUE_SOURCE_GRAMMAR_MASK:
            self._write_masks(view, rows, lanes)
            return
        elif source == V.VALUE_SOURCE_CANDIDATE_IDS or source == V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS:
            # lanes without copied proposals (or without per-position masks) take what `_row` gives them,
            # padding (or every bit set), in one assignment; the others row by row
            ids = source == V.VALUE_SOURCE_CANDIDATE_IDS
            own = [i for i, lane in enumerate(lanes) if (lane.copied if ids else lane.candidate_masks is not None)]
            if len(own) < count:
                view[np.delete(rows, own) if own else rows] = np.asarray(self.padding if ids else -1,
                                                                         dtype=np.int64).astype(self.dtype)
            for i in own:
                view[int(rows[i])] = self._row(lanes[i]).reshape(self.row_shape)
            return
        else:  # the vector sources: one row per lane
            for row, lane in zip(rows.tolist(), lanes, strict=True):
                view[row] = self._row(lane).reshape(self.row_shape)
            return
        view[rows] = values.reshape((count,) + (1,) * len(self.row_shape))

    def _write_masks(self, view: np.ndarray, rows: np.ndarray, lanes: Sequence[LaneInput]) -> None:
        """Grammar masks: every bit set for lanes without a grammar (one assignment), each mask row else."""
        width = self.row_shape[-1] if self.row_shape else 1
        masked = [i for i, lane in enumerate(lanes) if lane.grammar_mask is not None]
        if len(masked) < len(lanes):
            free = rows if not masked else np.delete(rows, masked)
            view[free] = -1  # every bit set: every token allowed
        for i in masked:
            mask = lanes[i].grammar_mask
            assert mask is not None
            if len(mask) != width:
                raise LaneOverflow(f"{self.destination}: grammar mask of {len(mask)} words, rows hold {width}")
            view[int(rows[i])] = np.asarray(mask, dtype=np.int64).astype(self.dtype)

    def _write_image(self, view: np.ndarray, lanes: Sequence[LaneInput]) -> None:
        """The submission's image tensor or feature rows into the whole (SCALAR) buffer."""
        images = [lane.image for lane in lanes if lane.image is not None]
        if len(images) > 1:
            raise LaneOverflow(f"{self.destination}: {len(images)} lanes carry an image; a submission encodes one")
        if not images:
            view[...] = self.padding
            return
        image = images[0]
        if self.source == V.VALUE_SOURCE_IMAGE_FEATURE_INDICES:
            rows = np.asarray(image.feature_rows, dtype=np.int64)
            value = np.where(rows >= 0, rows + self.offset, self.padding)
        else:
            value = image.tensor(self.image_output)
            if value is None:
                raise PackingError(f"{self.destination}: the image has no layout output {self.image_output!r}")
        if np.asarray(value).size != view.size:
            raise LaneOverflow(f"{self.destination}: the image's {self.image_output or 'feature rows'} has "
                               f"{np.asarray(value).size} elements, the buffer {view.size}")
        if self.dtype == np.uint16:  # a BF16 buffer (NUMPY_DTYPES): round to nearest even bit patterns
            value = _bf16_bits(np.asarray(value, np.float32))
        view[...] = np.asarray(value).reshape(view.shape).astype(self.dtype)

    def _scalar(self, lanes: Sequence[LaneInput]) -> np.ndarray:
        if self.source == V.VALUE_SOURCE_LIVE_ROW_COUNT:
            return np.full(self.row_shape, len(lanes) + self.offset, dtype=self.dtype)
        return self._constants_row()

    def _constants_row(self) -> np.ndarray:
        count = math.prod(self.row_shape)
        values = self.constants if len(self.constants) == count else self.constants * count
        return (np.asarray(values, dtype=np.int64) + self.offset).astype(self.dtype).reshape(self.row_shape)

    def _row(self, lane: LaneInput) -> np.ndarray:
        source = self.source
        if source in ROW_SCALARS:
            return np.full(self.row_shape, ROW_SCALARS[source](lane) + self.offset, dtype=self.dtype)
        if source == V.VALUE_SOURCE_PENDING_TOKEN:
            token = lane.pending_token
            value = self.padding if token is None else token + self.offset
            return np.full(self.row_shape, value, dtype=self.dtype)
        if source == V.VALUE_SOURCE_CONSTANT:
            return self._constants_row()
        width = self.row_shape[-1] if self.row_shape else 1
        if source == V.VALUE_SOURCE_PAGE_TABLE:
            return self._padded(lane.page_ids, width, "page ids")
        if source == V.VALUE_SOURCE_EOS_IDS:
            return self._padded(lane.eos_ids, width, "EOS ids")
        if source == V.VALUE_SOURCE_CANDIDATE_IDS:
            return self._padded(lane.copied, width, "copied proposals")
        if source == V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS:
            return self._candidate_masks(lane)
        if source == V.VALUE_SOURCE_SEED_BITS:
            seed = lane.seed & 0xFFFF_FFFF_FFFF_FFFF
            if width == 2:
                words = np.array([seed & 0xFFFF_FFFF, seed >> 32], dtype=np.uint32)
                return words.view(np.int32).astype(self.dtype) if self.dtype == np.int32 else words.astype(self.dtype)
            return np.array([seed], dtype=np.uint64).view(np.int64).astype(self.dtype)
        if source == V.VALUE_SOURCE_SAMPLING_PARAMETERS:
            values = [float(getattr(lane.sampling, name)) for name in SAMPLING_PARAMETER_ORDER]
            return np.asarray(values, dtype=self.dtype)
        if source == V.VALUE_SOURCE_GRAMMAR_MASK:
            if lane.grammar_mask is None:
                return np.full(width, -1, dtype=self.dtype)  # every bit set: every token allowed
            if len(lane.grammar_mask) != width:
                raise LaneOverflow(f"{self.destination}: grammar mask of {len(lane.grammar_mask)} words, rows hold {width}")
            return np.asarray(lane.grammar_mask, dtype=np.int64).astype(self.dtype)
        if source == V.VALUE_SOURCE_PROMPT_HISTOGRAM:
            ids = np.asarray(lane.prompt_token_ids, dtype=np.int64)
            low, high = (int(ids.min()), int(ids.max())) if ids.size else (0, 0)
            if low < 0 or high >= width:
                bad = high if high >= width else low
                raise LaneOverflow(f"{self.destination}: prompt id {bad} outside histogram width {width}")
            # NOTE: bincount, not np.add.at: 3 us against 250 for 2,048 ids (48 against 158 us at a
            # vocabulary of 151,936, where the allocation dominates), measured on the development CPU
            return np.bincount(ids, minlength=width).astype(self.dtype, copy=False)
        raise UnsupportedValueSource(f"{self.destination}: {_source_name(source)} has no row form")

    def _candidate_masks(self, lane: LaneInput) -> np.ndarray:
        masks = lane.candidate_masks
        if masks is None:
            return np.full(self.row_shape, -1, dtype=self.dtype)  # every bit set at every position
        positions, words = self.row_shape
        if len(masks) > positions or any(len(mask) != words for mask in masks):
            raise LaneOverflow(f"{self.destination}: {len(masks)} position masks of "
                               f"{sorted({len(m) for m in masks})} words, rows hold {positions} of {words}")
        # NOTE: positions past the host's masks allow nothing: a lane's limit never reaches them, and
        # a program that judged one anyway would emit no token (a failed round) rather than a free one
        rows = np.zeros(self.row_shape, dtype=self.dtype)
        if masks:
            rows[:len(masks)] = np.asarray(masks, dtype=np.int64).astype(self.dtype)
        return rows

    def _padded(self, values: Sequence[int], width: int, what: str) -> np.ndarray:
        if len(values) > width:
            raise LaneOverflow(f"{self.destination}: {len(values)} {what} exceed the row width {width}")
        row = np.full(width, self.padding, dtype=np.int64)
        row[: len(values)] = np.asarray(values, dtype=np.int64) + self.offset
        return row.astype(self.dtype)

    def _write_tokens(self, view: np.ndarray, columns: LaneColumns) -> None:
        total = columns.total
        if total > self.rows:
            raise LaneOverflow(f"{self.destination}: {total} packed tokens exceed the capacity {self.rows}")
        view[total:] = self.padding
        if not total:
            return
        source = self.source
        trailing = (1,) * len(self.row_shape)
        if source == V.VALUE_SOURCE_PROMPT_POSITIONS:
            view[:total] = (columns.positions + self.offset).reshape((total, *trailing))
        elif source == V.VALUE_SOURCE_PROMPT_TOKENS:
            # Pending rows get `padding` (a PENDING_TOKEN binding of the same destination overwrites
            # them next); without one, a device-owned pending token reads padding there, never a
            # stale token of an earlier round.
            values = np.where(columns.is_prompt, columns.tokens + self.offset, self.padding)
            view[:total] = values.reshape((total, *trailing))
        elif source == V.VALUE_SOURCE_SCORED_PREFILL_TARGETS:
            # row p of a lane (position consumed + p) scores the prompt token after its own; rows past
            # the prompt's last token (and padding) keep `padding`
            view[:total] = self.padding
            start = 0
            for lane, end in zip(columns.lanes, columns.ends.tolist(), strict=True):
                prompt, first = lane.prompt_token_ids, lane.consumed + 1
                count = min(end - start, len(prompt) - first)
                if count > 0:
                    targets = np.asarray(prompt[first:first + count], dtype=np.int64) + self.offset
                    view[start:start + count] = targets.reshape((count, *trailing))
                start = end
        elif source == V.VALUE_SOURCE_IMAGE_CONTEXT_INDICES:
            # a prompt row at position consumed + p reads image_context there; text positions (-1),
            # positions past it, pending rows and padding keep `padding`
            view[:total] = self.padding
            start = 0
            for lane, end in zip(columns.lanes, columns.ends.tolist(), strict=True):
                context = lane.image_context[lane.consumed:lane.consumed + lane.prompt_tokens_in_round]
                if context:
                    rows = np.asarray(context, dtype=np.int64)
                    values = np.where(rows >= 0, rows + self.offset, self.padding)
                    view[start:start + len(rows)] = values.reshape((len(rows), *trailing))
                start = end
        elif source == V.VALUE_SOURCE_PENDING_TOKEN:
            ends = columns.ends[columns.has_pending] - 1
            view[ends] = (columns.pending[columns.has_pending] + self.offset).reshape((-1, *trailing))
        elif source == V.VALUE_SOURCE_CONSTANT:
            view[:total] = self._constants_row()
        elif source in ROW_SCALARS:  # each packed token carries its lane's value
            view[:total] = (columns.scalar(source)[columns.token_lane] + self.offset).reshape((total, *trailing))
        else:
            raise UnsupportedValueSource(f"{self.destination}: {_source_name(self.source)} is not per token")


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as bf16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + ((bits >> 16) & 1) + np.uint32(0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def _resolve_binding(graph: contract_pb2.GraphContract, binding: contract_pb2.ValueBinding,
                     buffers: Mapping[str, manifest_pb2.BufferDescriptor], physical_rows: int) -> ResolvedBinding:
    where = f"graph {graph.name}: binding {binding.destination}"
    buffer = buffers.get(binding.destination)
    if buffer is None or buffer.role != manifest_pb2.BUFFER_ROLE_TRANSPORT:
        raise PackingError(f"{where}: the destination is not a registered transport buffer")
    source, indexing = binding.source, binding.indexing
    supported = set(ROW_SCALARS) | set(_ROW_VECTORS) | set(_TOKEN_SOURCES) | set(_IMAGE_SOURCES) | {
        V.VALUE_SOURCE_LIVE_ROW_COUNT, V.VALUE_SOURCE_CONSTANT, V.VALUE_SOURCE_INACTIVE_PADDING,
        V.VALUE_SOURCE_LIVE_STATE_ROWS}
    if source not in supported:
        raise UnsupportedValueSource(f"{where}: this runtime does not supply {_source_name(source)}")
    if buffer.dtype not in NUMPY_DTYPES:
        raise BindingExtentMismatch(f"{where}: buffer dtype {buffer.dtype} is unknown")
    numeric = _FLOAT_DTYPES if source == V.VALUE_SOURCE_SAMPLING_PARAMETERS else _INTEGER_DTYPES
    if source in _IMAGE_SOURCES and indexing != V.INDEXING_SCALAR:
        raise BindingExtentMismatch(f"{where}: {_source_name(source)} fills the whole buffer (SCALAR indexing)")
    if source == V.VALUE_SOURCE_IMAGE_TENSOR:
        # a layout output of either kind (bf16 buffers take the float values' bf16 bit patterns)
        numeric = _FLOAT_DTYPES | _INTEGER_DTYPES | {manifest_pb2.DTYPE_BF16}
        if not binding.image_output:
            raise BindingExtentMismatch(f"{where}: IMAGE_TENSOR names no image_output")
    if buffer.dtype not in numeric:
        raise BindingExtentMismatch(
            f"{where}: {_source_name(source)} needs a {'float' if numeric is _FLOAT_DTYPES else 'integer'} buffer, "
            f"found {manifest_pb2.DType.Name(buffer.dtype)}")
    shape = tuple(int(e) for e in buffer.shape)
    if indexing == V.INDEXING_SCALAR:
        rows = 1
        row_shape = (math.prod(shape),)
    else:
        if not shape:
            raise BindingExtentMismatch(f"{where}: a row indexing needs a leading extent")
        capacity = {
            V.INDEXING_SUBMISSION_ROW: graph.capacity.batch_capacity,
            V.INDEXING_ACTIVE_ROW: graph.capacity.batch_capacity,
            V.INDEXING_PHYSICAL_REQUEST_ROW: physical_rows,
            V.INDEXING_PACKED_TOKEN: graph.capacity.packed_token_capacity,
        }.get(indexing)
        if capacity is None:
            raise BindingExtentMismatch(f"{where}: {_indexing_name(indexing)} is not a known indexing")
        if shape[0] < capacity:
            raise BindingExtentMismatch(
                f"{where}: {_indexing_name(indexing)} needs {capacity} rows, the buffer has {shape[0]}")
        rows, row_shape = capacity, shape[1:]
    if source in ROW_SCALARS and indexing == V.INDEXING_SCALAR:
        raise BindingExtentMismatch(f"{where}: {_source_name(source)} has a value per lane, not one per submission")
    if source in _TOKEN_SOURCES and source != V.VALUE_SOURCE_PENDING_TOKEN and indexing != V.INDEXING_PACKED_TOKEN:
        raise BindingExtentMismatch(f"{where}: {_source_name(source)} is indexed by packed token")
    if source == V.VALUE_SOURCE_LIVE_ROW_COUNT and indexing != V.INDEXING_SCALAR:
        raise BindingExtentMismatch(f"{where}: LIVE_ROW_COUNT is a scalar")
    if source in _ROW_VECTORS and indexing not in _ROW_INDEXINGS:
        raise BindingExtentMismatch(f"{where}: {_source_name(source)} needs a row indexing")
    if source == V.VALUE_SOURCE_SAMPLING_PARAMETERS and row_shape != (len(SAMPLING_PARAMETER_ORDER),):
        raise BindingExtentMismatch(f"{where}: sampling parameters need rows of {len(SAMPLING_PARAMETER_ORDER)}")
    if source == V.VALUE_SOURCE_SEED_BITS and not (
            row_shape == (2,) and buffer.dtype in (manifest_pb2.DTYPE_I32, manifest_pb2.DTYPE_U32)
            or row_shape in ((), (1,)) and buffer.dtype == manifest_pb2.DTYPE_I64):
        raise BindingExtentMismatch(f"{where}: seed bits need [2] 32-bit words or one 64-bit integer a row")
    if source in (V.VALUE_SOURCE_PAGE_TABLE, V.VALUE_SOURCE_EOS_IDS, V.VALUE_SOURCE_PROMPT_HISTOGRAM,
                  V.VALUE_SOURCE_GRAMMAR_MASK, V.VALUE_SOURCE_CANDIDATE_IDS) and len(row_shape) != 1:
        raise BindingExtentMismatch(f"{where}: {_source_name(source)} needs one trailing extent")
    if source == V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS and len(row_shape) != 2:
        raise BindingExtentMismatch(f"{where}: CANDIDATE_GRAMMAR_MASKS needs [W, mask_words] rows")
    state_rows = 0
    if source == V.VALUE_SOURCE_LIVE_STATE_ROWS:
        state_rows = graph.state_rows_per_request
        if indexing not in _ROW_INDEXINGS:
            raise BindingExtentMismatch(f"{where}: LIVE_STATE_ROWS needs a row indexing")
        if state_rows < 1 or math.prod(row_shape) != state_rows:
            raise BindingExtentMismatch(f"{where}: LIVE_STATE_ROWS rows of {list(row_shape)} for "
                                        f"{state_rows} state rows per request")
    constants = tuple(int(c) for c in binding.constants)
    if source == V.VALUE_SOURCE_CONSTANT:
        count = math.prod(row_shape) if row_shape else 1
        if len(constants) not in (1, count):
            raise BindingExtentMismatch(f"{where}: {len(constants)} constants for rows of {count} values")
    return ResolvedBinding(binding.destination, source, indexing, int(binding.offset), int(binding.padding),
                           constants, NUMPY_DTYPES[buffer.dtype], rows, row_shape, state_rows,
                           binding.image_output)


@dataclass(frozen=True, slots=True)
class GraphPacking:
    """Every binding of one graph, resolved once; `pack` fills one round."""

    graph: str
    batch_capacity: int
    packed_token_capacity: int
    bindings: tuple[ResolvedBinding, ...]
    sources: frozenset[int] = field(default=frozenset())

    @classmethod
    def resolve(cls, graph: contract_pb2.GraphContract, manifest: manifest_pb2.ExecutionManifest, *,
                physical_rows: int) -> GraphPacking:
        buffers = {b.name: b for b in manifest.buffers}
        resolved = tuple(_resolve_binding(graph, b, buffers, physical_rows) for b in graph.value_bindings)
        # Token sources may share a destination; they must then be the prompt/pending pair.
        seen: dict[str, int] = {}
        for b in resolved:
            if b.destination in seen and {seen[b.destination], b.source} != {
                    V.VALUE_SOURCE_PROMPT_TOKENS, V.VALUE_SOURCE_PENDING_TOKEN}:
                raise PackingError(f"graph {graph.name}: two bindings write {b.destination}")
            seen[b.destination] = b.source
        return cls(graph.name, graph.capacity.batch_capacity, graph.capacity.packed_token_capacity, resolved,
                   frozenset(b.source for b in resolved))

    def initialize(self, buffers: Mapping[str, np.ndarray]) -> None:
        """Fill every destination with its binding's padding (once, at load): rows no round has
        written yet then hold valid values, e.g. sampling parameters of unused slots."""
        for binding in self.bindings:
            buffers[binding.destination][...] = binding.padding

    def pack(self, lanes: Sequence[LaneInput], buffers: Mapping[str, np.ndarray]) -> None:
        """Fill each binding's destination for one round of `lanes` (in submission order)."""
        if not lanes:
            raise LaneOverflow(f"graph {self.graph}: a round has at least one lane")
        if len(lanes) > self.batch_capacity:
            raise LaneOverflow(f"graph {self.graph}: {len(lanes)} lanes exceed the batch capacity {self.batch_capacity}")
        tokens = sum(len(lane.tokens) for lane in lanes)
        if tokens > self.packed_token_capacity:
            raise LaneOverflow(
                f"graph {self.graph}: {tokens} tokens exceed the packed token capacity {self.packed_token_capacity}")
        # Shared destinations (prompt + pending tokens): write the prompt binding first, whose padding
        # initializes the tail, then the pending token rows.
        order = sorted(self.bindings, key=lambda b: b.source == V.VALUE_SOURCE_PENDING_TOKEN)
        columns = LaneColumns.of(lanes)
        for binding in order:
            binding.write(buffers[binding.destination], lanes, columns)
