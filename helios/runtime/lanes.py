"""One round's lanes (host side, NumPy only): `LaneInput`, a request's share of one round as
packing sees it, and `LaneColumns`, a round's lanes read once into NumPy columns that packing
(`helios.runtime.packing`) and completion validation share. See packing.py for the row layouts.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from helios.errors import HeliosError
from helios.proto import contract_pb2
from helios.runtime.request import SamplingParams

V = contract_pb2  # enum namespace


class PackingError(HeliosError):
    """A value binding cannot be packed as declared; the message names the graph and destination."""



class LaneOverflow(PackingError):
    """A round does not fit the graph's capacity (too many lanes, tokens, pages or EOS ids)."""



@dataclass(frozen=True, slots=True, eq=False)
class ImageSubmission:
    """The image a lane's round encodes: the selected layout's named tensors (IMAGE_TENSOR, e.g. the
    preparation's `patches`) and the feature-store row of each encoder row (IMAGE_FEATURE_INDICES)."""

    tensors: tuple[tuple[str, np.ndarray], ...]  # (layout output name, array), in name order
    feature_rows: np.ndarray  # [encoder rows] i32, -1 for a row that is no feature

    def tensor(self, name: str) -> np.ndarray | None:
        return next((array for key, array in self.tensors if key == name), None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ImageSubmission):
            return NotImplemented
        return (np.array_equal(self.feature_rows, other.feature_rows)
                and [k for k, _ in self.tensors] == [k for k, _ in other.tensors]
                and all(a.dtype == b.dtype and np.array_equal(a, b)
                        for (_, a), (_, b) in zip(self.tensors, other.tensors, strict=True)))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class LaneInput:
    """One request's share of one round, as packing sees it."""

    slot: int  # physical request slot
    generation: int  # slot generation, echoed by the completion record
    consumed: int  # tokens consumed before this round (the consumed-token endpoint)
    tokens: tuple[int, ...]  # consumed this round: prompt tokens, then at most one pending token (none at admission)
    prompt_tokens_in_round: int  # how many leading `tokens` are prompt tokens
    samples: bool  # the sampling decision: this round emits a token for the lane
    page_ids: tuple[int, ...]  # the request's pages, in sequence order
    seed: int  # Philox key (taken as uint64)
    sampling: SamplingParams
    output_limit: int  # max sampled tokens
    eos_ids: tuple[int, ...]
    prompt_token_ids: tuple[int, ...] = ()  # the full prompt (for the prompt histogram)
    grammar_mask: tuple[int, ...] | None = None  # int32 allowed-token words; None: every token allowed
    # A SPECULATIVE lane: its target length (QUERY_LENGTH) or ceiling (SPECULATIVE_PREFIX_LIMIT), in
    # target rows counting the pending token; 0 for a lane of any other operation.
    speculative_limit: int = 0
    # A SPECULATIVE lane's copied proposals (history drafting): the ids proposed after its pending
    # token, in order (CANDIDATE_IDS, CANDIDATE_COUNT); () lets the draft propose every position.
    copied: tuple[int, ...] = ()
    # A SPECULATIVE lane of a grammar-constrained request: the grammar's masks (int32 words) of the
    # tokens after its pending token and each copied prefix, positions 0 .. len(copied)
    # (CANDIDATE_GRAMMAR_MASKS); None: every token allowed at every position.
    candidate_masks: tuple[tuple[int, ...], ...] | None = None
    # A RESTORATION lane: the continuation row its partial page is restored from (RESTORE_SOURCE) or
    # snapshotted into (SNAPSHOT_DESTINATION) at its endpoint `consumed`; -1 for none (every other lane).
    restore_source: int = -1
    snapshot_destination: int = -1
    # A request with images: the feature-store row of each position of its full prompt (the image
    # layout's `context_indices`, -1 for a text position; IMAGE_CONTEXT_INDICES); () without images.
    image_context: tuple[int, ...] = ()
    # The image this round encodes into the request's feature slot (one lane of a submission at most).
    image: ImageSubmission | None = None
    # A core with Engram tables (docs/engram.md): the request's known tokens just before `consumed`
    # (positions [consumed - len(history), consumed)), as many as its longest n-gram order needs
    # (that order minus one, fewer near position 0); () on every other core.
    history: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        count, prompt = len(self.tokens), self.prompt_tokens_in_round
        if (0 <= prompt <= count and count - prompt <= 1 and self.slot >= 0 and self.generation >= 0
                and self.consumed >= 0 and (count or not self.samples)):
            return  # every rule holds (checked in one expression: a lane is built per request per round)
        if not 0 <= self.prompt_tokens_in_round <= len(self.tokens):
            raise LaneOverflow(f"lane in slot {self.slot}: prompt_tokens_in_round out of range")
        if len(self.tokens) - self.prompt_tokens_in_round > 1:
            raise LaneOverflow(f"lane in slot {self.slot}: at most one pending token a round")
        if self.slot < 0 or self.generation < 0 or self.consumed < 0:
            raise LaneOverflow(f"lane in slot {self.slot}: slot, generation and consumed must be >= 0")
        if self.samples and not self.tokens:
            raise LaneOverflow(f"lane in slot {self.slot}: a lane that samples consumes at least one token")

    @property
    def pending_token(self) -> int | None:
        return self.tokens[-1] if len(self.tokens) > self.prompt_tokens_in_round else None


# Sources whose row is one integer, and how to compute it from a lane.
ROW_SCALARS: dict[int, Callable[[LaneInput], int]] = {
    V.VALUE_SOURCE_SLOT: lambda lane: lane.slot,
    V.VALUE_SOURCE_GENERATION: lambda lane: lane.generation,
    V.VALUE_SOURCE_QUERY_LENGTH: lambda lane: lane.speculative_limit or len(lane.tokens),
    V.VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT: lambda lane: lane.speculative_limit,
    V.VALUE_SOURCE_SAMPLING_DECISION: lambda lane: int(lane.samples),
    V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT: lambda lane: lane.consumed,
    V.VALUE_SOURCE_OUTPUT_LIMIT: lambda lane: lane.output_limit,
    V.VALUE_SOURCE_CANDIDATE_COUNT: lambda lane: len(lane.copied),
    V.VALUE_SOURCE_RESTORE_SOURCE: lambda lane: lane.restore_source,
    V.VALUE_SOURCE_SNAPSHOT_DESTINATION: lambda lane: lane.snapshot_destination,
}


# Column builders over a sequence of lanes, C-level iterators only (no Python call per lane): a round's
# columns are read from up to 256 lanes several times a round.
_attribute = operator.attrgetter


def _lengths_of(attribute: str) -> Callable[[Sequence[LaneInput]], object]:
    get = _attribute(attribute)
    return lambda lanes: map(len, map(get, lanes))


def _attribute_of(attribute: str) -> Callable[[Sequence[LaneInput]], object]:
    get = _attribute(attribute)
    return lambda lanes: map(get, lanes)


_COLUMN_ITERATORS: dict[object, Callable[[Sequence[LaneInput]], object]] = {
    f"source{V.VALUE_SOURCE_SLOT}": _attribute_of("slot"),
    f"source{V.VALUE_SOURCE_GENERATION}": _attribute_of("generation"),
    f"source{V.VALUE_SOURCE_SAMPLING_DECISION}": _attribute_of("samples"),
    f"source{V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT}": _attribute_of("consumed"),
    f"source{V.VALUE_SOURCE_OUTPUT_LIMIT}": _attribute_of("output_limit"),
    "slot": _attribute_of("slot"),
    "length": _lengths_of("tokens"),
    "pages": _lengths_of("page_ids"),
    "prompt": _attribute_of("prompt_tokens_in_round"),
}


class LaneColumns:
    """One round's lanes as NumPy columns (int64), each built on first use: packing fills whole
    binding arrays from these instead of writing lane by lane."""

    __slots__ = ("_cache", "lanes")
    _last: LaneColumns | None = None  # the columns `of` built last (a round's packing, then its validation)

    def __init__(self, lanes: Sequence[LaneInput]) -> None:
        self.lanes = lanes
        self._cache: dict[object, np.ndarray] = {}

    @classmethod
    def of(cls, lanes: Sequence[LaneInput]) -> LaneColumns:
        """The columns of `lanes`, shared by everyone who asks about the same tuple of lanes in turn
        (the executor packing a round, then the scheduler validating it): a tuple of frozen lanes
        never changes, so its columns are computed once."""
        last = cls._last
        if last is not None and last.lanes is lanes:
            return last
        columns = cls(lanes)
        if isinstance(lanes, tuple):
            cls._last = columns
        return columns

    def _column(self, name: str, value: Callable[[LaneInput], int]) -> np.ndarray:
        array = self._cache.get(name)
        if array is None:
            iterate = _COLUMN_ITERATORS.get(name)
            values = map(value, self.lanes) if iterate is None else iterate(self.lanes)
            array = np.fromiter(values, dtype=np.int64, count=len(self.lanes))
            self._cache[name] = array
        return array

    def scalar(self, source: int) -> np.ndarray:
        """The per-lane integer of a `ROW_SCALARS` source."""
        return self._column(f"source{source}", ROW_SCALARS[source])

    @property
    def slots(self) -> np.ndarray:
        return self._column("slot", _slot_of)

    @property
    def lengths(self) -> np.ndarray:
        return self._column("length", _length_of)

    @property
    def page_counts(self) -> np.ndarray:
        return self._column("pages", _pages_of)

    @property
    def prompt_in_round(self) -> np.ndarray:
        return self._column("prompt", _prompt_of)

    @property
    def ends(self) -> np.ndarray:
        """Each lane's packed-token end (exclusive)."""
        array = self._cache.get("ends")
        if array is None:
            array = self._cache["ends"] = np.cumsum(self.lengths)
        return array

    @property
    def total(self) -> int:
        return int(self.ends[-1]) if len(self.lanes) else 0

    @property
    def token_lane(self) -> np.ndarray:
        """Each packed token's lane index."""
        array = self._cache.get("token_lane")
        if array is None:
            array = self._cache["token_lane"] = np.repeat(np.arange(len(self.lanes)), self.lengths)
        return array

    @property
    def within(self) -> np.ndarray:
        """Each packed token's index within its lane's tokens."""
        array = self._cache.get("within")
        if array is None:
            starts = self.ends - self.lengths
            array = self._cache["within"] = np.arange(self.total) - starts[self.token_lane]
        return array

    @property
    def positions(self) -> np.ndarray:
        """Each packed token's sequence position."""
        array = self._cache.get("positions")
        if array is None:
            consumed = self.scalar(V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT)
            array = self._cache["positions"] = consumed[self.token_lane] + self.within
        return array

    @property
    def tokens(self) -> np.ndarray:
        """Every lane's tokens, packed."""
        array = self._cache.get("tokens")
        if array is None:
            flat = itertools.chain.from_iterable(map(_TOKENS, self.lanes))
            array = self._cache["tokens"] = np.fromiter(flat, dtype=np.int64, count=self.total)
        return array

    @property
    def is_prompt(self) -> np.ndarray:
        """Packed tokens that are prompt tokens (the rest are pending tokens)."""
        array = self._cache.get("is_prompt")
        if array is None:
            array = self._cache["is_prompt"] = self.within < self.prompt_in_round[self.token_lane]
        return array

    @property
    def has_pending(self) -> np.ndarray:
        """Lanes whose last token is a pending token."""
        array = self._cache.get("has_pending")
        if array is None:
            array = self._cache["has_pending"] = self.lengths > self.prompt_in_round
        return array

    @property
    def pending(self) -> np.ndarray:
        """Each lane's last token (its pending token where `has_pending`; 0 for a lane with no tokens)."""
        array = self._cache.get("pending")
        if array is None:
            last = np.maximum(self.ends - 1, 0)
            tokens = self.tokens
            array = np.where(self.lengths > 0, tokens[last] if tokens.size else 0, 0)
            self._cache["pending"] = array
        return array


_TOKENS = _attribute("tokens")


def _slot_of(lane: LaneInput) -> int:
    return lane.slot


def _length_of(lane: LaneInput) -> int:
    return len(lane.tokens)


def _pages_of(lane: LaneInput) -> int:
    return len(lane.page_ids)


def _prompt_of(lane: LaneInput) -> int:
    return lane.prompt_tokens_in_round
