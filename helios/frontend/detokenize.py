"""Incremental detokenization (host side): token ids in, text pieces out, never splitting a UTF-8
character.

Owns: `Piece` (a run of decoded text, or one whole delimiter token) and `IncrementalDetokenizer`.
The text of each new token is the difference between decoding a short window that ends with it and
the same window without it, so decoders that depend on context (sentencepiece's leading space,
byte-level BPE, `<0xNN>` byte-fallback tokens) give the same text as a whole-sequence decode. A
token whose bytes end inside a UTF-8 character decodes to a trailing U+FFFD; that character is held
back until a later token completes it (or until `flush`, which releases it as decoded), while the
complete characters before it are emitted at once.

      ids:  ... | prefix_offset ........ read_offset | new ids
                  already emitted text     ^ emitted up to here

Delimiter tokens (the single-token delimiters of the declared syntaxes) come out as their own
`Piece(marker=True)`, so parsers can tell a delimiter generated as its token from the same text
spelled with ordinary tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"


@dataclass(frozen=True, slots=True)
class Piece:
    """Decoded output text. marker: this is exactly one delimiter token, generated as that token."""

    text: str
    marker: bool = False

    def __post_init__(self) -> None:
        if self.marker and not self.text:
            raise ValueError("a marker piece carries its delimiter text")


class IncrementalDetokenizer:
    """Decodes one request's output tokens as they arrive."""

    __slots__ = ("_ids", "_markers", "_prefix", "_read", "_sent", "_tokenizer")

    def __init__(self, tokenizer: Tokenizer, markers: Mapping[int, str] | None = None) -> None:
        self._tokenizer = tokenizer
        self._markers = dict(markers or {})  # token id -> delimiter text
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._sent = 0  # characters already emitted past the read offset (complete ones only)

    def push(self, token_id: int) -> list[Piece]:
        """The text this token completes (possibly none while a character is incomplete)."""
        self._ids.append(token_id)
        marker = self._markers.get(token_id)
        if marker is None:
            prefix_text = self._decode(self._prefix, self._read)
            new_text = self._decode(self._prefix, len(self._ids))
            start = len(prefix_text) + self._sent
            if not new_text.endswith(_REPLACEMENT):
                self._prefix, self._read, self._sent = self._read, len(self._ids), 0
                return [Piece(new_text[start:])] if len(new_text) > start else []
            # Complete characters before the trailing incomplete one are final: emit them now.
            stable = new_text.rstrip(_REPLACEMENT)
            if len(stable) <= start:
                return []
            self._sent += len(stable) - start
            return [Piece(stable[start:])]
        # NOTE: a delimiter token cannot complete an earlier partial character, so whatever is held
        # back is released as decoded; the window restarts at the delimiter to keep the context
        # (leading-space) behaviour of the next token.
        pieces = self._release(len(self._ids) - 1)
        pieces.append(Piece(marker, marker=True))
        self._prefix, self._read, self._sent = len(self._ids) - 1, len(self._ids), 0
        return pieces

    def flush(self) -> list[Piece]:
        """Everything still held back (an incomplete character decodes to U+FFFD)."""
        pieces = self._release(len(self._ids))
        self._prefix = self._read = len(self._ids)
        self._sent = 0
        return pieces

    def _release(self, end: int) -> list[Piece]:
        start = len(self._decode(self._prefix, self._read)) + self._sent
        text = self._decode(self._prefix, end)
        return [Piece(text[start:])] if len(text) > start else []

    def _decode(self, start: int, end: int) -> str:
        if start >= end:
            return ""
        return self._tokenizer.decode(self._ids[start:end], skip_special_tokens=False)


def join_text(pieces: list[Piece]) -> str:
    return "".join(piece.text for piece in pieces)
