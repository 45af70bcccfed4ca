"""Prompt scores as responses present them (host side): the legacy completions `logprobs` object
(echo) and vLLM's `prompt_logprobs` extension.

A request asking for prompt scores receives `PromptScoreEvent`s before its first token; together they
cover prompt tokens 1 .. n - 1 (token 0 has no prefix). `ScoredPrompt.of` joins them (a gap or an
overlap is an output failure: HTTP 500), and the two presenters shape them:

    completions, echo + logprobs k:  {"tokens": [...], "token_logprobs": [null, ...],
                                      "top_logprobs": [null, {text: logprob, ...}, ...], "text_offset": [...]}
    prompt_logprobs k (chat and completions): [null, {"id": {"logprob", "rank", "decoded_token"}, ...}, ...]

Each position's alternatives are the k most likely ids, and the prompt token's own entry besides
when it is not among them (so up to k + 1 entries, as vLLM and OpenAI return). Its rank is 1 + its
place among the alternatives, or null when it lies past the k the core scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from helios.errors import HeliosError
from helios.runtime.scores import PromptScoreEvent

TokenText = Callable[[int], str]  # the text of one token id


class PromptScoresIncomplete(HeliosError):
    """The prompt-score events of a response do not cover its prompt exactly once (an output failure)."""


@dataclass(frozen=True, slots=True)
class ScoredPrompt:
    """A prompt with each token's score: `logprobs[i]` and `top[i]` of prompt token i + 1."""

    prompt_token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]

    @classmethod
    def of(cls, prompt_token_ids: Sequence[int], events: Sequence[PromptScoreEvent]) -> ScoredPrompt:
        logprobs: list[float] = []
        top: list[tuple[tuple[int, float], ...]] = []
        for event in sorted(events, key=lambda e: e.first):
            if event.first != len(logprobs) + 1:
                raise PromptScoresIncomplete(f"prompt scores from token {event.first} follow scores of tokens "
                                             f"1 to {len(logprobs)}")
            logprobs.extend(event.logprobs)
            top.extend(event.top)
        if len(logprobs) != max(len(prompt_token_ids) - 1, 0):
            raise PromptScoresIncomplete(f"scores of {len(logprobs)} prompt tokens for a prompt of "
                                         f"{len(prompt_token_ids)}")
        return cls(tuple(prompt_token_ids), tuple(logprobs), tuple(top))

    def _entries(self, index: int) -> list[tuple[int, float, int | None]]:
        """(id, log-probability, rank) of prompt token `index`'s alternatives, then of the token itself
        when it is not among them."""
        token = self.prompt_token_ids[index]
        entries = [(i, lp, rank) for rank, (i, lp) in enumerate(self.top[index - 1], start=1)]
        if all(i != token for i, _, _ in entries):
            entries.append((token, self.logprobs[index - 1], None))
        return entries

    def completion_logprobs(self, token_text: TokenText) -> dict[str, Any]:
        """The legacy completions `logprobs` object of the echoed prompt."""
        tokens = [token_text(t) for t in self.prompt_token_ids]
        offsets, at = [], 0
        for text in tokens:
            offsets.append(at)
            at += len(text)
        top: list[dict[str, float] | None] = [None]
        for index in range(1, len(tokens)):
            top.append({token_text(i): lp for i, lp, _ in self._entries(index)})
        return {"tokens": tokens, "token_logprobs": [None, *self.logprobs], "top_logprobs": top,
                "text_offset": offsets}

    def prompt_logprobs(self, token_text: TokenText) -> list[dict[str, dict[str, Any]] | None]:
        """vLLM's `prompt_logprobs`: per prompt token, its alternatives by id."""
        out: list[dict[str, dict[str, Any]] | None] = [None]
        for index in range(1, len(self.prompt_token_ids)):
            out.append({str(i): {"logprob": lp, "rank": rank, "decoded_token": token_text(i)}
                        for i, lp, rank in self._entries(index)})
        return out


__all__ = ["PromptScoresIncomplete", "ScoredPrompt", "TokenText"]
