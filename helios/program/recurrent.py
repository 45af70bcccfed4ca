"""The recurrent-state operators of the set (host side): the specs of `short_convolution` and
`state_row_copy` (version 6).

A recurrent history (HISTORY_KIND_RECURRENT) keeps, per request, a fixed-size state in rows of a
persistent STATE buffer instead of one record per token. Each lane owns live state rows (its
LIVE_STATE_ROWS binding: `state_rows[slot]`); snapshot rows follow the execution rows in the same
buffer (the specification's partition, docs/snapshots.md).

    short_convolution(state, x, weight, token_lane, positions, state_rows[, bias]) -> (state, out)
        A depthwise causal convolution of K taps over each lane's inputs, continued across rounds:
        `state` [R, K-1, C] holds each live row's last K-1 inputs. Row k of lane l (its k-th packed
        row, at position p0 + k where p0 is the position of its first row) is
            out[t, c] = bias[c] + sum_j weight[c, 0, j] * input(p0 + k - (K-1) + j, c)
        where input(q) is x of the lane's row at q when q >= p0, state[state_rows[l], K-1 - (p0 - q)]
        when 0 <= q < p0, and 0 when q < 0. Afterwards the lane's state row holds its inputs at the
        K-1 positions ending at its last row. Padding rows (lane outside [0, S)) give 0; a lane whose
        state row is outside [0, R) reads zeros and writes nothing. Updates `state` in place.
    state_row_copy(state, source, destination) -> state
        state[destination[b]] = state[source[b]] for every b with both rows inside [0, R), every read
        before any write (a RESTORATION program's snapshot and restore of recurrent state).

`docs/operators.md` gives the exact semantics; `helios.reference.recurrent` is the executable
definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, I32, TensorType

SINCE = 6

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]


def _index(t: TensorType, what: str) -> None:
    if t.dtype != I32 or t.rank != 1 or t.shape[0] == 0:
        raise RuleError(f"{what} must be i32 [N], got {t}")


def _short_convolution(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    state, x, weight, token_lane, positions, state_rows, *bias = ins
    if x.dtype not in ACTIVATION_DTYPES or x.rank != 2 or 0 in x.shape:
        raise RuleError(f"x must be a floating [P, C] tensor, got {x}")
    channels = x.shape[1]
    if weight.dtype not in ACTIVATION_DTYPES or weight.rank != 3 or weight.shape[:2] != (channels, 1) \
            or weight.shape[2] < 2:
        raise RuleError(f"weight must be a floating [C, 1, K] depthwise filter of K >= 2 taps (C = {channels}), "
                        f"got {weight}")
    taps = weight.shape[2]
    if state.dtype not in ACTIVATION_DTYPES or state.rank != 3 or state.shape[0] == 0 \
            or state.shape[1:] != (taps - 1, channels):
        raise RuleError(f"state must be floating [R, K-1, C] = [R, {taps - 1}, {channels}], got {state}")
    _index(token_lane, "token_lane")
    _index(positions, "positions")
    _index(state_rows, "state_rows")
    if token_lane.shape != positions.shape or token_lane.shape[0] != x.shape[0]:
        raise RuleError(f"token_lane {token_lane} and positions {positions} need one entry per row of x {x}")
    if bias and (bias[0].dtype not in ACTIVATION_DTYPES or bias[0].shape != (channels,)):
        raise RuleError(f"bias must be a floating [C] = [{channels}] vector, got {bias[0]}")
    return [state, TensorType(x.dtype, x.shape)]


def _state_row_copy(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    state, source, destination = ins
    if state.dtype not in ACTIVATION_DTYPES or state.rank < 2 or 0 in state.shape:
        raise RuleError(f"state must be a floating [R, ...] tensor with static extents, got {state}")
    _index(source, "source")
    _index(destination, "destination")
    if source.shape != destination.shape:
        raise RuleError(f"source {source} and destination {destination} need one entry per lane")
    return [state]


RECURRENT_SPECS = (
    OperatorSpec("short_convolution",
                 "depthwise causal convolution of K taps over each lane's rows, its last K-1 inputs kept "
                 "in the lane's state row (in place)",
                 ("state", "x", "weight", "token_lane", "positions", "state_rows", "bias"), ("state", "out"),
                 _short_convolution, optional_inputs=1, in_place=((0, 0),), since=SINCE),
    OperatorSpec("state_row_copy",
                 "state[destination[b]] = state[source[b]] for lanes with both rows in range (reads first)",
                 ("state", "source", "destination"), ("state",), _state_row_copy, in_place=((0, 0),),
                 since=SINCE),
)
