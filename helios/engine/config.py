"""What the scheduler is given (host side): its limits, fixed once (`SchedulerConfig`), and each
request as the runtime hands it over (`SchedulerRequest`)."""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError
from helios.runtime.interface import GrammarMatcher
from helios.runtime.request import GenerationRequest


class InvalidSchedulerConfig(HeliosError):
    """A scheduler limit is out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_active: int  # request slots the scheduler fills (<= the graphs' request slots)
    queue_capacity: int  # the pending admission deque bound
    page_tokens: int  # tokens per page (CacheContract.page_tokens)
    context_tokens: int  # the served context: prompt + output limit must fit
    input_tokens: int  # prompt ids lie in [0, input_tokens)
    sampled_tokens: int  # sampled ids lie in [0, sampled_tokens)
    eos_ids: tuple[int, ...] = ()  # the core's EOS ids (a request without its own uses these)
    frames: int = 1  # rounds that may be in flight: the transport's frames, at most what the executor holds (1 or 2)
    speculative_width: int = 0  # decode lanes run SPECULATIVE rounds of this width (0: plain decoding)
    # Adaptive choice: each speculative cohort runs the program (DECODE, or SPECULATIVE of any selected
    # width) of the highest expected rate from measured costs (program_choice.py); `speculative_width`
    # is then the fallback while costs are unknown or stale.
    adaptive_speculation: bool = False
    cost_lifetime: float | None = None  # seconds a measured cost table stays fresh (None: while served)
    history_drafting: bool = False  # those rounds carry proposals copied from each request's tokens
    prompt_score_width: int = 0  # K: alternatives a SCORED_PREFILL round gives each prompt token (0: no such graph)
    # The continuation storage's snapshot rows (helios.runtime.packing.snapshot_rows); empty: preemption
    # releases every page and readmission recomputes what the prefix cache no longer holds.
    snapshot_rows: range = range(0)
    # Recurrent state (a RECURRENT history region, docs/recurrent.md): a request's state exists only at
    # the endpoint it was saved at, so a snapshot saves a continuation row at every endpoint (on a page
    # boundary too), a preemption without one recomputes from position 0, and no prefix is reused.
    recurrent_state: bool = False
    # Vision (docs/vision.md): the image feature slots a request may hold (0: a text-only core) and the
    # feature-store rows of one slot; every request slot has that many slots of the store.
    image_feature_slots: int = 0
    image_slot_rows: int = 0
    # Engram tables (docs/engram.md): the known tokens each lane carries before its first (the longest
    # n-gram order minus one; 0: no tables). The host hashes a lane's n-grams from its tokens, so a
    # request's next round waits for its previous one's completion (a request in flight joins no
    # second frame); other requests still fill the second frame.
    engram_history: int = 0

    def __post_init__(self) -> None:
        for name in ("max_active", "page_tokens", "context_tokens", "input_tokens", "sampled_tokens"):
            if getattr(self, name) < 1:
                raise InvalidSchedulerConfig(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.queue_capacity < 0:
            raise InvalidSchedulerConfig(f"queue_capacity must be >= 0, got {self.queue_capacity}")
        if self.adaptive_speculation and not self.speculative_width:
            raise InvalidSchedulerConfig("adaptive_speculation needs a fallback speculative_width >= 1")
        if self.cost_lifetime is not None and not self.cost_lifetime > 0:
            raise InvalidSchedulerConfig(f"cost_lifetime must be > 0 seconds, got {self.cost_lifetime}")
        if self.engram_history < 0:
            raise InvalidSchedulerConfig(f"engram_history must be >= 0, got {self.engram_history}")
        if self.frames not in (1, 2):
            raise InvalidSchedulerConfig(f"frames must be 1 or 2, got {self.frames}")


@dataclass(frozen=True, slots=True)
class SchedulerRequest:
    request_id: str
    generation: GenerationRequest
    host_stop: bool = False  # string stops: the host-stop barrier (one outstanding round while active)
    constrained: bool = False  # a grammar masks its sampling: completion feedback before its next round
    grammar: GrammarMatcher | None = None  # the constrained request's grammar: each sampling round's mask
    # prompt scores: the alternatives delivered per prompt token (0: the token's own log-probability
    # only); None: no scores, the prompt runs through PREFILL and MIXED rounds
    prompt_logprobs: int | None = None
    speculation: bool = True  # False: the request opted out of speculation and decodes plainly

    @property
    def needs_feedback(self) -> bool:
        return self.host_stop or self.constrained
