"""The request a runtime executes (host side): prompt tokens, sampling and limits.

This is the seam between the frontend (which renders, tokenizes and validates) and an engine (which
schedules and runs graphs). Plain frozen data; every field is validated on construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from helios.errors import HeliosError


class InvalidRequest(HeliosError):
    """A request field is out of range; the message names the field."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling parameters of one request. temperature 0 means greedy (argmax)."""

    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # nucleus mass in (0, 1]
    top_k: int = 0  # 0: disabled
    min_p: float = 0.0  # in [0, 1]; 0: disabled
    repetition_penalty: float = 1.0  # > 0; 1: disabled
    presence_penalty: float = 0.0  # in [-2, 2]
    frequency_penalty: float = 0.0  # in [-2, 2]
    seed: int = 0  # Philox key: taken as uint64 (a negative seed sign-extends)

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0):
            raise InvalidRequest(f"temperature must be >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidRequest(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 <= self.min_p <= 1.0):
            raise InvalidRequest(f"min_p must be in [0, 1], got {self.min_p}")
        if not (self.repetition_penalty > 0.0):
            raise InvalidRequest(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not (-2.0 <= value <= 2.0):
                raise InvalidRequest(f"{name} must be in [-2, 2], got {value}")
        if not (-(2**63) <= self.seed < 2**64):
            raise InvalidRequest(f"seed must fit in 64 bits, got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def rank_filtered(self) -> bool:
        """Whether a draw filters ids by rank (top-k, top-p or min-p); a greedy request never draws."""
        return self.temperature > 0.0 and (self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0)


@dataclass(frozen=True, slots=True, eq=False)
class RequestImage:
    """One image of a request, as the frontend's image layout prepared it (helios.runtime.images)."""

    start: int  # the prompt position of the span's first sentinel
    features: int  # the span's length: one sentinel per feature
    digest: bytes  # the image bytes' SHA-256
    tensors: tuple[tuple[str, np.ndarray], ...]  # the layout's outputs (IMAGE_TENSOR), by name
    feature_offsets: np.ndarray  # [encoder rows] i32: each row's feature within the image, -1 for none

    @property
    def end(self) -> int:
        return self.start + self.features


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation as an engine sees it: tokens in, limits, sampling, terminal ids."""

    prompt_token_ids: tuple[int, ...]  # rendered and tokenized prompt, at least one id
    max_tokens: int  # output limit (sampled tokens, EOS included)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    eos_token_ids: tuple[int, ...] = ()  # generation ends after sampling one of these
    ignore_eos: bool = False  # benchmarks: keep generating past EOS up to max_tokens
    # the prompt's images (helios.runtime.images), in prompt order; each span's positions hold its
    # image sentinels
    images: tuple[RequestImage, ...] = ()

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise InvalidRequest("prompt_token_ids must hold at least one token")
        previous = 0
        for index, image in enumerate(self.images):
            if image.start < previous or image.features < 1 or image.end > len(self.prompt_token_ids):
                raise InvalidRequest(f"images[{index}]: its span [{image.start}, {image.end}) must follow the "
                                     f"previous image's and lie inside the {len(self.prompt_token_ids)}-token prompt")
            previous = image.end
        if any(t < 0 for t in self.prompt_token_ids):
            raise InvalidRequest("prompt_token_ids must be non-negative")
        if self.max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be >= 1, got {self.max_tokens}")
