"""Stops (host side): string stops, stop token ids and stop token sequences, applied to one
request's output one validated token at a time.

Owns: `StopSpec` (the validated stop options of a request) and `OutputFilter`, the object the runtime
worker calls after each validated token and before it submits the request's next round (the
host-stop barrier). `OutputFilter.push` decodes the token, applies the stops and returns the visible
text pieces and whether a stop matched; `finish` flushes what is still buffered at EOS or the output
limit.

Rules (the specification's "String stops" and "Token and timing observation"):
- string stops match the incremental decoded text, reasoning and tool envelopes included, before
  any presentation parsing; the first completed match (earliest end, then earliest start) removes
  the matched string and everything after it, including the rest of the same token's text;
- partial UTF-8 (held by the detokenizer) and text that may still begin a stop stay buffered until
  resolved; EOS or the output limit flushes an unmatched prefix;
- stop token ids and sequences match sampled ids; matched tokens are omitted from presentation and
  a pending sequence prefix is held back (not decoded) until it either completes or cannot;
- usage and raw-token observation count every sampled token, the crossing one included: that is
  the worker's business, this module only decides visible text and the stop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from helios.frontend.detokenize import IncrementalDetokenizer, Piece
from helios.frontend.errors import IncompatibleOptions, InvalidStop

MAX_STOP_STRINGS = 4
MAX_STOP_BYTES = 4096
MAX_STOP_SEQUENCES = 16
MAX_STOP_SEQUENCE_TOKENS = 64


@dataclass(frozen=True, slots=True)
class StopSpec:
    """A request's stops. Token stops are sequences; `stop_token_ids` are sequences of one id."""

    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    token_sequences: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if len(self.strings) > MAX_STOP_STRINGS:
            raise InvalidStop("stop", f"at most {MAX_STOP_STRINGS} strings, got {len(self.strings)}")
        if any(not s for s in self.strings):
            raise InvalidStop("stop", "stop strings must be non-empty")
        total = sum(len(s.encode("utf-8")) for s in self.strings)
        if total > MAX_STOP_BYTES:
            raise InvalidStop("stop", f"stop strings total {total} UTF-8 bytes, at most {MAX_STOP_BYTES}")
        if any(t < 0 for t in self.token_ids):
            raise InvalidStop("stop_token_ids", "token ids must be non-negative")
        if len(self.token_sequences) > MAX_STOP_SEQUENCES:
            raise InvalidStop(
                "stop_token_sequences",
                f"at most {MAX_STOP_SEQUENCES} sequences, got {len(self.token_sequences)}",
            )
        for index, sequence in enumerate(self.token_sequences):
            if not 1 <= len(sequence) <= MAX_STOP_SEQUENCE_TOKENS:
                raise InvalidStop(
                    f"stop_token_sequences.{index}",
                    f"a sequence holds 1 to {MAX_STOP_SEQUENCE_TOKENS} tokens, got {len(sequence)}",
                )
            if any(t < 0 for t in sequence):
                raise InvalidStop(f"stop_token_sequences.{index}", "token ids must be non-negative")
        if self.strings and (self.token_ids or self.token_sequences):
            field = "stop_token_ids" if self.token_ids else "stop_token_sequences"
            raise IncompatibleOptions(field, "string stops cannot be combined with token stops")

    @property
    def host_stop(self) -> bool:
        """Whether the request needs the host-stop barrier (string stops)."""
        return bool(self.strings)

    def check_vocabulary(self, vocab_size: int) -> None:
        for token in self.token_ids:
            if token >= vocab_size:
                raise InvalidStop("stop_token_ids", f"id {token} is outside the vocabulary of {vocab_size}")
        for index, sequence in enumerate(self.token_sequences):
            for token in sequence:
                if token >= vocab_size:
                    raise InvalidStop(
                        f"stop_token_sequences.{index}",
                        f"id {token} is outside the vocabulary of {vocab_size}",
                    )


@dataclass(frozen=True, slots=True)
class FilterStep:
    """What one sampled token changed: newly visible pieces, and whether a stop matched."""

    pieces: tuple[Piece, ...]
    stopped: bool


class OutputFilter:
    """Decoding and stop matching of one request, fed one validated token at a time."""

    __slots__ = ("_detokenizer", "_held", "_pending_tokens", "_sequences", "_strings", "_stopped")

    def __init__(
        self, tokenizer: Tokenizer, stops: StopSpec, markers: Mapping[int, str] | None = None
    ) -> None:
        self._detokenizer = IncrementalDetokenizer(tokenizer, markers)
        self._strings = stops.strings
        self._sequences = tuple({(t,) for t in stops.token_ids} | set(stops.token_sequences))
        self._pending_tokens: list[int] = []  # a possible stop-sequence prefix, not decoded yet
        self._held: list[Piece] = []  # decoded text that may still begin a string stop
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def push(self, token_id: int) -> FilterStep:
        if self._stopped:
            raise RuntimeError("OutputFilter.push after a stop matched")
        if not self._sequences:
            return self._text(self._detokenizer.push(token_id))
        self._pending_tokens.append(token_id)
        matched = _completed_sequence(self._pending_tokens, self._sequences)
        if matched:
            released = self._pending_tokens[: len(self._pending_tokens) - matched]
            self._pending_tokens.clear()
            pieces = self._decode(released) + self._detokenizer.flush()
            self._stopped = True
            return FilterStep(tuple(pieces), True)
        keep = _longest_pending_prefix(self._pending_tokens, self._sequences)
        released = self._pending_tokens[: len(self._pending_tokens) - keep]
        del self._pending_tokens[: len(released)]
        return FilterStep(tuple(self._decode(released)), False)

    def finish(self) -> list[Piece]:
        """EOS or the output limit: release every buffered token and unmatched stop prefix."""
        if self._stopped:
            return []
        pieces = self._decode(self._pending_tokens)
        self._pending_tokens.clear()
        step = self._text(pieces + self._detokenizer.flush())
        if step.stopped:
            return list(step.pieces)
        released = list(step.pieces) + self._held
        self._held = []
        return released

    def _decode(self, tokens: Sequence[int]) -> list[Piece]:
        pieces: list[Piece] = []
        for token in tokens:
            pieces.extend(self._detokenizer.push(token))
        return pieces

    def _text(self, pieces: list[Piece]) -> FilterStep:
        if not self._strings:
            return FilterStep(tuple(pieces), False)
        if not pieces:
            return FilterStep((), False)
        held = self._held + pieces
        text = "".join(p.text for p in held)
        match = _first_completed_match(text, self._strings)
        if match is not None:
            self._held = []
            self._stopped = True
            return FilterStep(tuple(_cut(held, match)), True)
        keep = _longest_stop_prefix(text, self._strings)
        release, self._held = _split_release(held, len(text) - keep)
        return FilterStep(tuple(release), False)


def _first_completed_match(text: str, stops: Sequence[str]) -> int | None:
    """Start of the match that completes first (earliest end; ties: earliest start)."""
    best: tuple[int, int] | None = None
    for stop in stops:
        start = text.find(stop)
        if start >= 0:
            key = (start + len(stop), start)
            if best is None or key < best:
                best = key
    return None if best is None else best[1]


def _longest_stop_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a stop."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


def _cut(pieces: list[Piece], end: int) -> list[Piece]:
    """The pieces covering text[:end]; a marker cut in the middle is no longer its token: text."""
    out: list[Piece] = []
    position = 0
    for piece in pieces:
        if position >= end:
            break
        take = min(len(piece.text), end - position)
        if take == len(piece.text):
            out.append(piece)
        elif take > 0:
            out.append(Piece(piece.text[:take]))
        position += len(piece.text)
    return out


def _split_release(pieces: list[Piece], release: int) -> tuple[list[Piece], list[Piece]]:
    """Release text[:release] and hold the rest; a marker piece is never split (it stays held)."""
    out: list[Piece] = []
    position = 0
    for index, piece in enumerate(pieces):
        size = len(piece.text)
        if position + size <= release:
            out.append(piece)
            position += size
            continue
        if piece.marker or release <= position:
            return out, pieces[index:]
        cut = release - position
        return out + [Piece(piece.text[:cut])], [Piece(piece.text[cut:])] + pieces[index + 1 :]
    return out, []


def _completed_sequence(tokens: Sequence[int], sequences: Sequence[tuple[int, ...]]) -> int:
    """Length of the longest stop sequence that `tokens` now ends with, or 0."""
    best = 0
    for sequence in sequences:
        n = len(sequence)
        if n <= len(tokens) and n > best and tuple(tokens[-n:]) == sequence:
            best = n
    return best


def _longest_pending_prefix(tokens: Sequence[int], sequences: Sequence[tuple[int, ...]]) -> int:
    """Length of the longest suffix of `tokens` that is a proper prefix of a stop sequence."""
    best = 0
    for sequence in sequences:
        for k in range(min(len(sequence) - 1, len(tokens)), best, -1):
            if tuple(tokens[-k:]) == sequence[:k]:
                best = k
                break
    return best
