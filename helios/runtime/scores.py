"""Prompt scores (host side, shared by both runtimes): what a SCORED_PREFILL round reads back, its
validation, and the event a request's stream carries.

A scored prefill consumes a chunk of a request's prompt like PREFILL and also writes, for each of
its packed rows, the log-probability of the row's scored-prefill target (the prompt token after the
row's own) and the K most likely ids with theirs, into the completion record's two score buffers
(`COMPLETION_FIELD_PROMPT_SCORES` [P, K + 1] f32, `COMPLETION_FIELD_PROMPT_SCORE_IDS` [P, K] i32).
Row p of a lane at position `consumed + p` scores prompt token `consumed + p + 1`; the first prompt
token has no prefix and no score.

    scores = read_prompt_scores(arrays, packed_tokens)       # an executor, after the round
    validate_prompt_scores(graph, scores, sampled_tokens)    # the scheduler, with the round's rows
    event = prompt_score_event(scores, row, first, count, top)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.completion import CompletionInvalid

M = manifest_pb2


class PromptScoresInvalid(CompletionInvalid):
    """A scored round's scores are missing, an id lies outside the vocabulary, or a log-probability
    is positive or NaN (an execution failure of the round)."""


@dataclass(frozen=True, slots=True)
class PromptScores:
    """One SCORED_PREFILL round's scores, per packed row, as read back (unvalidated)."""

    target: np.ndarray  # [T] f32: each packed row's target log-probability (0 where it has no target)
    top_logprobs: np.ndarray  # [T, K] f32: the row's K highest log-probabilities, decreasing
    top_ids: np.ndarray  # [T, K] int64: their ids

    @property
    def width(self) -> int:
        """K: the alternatives each row carries."""
        return int(self.top_ids.shape[1])


def read_prompt_scores(arrays: Mapping[int, np.ndarray], packed_tokens: int) -> PromptScores | None:
    """The score rows of a round's `packed_tokens` packed tokens from the record held on the host
    (`arrays`: CompletionField -> buffer); None when the layout has no score fields."""
    scores = arrays.get(M.COMPLETION_FIELD_PROMPT_SCORES)
    ids = arrays.get(M.COMPLETION_FIELD_PROMPT_SCORE_IDS)
    if scores is None or ids is None:
        return None
    scores = np.asarray(scores, dtype=np.float32)[:packed_tokens]
    return PromptScores(scores[:, 0].copy(), scores[:, 1:].copy(),
                        np.asarray(ids, dtype=np.int64)[:packed_tokens].copy())


def validate_prompt_scores(graph: str, scores: PromptScores | None, packed_tokens: int, sampled_tokens: int) -> None:
    """The scores of a scored round before any of them is delivered: a row per packed token, ids
    within the sampled vocabulary, log-probabilities at most 0 (-inf allowed, NaN never)."""
    if scores is None:
        raise PromptScoresInvalid(f"graph {graph}: a SCORED_PREFILL round read back no prompt scores")
    if len(scores.target) < packed_tokens or len(scores.top_ids) < packed_tokens:
        raise PromptScoresInvalid(f"graph {graph}: {len(scores.target)} score rows for {packed_tokens} packed tokens")
    values = np.concatenate([scores.target[:packed_tokens, None], scores.top_logprobs[:packed_tokens]], axis=1)
    if np.isnan(values).any() or (values > 0).any():
        row = int(np.argwhere(np.isnan(values) | (values > 0))[0][0])
        raise PromptScoresInvalid(f"graph {graph}: packed row {row} has a log-probability that is NaN or above 0")
    ids = scores.top_ids[:packed_tokens]
    if ids.size and (ids.min() < 0 or ids.max() >= sampled_tokens):
        row = int(np.argwhere((ids < 0) | (ids >= sampled_tokens))[0][0])
        raise PromptScoresInvalid(f"graph {graph}: packed row {row} names an id outside the sampled vocabulary "
                                  f"[0, {sampled_tokens})")


@dataclass(frozen=True, slots=True)
class PromptScoreEvent:
    """Scores of consecutive prompt tokens, from one scored round of the request (not terminal)."""

    first: int  # index in the prompt of the first scored token (>= 1: token 0 has no prefix)
    logprobs: tuple[float, ...]  # log-probability of prompt tokens first, first + 1, ... given their prefix
    top: tuple[tuple[tuple[int, float], ...], ...]  # per scored token: the request's k most likely (id, logprob)


def prompt_score_event(scores: PromptScores, row: int, first: int, count: int, top: int) -> PromptScoreEvent:
    """The event of `count` prompt tokens from `first` on, scored by packed rows `row`, `row + 1`, ...
    (row `row + i` holds the distribution that follows token `first + i - 1`), with `top` alternatives."""
    end = row + count
    ids = scores.top_ids[row:end, :top].tolist()
    logprobs = scores.top_logprobs[row:end, :top].tolist()
    return PromptScoreEvent(first, tuple(scores.target[row:end].tolist()),
                            tuple(tuple(zip(i, lp, strict=True)) for i, lp in zip(ids, logprobs, strict=True)))




def score_refusal(top: int, width: int) -> str | None:
    """Why a request asking for `top` alternatives a prompt token cannot be scored by graphs giving
    `width` (0: the core has no SCORED_PREFILL graphs), or None: the one wording every runtime uses."""
    if not width:
        return "the core has no SCORED_PREFILL graphs (prompt scores): prepare it again with this Helios to serve them"
    if top > width:
        return f"{top} prompt-token alternatives requested; the core's SCORED_PREFILL graphs give {width}"
    return None


def prompt_score_width(contract) -> int:
    """K of a `helios.contract.PreparedContract`: the alternatives its scored prefill gives each prompt
    token; 0 when it has no SCORED_PREFILL graph (a core prepared before scored prefill existed)."""
    if not any(int(g.operation) == contract_pb2.OPERATION_SCORED_PREFILL for g in contract.graphs):
        return 0
    fields = dict(contract.manifest.completion)
    buffer = contract.manifest.buffer(fields.get(M.COMPLETION_FIELD_PROMPT_SCORE_IDS, ""))
    return int(buffer.shape[1]) if buffer is not None and len(buffer.shape) == 2 else 0


def core_prompt_score_width(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest) -> int:
    """`prompt_score_width` of a core's contract and manifest as stored (before decoding)."""
    if not any(g.operation == contract_pb2.OPERATION_SCORED_PREFILL for g in serving.model.graphs):
        return 0
    fields = {slot.field: slot.buffer for slot in manifest.completion.fields}
    name = fields.get(M.COMPLETION_FIELD_PROMPT_SCORE_IDS)
    buffer = next((b for b in manifest.buffers if b.name == name), None)
    return int(buffer.shape[1]) if buffer is not None and len(buffer.shape) == 2 else 0


__all__ = ["PromptScoreEvent", "PromptScores", "PromptScoresInvalid", "core_prompt_score_width", "prompt_score_event",
           "prompt_score_width", "score_refusal",
           "read_prompt_scores", "validate_prompt_scores"]
