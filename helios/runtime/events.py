"""Runtime events (host side): what a submitted request's event stream carries, in order.

Owns: `Termination` (the distinct ways a generation ends) and the event dataclasses. A stream holds
a request's `PromptScoreEvent`s when it asked for prompt scores (helios.runtime.scores; they come
before its first token), any number of `TokenEvent`s, then exactly one terminal event: `Finished` (EOS, output limit,
user stop, cancellation), `Failed` (execution failure) or `Rejected` (scheduler admission
rejection, its own event so that no status code depends on error text).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from helios.runtime.scores import PromptScoreEvent


class Termination(enum.Enum):
    EOS = "eos"  # sampled one of the core's EOS ids: finish_reason "stop"
    LENGTH = "length"  # reached the request's output limit: finish_reason "length"
    STOP = "stop"  # a user stop (string, token id or token sequence) matched: finish_reason "stop"
    CANCELLED = "cancelled"  # cancelled by the client (dropped connection) or shutdown

    @property
    def finish_reason(self) -> str | None:
        return {"eos": "stop", "length": "length", "stop": "stop"}.get(self.value)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One validated sampled token."""

    token_id: int
    pieces: tuple[object, ...]  # visible output the token released, as the request's output filter made it
    timestamp_ns: int | None  # observation clock, set only for timed requests


@dataclass(frozen=True, slots=True)
class Finished:
    termination: Termination
    pieces: tuple[object, ...]  # output still buffered by the filter, released at the end
    prompt_tokens: int
    output_tokens: int  # every sampled token, the one crossing a stop and EOS included
    reused_prompt_tokens: int  # prompt tokens served from cached prefixes


@dataclass(frozen=True, slots=True)
class Failed:
    """Model execution, device or output failure: HTTP 500 (or an SSE error event)."""

    message: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """Scheduler admission rejection: HTTP 503 for non-stream requests (or an SSE error event).
    `temporary`: the same request may succeed later (the worker is stopping, or a submitter that did
    not wait for ingress room found it full), so the 503 carries `Retry-After`; otherwise the
    request can never fit the prepared capacities."""

    reason: str
    temporary: bool = False


Event = TokenEvent | PromptScoreEvent | Finished | Failed | Rejected
TERMINAL = (Finished, Failed, Rejected)
