"""Completion records and their validation (host side, shared by both runtimes' schedulers).

Owns `Completion` (one lane's row of a graph's completion record, as the host reads it back),
`validate_completion` (one row against the lane that was submitted: a drop-in for the reference
engine's check) and `validate_round` (every row of a round, before any lane retires: what a batching
scheduler adds: submission order across lanes and rounds, accepted count within the offer, consumed
endpoint within the lane's page reservation). `CompletionRows` holds a round's rows as columns, as an
executor reads them back: `validate_round` then checks the round with array comparisons and builds
no `Completion` unless a row is wrong.

The specification: "The scheduler independently validates generations, submission order, accepted
counts, and request endpoints before retiring any lane." Each violated invariant has its own error
class; the message names the graph, the slot and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helios.errors import HeliosError
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.packing import LaneColumns, LaneInput
from helios.runtime.rows import ColumnRows

# The transport writes a submission's sequence into a 32-bit completion field: it counts modulo 2**31,
# so a server that has run 2**31 rounds keeps numbering them (and a row is checked against the
# sequence as the transport wrote it).
SEQUENCE_MODULUS = 2**31


def transport_sequence(sequence: int) -> int:
    """The value the transport writes for submission `sequence` (what a completion row echoes)."""
    return sequence % SEQUENCE_MODULUS


class CompletionInvalid(HeliosError):
    """A completion row disagrees with the round it answers (an execution failure)."""


class ExecutionStatusFailed(CompletionInvalid):
    """The row's status field is not 0: the program reported a failure."""


class SubmissionOrderViolated(CompletionInvalid):
    """Rows answer another submission, arrive out of submission order, or repeat a slot."""


class GenerationMismatch(CompletionInvalid):
    """The generation echo differs from the lane's slot generation (a stale or foreign row)."""


class AcceptedCountInvalid(CompletionInvalid):
    """The emitted (accepted) count is above the lane's offer, or differs from what the graph must emit."""


class EndpointInvalid(CompletionInvalid):
    """The consumed-token endpoint is not the lane's, or lies past the lane's page reservation."""


class EndpointPastReservation(EndpointInvalid):
    """The consumed-token endpoint lies past the tokens the lane's pages reserve."""


class CursorInvalid(CompletionInvalid):
    """The draft cursor of a graph without one is not -1, or the reserved model field is not -1."""


class SampledIdOutOfRange(CompletionInvalid):
    """A sampled id lies outside the vocabulary's sampled range."""


class OfferInvalid(CompletionInvalid):
    """A speculative lane's offer exceeds its reserved ceiling (or differs from its exact length), or
    the round's offers exceed the program's packed rows P."""


@dataclass(frozen=True, slots=True)
class SpeculativeRound:
    """What a SPECULATIVE graph's rows are checked against: its packed rows P, whether lane limits
    are exact lengths (QUERY_LENGTH) or ceilings (SPECULATIVE_PREFIX_LIMIT), and the draft cursor's
    lag behind the consumed endpoint."""

    packed_tokens: int
    exact: bool
    lag_tokens: int = 0

    @classmethod
    def of(cls, graph) -> SpeculativeRound | None:
        """The check of a contract graph (`helios.contract.model.Graph`); None unless it is SPECULATIVE."""
        if graph.speculative is None:
            return None
        exact = any(b.source == contract_pb2.VALUE_SOURCE_QUERY_LENGTH for b in graph.value_bindings)
        lag = graph.draft_cursor.lag_tokens if graph.draft_cursor is not None else 0
        return cls(graph.speculative.packed_token_capacity, exact, lag)


@dataclass(frozen=True, slots=True)
class Completion:
    """One lane's row of the completion record."""

    frame_index: int  # the execution frame the transport submitted the round in
    submission_sequence: int  # the transport's sequence number of the round
    generation: int  # echo of the lane's slot generation
    sampled_id: int  # the sampled token (meaningful when emitted > 0)
    emitted: int  # tokens accepted and emitted this round (the accepted count)
    consumed_endpoint: int  # tokens consumed after the round
    draft_cursor: int  # -1 for a graph without a draft cursor
    model_reserved: int  # the ABI6 reserved model field: always -1
    status: int  # 0: success
    offer: int = -1  # target rows offered (a speculative graph's lanes; -1 elsewhere)
    accepted_drafts: int = -1  # proposals accepted (a speculative graph's lanes; -1 elsewhere)
    sampled_ids: tuple[int, ...] = ()  # every emitted id in order (a speculative graph's lanes)

    def __post_init__(self) -> None:
        if not isinstance(self.sampled_ids, tuple):  # e.g. a row read back from JSON
            object.__setattr__(self, "sampled_ids", tuple(self.sampled_ids))

    def tokens(self) -> tuple[int, ...]:
        """The ids this row emits, in order."""
        if self.sampled_ids:
            return self.sampled_ids[:self.emitted]
        return (self.sampled_id,) if self.emitted else ()


_FIELDS = ("frame_index", "submission_sequence", "generation", "sampled_id", "emitted", "consumed_endpoint",
           "draft_cursor", "model_reserved", "status")
_EXTRA = ("offer", "accepted_drafts")


class CompletionRows(ColumnRows):
    """A round's completion rows as columns (one int64 array per `Completion` field, lane order): what
    an executor reads back in a few array operations. Indexing builds (and keeps) the row's
    `Completion`; `column(name)` and `values(name)` read a field without building rows. Equal to any
    sequence of equal `Completion`s."""

    __slots__ = ("_columns", "_ids", "_values", "scores")

    def __init__(self, columns: Mapping[str, np.ndarray], scores: object | None = None) -> None:
        self.scores = scores  # a SCORED_PREFILL round's `helios.runtime.scores.PromptScores`; None elsewhere
        lengths = {len(columns[name]) for name in _FIELDS}
        if len(lengths) != 1:
            raise ValueError(f"completion columns of different lengths: {sorted(lengths)}")
        self._columns = {name: np.asarray(columns[name], dtype=np.int64) for name in _FIELDS}
        count = lengths.pop()
        for name in _EXTRA:
            self._columns[name] = np.asarray(columns.get(name, np.full(count, -1)), dtype=np.int64)
        ids = columns.get("sampled_ids")
        self._ids = None if ids is None else np.asarray(ids, dtype=np.int64).reshape(count, -1)
        self._values: dict[str, list[int]] = {}
        self._rows: list[Completion] | None = None

    @classmethod
    def of(cls, rows: Sequence[Completion], scores: object | None = None) -> CompletionRows:
        """The columns of `rows` (e.g. the rows a trace recorder kept), with a scored round's `scores`."""
        names = _FIELDS + _EXTRA
        columns = {name: np.array([getattr(r, name) for r in rows], dtype=np.int64) for name in names}
        if any(r.sampled_ids for r in rows):
            columns["sampled_ids"] = np.array([r.sampled_ids for r in rows], dtype=np.int64)
        return cls(columns, scores)

    def column(self, name: str) -> np.ndarray:
        return self._columns[name]

    def values(self, name: str) -> list[int]:
        """The field as Python ints (cached)."""
        out = self._values.get(name)
        if out is None:
            out = self._values[name] = self._columns[name].tolist()
        return out

    def _build_rows(self) -> list[Completion]:
        ids = [()] * len(self) if self._ids is None else [tuple(r) for r in self._ids.tolist()]
        return [Completion(*row, *extra, i) for row, extra, i in
                zip(zip(*(self.values(n) for n in _FIELDS), strict=True),
                    zip(*(self.values(n) for n in _EXTRA), strict=True), ids, strict=True)]

    def __len__(self) -> int:
        return len(self._columns["status"])

    def emitted_ids(self) -> list[tuple[int, ...]]:
        """Each row's `Completion.tokens()` (the ids it emits, in order), without building rows."""
        emitted = self.values("emitted")
        if self._ids is None or self._ids.shape[1] == 0:
            return [(sampled,) if count else () for sampled, count in zip(self.values("sampled_id"), emitted,
                                                                          strict=True)]
        return [tuple(ids[:count]) for ids, count in zip(self._ids.tolist(), emitted, strict=True)]


def speculative_columns(rows: Sequence[Completion]) -> tuple[list[int], list[int], list[int], list[tuple[int, ...]]]:
    """A SPECULATIVE round's offers, accepted drafts, emitted counts and emitted ids per row
    (`Completion.tokens()`), read from the columns of `CompletionRows` without building rows."""
    if isinstance(rows, CompletionRows):
        return rows.values("offer"), rows.values("accepted_drafts"), rows.values("emitted"), rows.emitted_ids()
    return ([r.offer for r in rows], [r.accepted_drafts for r in rows], [r.emitted for r in rows],
            [r.tokens() for r in rows])


def _echoes(graph_name: str, lane: LaneInput, row: Completion, sequence: int, frame: int | None) -> str:
    """Check what every row echoes (status, submission sequence, frame, slot generation); returns the
    row's name for later messages."""
    where = f"graph {graph_name}, slot {lane.slot}"
    if row.status != 0:
        raise ExecutionStatusFailed(f"{where}: status {row.status} (execution failed)")
    if row.submission_sequence != transport_sequence(sequence):
        raise SubmissionOrderViolated(f"{where}: submission_sequence {row.submission_sequence}, "
                                      f"the round was submitted as {transport_sequence(sequence)}")
    if frame is not None and row.frame_index != frame:
        raise SubmissionOrderViolated(f"{where}: frame_index {row.frame_index}, the round was submitted in "
                                      f"frame {frame}")
    if row.generation != lane.generation:
        raise GenerationMismatch(f"{where}: generation echo {row.generation}, lane generation {lane.generation}")
    return where


def validate_speculative(graph_name: str, lane: LaneInput, row: Completion, *, sequence: int, sampled_tokens: int,
                         speculative: SpeculativeRound, frame: int | None = None,
                         reservation_tokens: int | None = None) -> None:
    """Reject a SPECULATIVE lane's `row` unless it answers the lane: the offer within the lane's
    ceiling (equal to it for exact lengths), accepted drafts within the offer, emitted = accepted + 1,
    the endpoint advanced by the emitted count, the draft cursor at max(endpoint - lag, 0) and every
    emitted id in range."""
    where = _echoes(graph_name, lane, row, sequence, frame)
    ceiling = lane.speculative_limit
    if not 1 <= row.offer <= ceiling or (speculative.exact and row.offer != ceiling):
        rule = f"the lane's length {ceiling}" if speculative.exact else f"within the lane's ceiling {ceiling}"
        raise OfferInvalid(f"{where}: offers {row.offer}, must be {rule}")
    if not 0 <= row.accepted_drafts < row.offer:
        raise AcceptedCountInvalid(f"{where}: accepted_drafts {row.accepted_drafts} exceeds the offer of "
                                   f"{row.offer} rows (the pending token and {row.offer - 1} proposals)")
    if row.emitted != row.accepted_drafts + 1:
        raise AcceptedCountInvalid(f"{where}: emitted {row.emitted}, expected accepted_drafts + 1 = "
                                   f"{row.accepted_drafts + 1}")
    endpoint = lane.consumed + row.emitted
    if reservation_tokens is not None and row.consumed_endpoint > reservation_tokens:
        raise EndpointPastReservation(f"{where}: consumed_endpoint {row.consumed_endpoint} lies past the lane's "
                                      f"reservation of {reservation_tokens} tokens")
    if row.consumed_endpoint != endpoint:
        raise EndpointInvalid(f"{where}: consumed_endpoint {row.consumed_endpoint}, expected {endpoint}")
    cursor = max(endpoint - speculative.lag_tokens, 0)
    if row.draft_cursor != cursor:
        raise CursorInvalid(f"{where}: draft_cursor {row.draft_cursor}, expected max(consumed - lag, 0) = {cursor}")
    if row.model_reserved != -1:
        raise CursorInvalid(f"{where}: model_reserved {row.model_reserved}, must be -1")
    for token in row.tokens():
        if not 0 <= token < sampled_tokens:
            raise SampledIdOutOfRange(f"{where}: sampled_ids holds {token}, outside the vocabulary "
                                      f"[0, {sampled_tokens})")


def validate_completion(graph_name: str, lane: LaneInput, row: Completion, *, sequence: int,
                        sampled_tokens: int, frame: int | None = None, offer: int | None = None,
                        reservation_tokens: int | None = None) -> None:
    """Reject `row` unless it answers `lane` of submission `sequence` exactly.

    `offer` is the most tokens the lane may accept (default: 1 when it samples, else 0); a graph that
    is not speculative must emit exactly its sampling decision. `reservation_tokens` bounds the
    consumed endpoint (default: the lane's pages hold no bound)."""
    where = _echoes(graph_name, lane, row, sequence, frame)
    expected = int(lane.samples)
    limit = expected if offer is None else offer
    if row.emitted > limit:
        raise AcceptedCountInvalid(f"{where}: emitted {row.emitted} exceeds the lane's offer of {limit}")
    if offer is None and row.emitted != expected:
        raise AcceptedCountInvalid(f"{where}: emitted {row.emitted}, expected {expected}")
    if row.emitted < 0:
        raise AcceptedCountInvalid(f"{where}: emitted {row.emitted} is negative")
    endpoint = lane.consumed + len(lane.tokens)
    if reservation_tokens is not None and row.consumed_endpoint > reservation_tokens:
        raise EndpointPastReservation(f"{where}: consumed_endpoint {row.consumed_endpoint} lies past the lane's "
                              f"reservation of {reservation_tokens} tokens")
    if row.consumed_endpoint != endpoint:
        raise EndpointInvalid(f"{where}: consumed_endpoint {row.consumed_endpoint}, expected {endpoint}")
    if row.draft_cursor != -1:
        raise CursorInvalid(f"{where}: draft_cursor {row.draft_cursor}; a graph without one reports -1")
    if row.model_reserved != -1:
        raise CursorInvalid(f"{where}: model_reserved {row.model_reserved}, must be -1")
    if row.emitted and not 0 <= row.sampled_id < sampled_tokens:
        raise SampledIdOutOfRange(f"{where}: sampled_id {row.sampled_id} outside the vocabulary "
                                  f"[0, {sampled_tokens})")


def validate_round(graph_name: str, lanes: Sequence[LaneInput], rows: Sequence[Completion], *, sequence: int,
                   sampled_tokens: int, page_tokens: int, frame: int | None = None,
                   offers: Sequence[int] | None = None, speculative: SpeculativeRound | None = None) -> None:
    """Validate every row of one round before any lane retires.

    Rows come in submission order, one per lane; slots are distinct; each lane's endpoint must lie
    within the tokens its pages reserve (`len(lane.page_ids) * page_tokens`). A SPECULATIVE round
    (`speculative`) checks each lane by `validate_speculative` and the offers' sum against P."""
    if len(rows) != len(lanes):
        raise SubmissionOrderViolated(f"graph {graph_name}: {len(rows)} completion rows for {len(lanes)} lanes")
    if offers is None and speculative is None:
        if isinstance(rows, CompletionRows):
            valid = _columns_valid(lanes, rows, transport_sequence(sequence), sampled_tokens, page_tokens, frame)
        else:
            valid = _round_valid(lanes, rows, transport_sequence(sequence), sampled_tokens, page_tokens, frame)
        if valid:
            return  # the hot path: every row as expected, no message built
    elif offers is None and isinstance(rows, CompletionRows) and _speculative_columns_valid(
            lanes, rows, transport_sequence(sequence), sampled_tokens, page_tokens, frame, speculative):
        return  # a SPECULATIVE round's hot path: every rule of `validate_speculative` as array comparisons
    seen: set[int] = set()
    for i, (lane, row) in enumerate(zip(lanes, rows, strict=True)):
        if lane.slot in seen:
            raise SubmissionOrderViolated(f"graph {graph_name}: slot {lane.slot} appears twice in one round")
        seen.add(lane.slot)
        reservation = len(lane.page_ids) * page_tokens
        if speculative is not None:
            validate_speculative(graph_name, lane, row, sequence=sequence, sampled_tokens=sampled_tokens,
                                 speculative=speculative, frame=frame, reservation_tokens=reservation)
        else:
            validate_completion(graph_name, lane, row, sequence=sequence, sampled_tokens=sampled_tokens, frame=frame,
                                offer=None if offers is None else offers[i], reservation_tokens=reservation)
    if speculative is not None and (total := sum(row.offer for row in rows)) > speculative.packed_tokens:
        raise OfferInvalid(f"graph {graph_name}: offers sum to {total}, past the program's "
                           f"{speculative.packed_tokens} packed rows")


def _round_valid(lanes: Sequence[LaneInput], rows: Sequence[Completion], written: int, sampled_tokens: int,
                 page_tokens: int, frame: int | None) -> bool:
    """Every rule of `validate_completion` for a round without offers, as one pass of comparisons;
    False sends the round through the per-lane checks, which name the first violation."""
    seen: set[int] = set()
    for lane, row in zip(lanes, rows, strict=True):
        endpoint = lane.consumed + len(lane.tokens)
        if (row.status != 0 or row.submission_sequence != written or row.generation != lane.generation
                or (frame is not None and row.frame_index != frame) or row.emitted != int(lane.samples)
                or row.consumed_endpoint != endpoint or endpoint > len(lane.page_ids) * page_tokens
                or row.draft_cursor != -1 or row.model_reserved != -1 or lane.slot in seen
                or (row.emitted and not 0 <= row.sampled_id < sampled_tokens)):
            return False
        seen.add(lane.slot)
    return True


def _columns_valid(lanes: Sequence[LaneInput], rows: CompletionRows, written: int, sampled_tokens: int,
                   page_tokens: int, frame: int | None) -> bool:
    """`_round_valid` as array comparisons over the rows' columns (no Completion is built)."""
    n = len(lanes)
    if not n:
        return True
    lane = LaneColumns.of(lanes)
    generation = lane.scalar(contract_pb2.VALUE_SOURCE_GENERATION)
    samples = lane.scalar(contract_pb2.VALUE_SOURCE_SAMPLING_DECISION)
    endpoint = lane.scalar(contract_pb2.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT) + lane.lengths
    reserved = lane.page_counts * page_tokens
    slots = lane.slots
    c = rows.column
    emitted = c("emitted")
    sampled = c("sampled_id")
    ok = ((c("status") == 0) & (c("submission_sequence") == written) & (c("generation") == generation)
          & (emitted == samples) & (c("consumed_endpoint") == endpoint) & (endpoint <= reserved)
          & (c("draft_cursor") == -1) & (c("model_reserved") == -1)
          & ((emitted == 0) | ((sampled >= 0) & (sampled < sampled_tokens))))
    if frame is not None:
        ok &= c("frame_index") == frame
    return bool(ok.all()) and len(np.unique(slots)) == n


def _speculative_columns_valid(lanes: Sequence[LaneInput], rows: CompletionRows, written: int, sampled_tokens: int,
                               page_tokens: int, frame: int | None, speculative: SpeculativeRound) -> bool:
    """Every rule of `validate_speculative` for every lane, the distinct slots and the offers' sum
    within P, as array comparisons over the rows' columns; False sends the round through the per-lane
    checks, which name the first violation."""
    n = len(lanes)
    if not n:
        return True
    lane = LaneColumns.of(lanes)
    ceiling = lane.scalar(contract_pb2.VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT)
    c = rows.column
    offer, accepted, emitted, endpoint = c("offer"), c("accepted_drafts"), c("emitted"), c("consumed_endpoint")
    ok = ((c("status") == 0) & (c("submission_sequence") == written)
          & (c("generation") == lane.scalar(contract_pb2.VALUE_SOURCE_GENERATION))
          & (offer >= 1) & (offer <= ceiling) & (accepted >= 0) & (accepted < offer) & (emitted == accepted + 1)
          & (endpoint <= lane.page_counts * page_tokens)
          & (endpoint == lane.scalar(contract_pb2.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT) + emitted)
          & (c("draft_cursor") == np.maximum(endpoint - speculative.lag_tokens, 0)) & (c("model_reserved") == -1))
    if speculative.exact:
        ok &= offer == ceiling
    if frame is not None:
        ok &= c("frame_index") == frame
    ids = rows._ids
    if ids is None or ids.shape[1] == 0:  # each row emits its sampled_id alone
        sampled = c("sampled_id")
        ok &= (emitted == 0) | ((sampled >= 0) & (sampled < sampled_tokens))
    else:  # the first `emitted` ids of each row
        emits = np.arange(ids.shape[1])[None, :] < emitted[:, None]
        ok &= (~emits | ((ids >= 0) & (ids < sampled_tokens))).all(axis=1)
    return bool(ok.all()) and len(np.unique(lane.slots)) == n and int(offer.sum()) <= speculative.packed_tokens


# Completion fields in the order of `Completion`'s attributes.
FIELD_ORDER = (
    manifest_pb2.COMPLETION_FIELD_FRAME_INDEX, manifest_pb2.COMPLETION_FIELD_SUBMISSION_SEQUENCE,
    manifest_pb2.COMPLETION_FIELD_GENERATION, manifest_pb2.COMPLETION_FIELD_SAMPLED_IDS,
    manifest_pb2.COMPLETION_FIELD_EMITTED, manifest_pb2.COMPLETION_FIELD_CONSUMED_ENDPOINT,
    manifest_pb2.COMPLETION_FIELD_DRAFT_CURSOR, manifest_pb2.COMPLETION_FIELD_MODEL_RESERVED,
    manifest_pb2.COMPLETION_FIELD_STATUS,
)
# Fields a graph without a draft cursor (or a layout without the field) reports as -1.
_MINUS_ONE_FIELDS = (manifest_pb2.COMPLETION_FIELD_DRAFT_CURSOR, manifest_pb2.COMPLETION_FIELD_MODEL_RESERVED)


def read_completion(arrays: Mapping[int, np.ndarray], slots: Sequence[int] | np.ndarray, count: int, *,
                    speculative: bool = False) -> CompletionRows:
    """The rows of `count` lanes in request slots `slots` from a completion record held on the host.

    `arrays` maps a CompletionField to its buffer: the first axis is the physical request slot, or
    one row for per-submission fields (frame index, submission sequence, status); a lane reads its
    slot's row, column 0. A field the layout lacks reads as a graph without it reports (-1 for the
    draft cursor and the reserved model field, 0 otherwise). A `speculative` graph's rows also read
    offers, accepted drafts and every sampled id. The rows are as read: unvalidated."""
    slots = np.asarray(slots, dtype=np.int64)
    columns = {}
    if speculative:
        for field, name in ((manifest_pb2.COMPLETION_FIELD_OFFERS, "offer"),
                            (manifest_pb2.COMPLETION_FIELD_ACCEPTED_DRAFTS, "accepted_drafts")):
            array = arrays.get(field)
            columns[name] = (np.full(count, -1, dtype=np.int64) if array is None
                             else np.asarray(array).reshape(np.shape(array)[0], -1)[slots, 0])
        ids = arrays.get(manifest_pb2.COMPLETION_FIELD_SAMPLED_IDS)
        if ids is not None:
            columns["sampled_ids"] = np.asarray(ids).reshape(np.shape(ids)[0], -1)[slots]
    for field, name in zip(FIELD_ORDER, _FIELDS, strict=True):
        array = arrays.get(field)
        if array is None:
            columns[name] = np.full(count, -1 if field in _MINUS_ONE_FIELDS else 0, dtype=np.int64)
            continue
        flat = np.asarray(array).reshape(np.shape(array)[0], -1)
        columns[name] = np.full(count, flat[0, 0], dtype=np.int64) if flat.shape[0] == 1 else flat[slots, 0]
    return CompletionRows(columns)


def completion_rows(arrays: Mapping[int, np.ndarray], lanes: Sequence[LaneInput], *,
                    speculative: bool = False) -> CompletionRows:
    """Each lane's row of a completion record held on the host (`read_completion` at the lanes' slots)."""
    return read_completion(arrays, [lane.slot for lane in lanes], len(lanes), speculative=speculative)
