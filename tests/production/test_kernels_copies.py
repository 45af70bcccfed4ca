"""Copies and fills several at a time (kernels/copies.py) against torch's, and the lowering's rule
for grouping them (lowering/operators.py `move_group_size`). On a CPU the kernel runs in the Triton
interpreter; fresh random inputs each test."""

from __future__ import annotations

import pytest
import torch

from helios.production.kernels.copies import MAX_ITEMS, Move, copy_fill_group
from helios.production.lowering.operators import move_group_size
from helios.program.validate import ValidatedOperator
from tests.production.helpers import DEVICE


def test_one_launch_copies_and_fills_every_item_across_blocks():
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(-50, 50, (37,), generator=g, dtype=torch.int32),
               torch.randn(3, 11, generator=g),
               torch.randint(0, 1 << 40, (5,), generator=g, dtype=torch.int64),
               torch.randn(2, generator=g).to(torch.bfloat16)]
    sources = [t.to(DEVICE) for t in sources]
    copies = [torch.full_like(t, 9) for t in sources]
    fills = [(torch.zeros(4, dtype=torch.int32, device=DEVICE), -1),
             (torch.zeros(21, dtype=torch.float32, device=DEVICE), 0.25),
             (torch.zeros(3, dtype=torch.int64, device=DEVICE), (1 << 33) + 5),
             (torch.zeros(1, dtype=torch.int32, device=DEVICE), 1)]
    moves = [Move(dst.view(-1), src=src.view(-1)) for dst, src in zip(copies, sources, strict=True)]
    moves += [Move(dst, value=value) for dst, value in fills]
    assert len(moves) == MAX_ITEMS
    copy_fill_group(moves, block=8)()  # 37 elements: five blocks of the longest item
    for dst, src in zip(copies, sources, strict=True):
        assert torch.equal(dst, src)
    for dst, value in fills:
        assert torch.equal(dst, torch.full_like(dst, value))


def test_a_group_refuses_what_it_cannot_move():
    a = torch.zeros(4, device=DEVICE)
    with pytest.raises(ValueError, match="1..8"):
        copy_fill_group([Move(a, value=0)] * (MAX_ITEMS + 1))
    with pytest.raises(ValueError, match="destination's dtype"):
        Move(a, src=torch.zeros(4, dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous"):
        Move(torch.zeros(4, 4, device=DEVICE).t(), value=0)


def _op(kind: str, inputs: tuple[str, ...], output: str) -> ValidatedOperator:
    return ValidatedOperator(op=kind, inputs=inputs, outputs=(output,), attributes={"value": 0.0})


def test_copies_and_fills_group_while_they_touch_distinct_tensors():
    ops = [_op("copy", ("a",), "x"), _op("fill", (), "y"), _op("copy", ("b",), "z"), _op("where", ("c", "d", "e"), "w")]
    assert move_group_size(ops, 0) == 3  # the where ends the group
    assert move_group_size(ops, 3) == 0
    # a copy reading what the group wrote, one overwriting what it read, one writing a written tensor
    assert move_group_size([_op("fill", (), "x"), _op("copy", ("x",), "y")], 0) == 1
    assert move_group_size([_op("copy", ("a",), "x"), _op("fill", (), "a")], 0) == 1
    assert move_group_size([_op("fill", (), "x"), _op("fill", (), "x")], 0) == 1
    assert move_group_size([_op("copy", (f"s{i}",), f"d{i}") for i in range(MAX_ITEMS + 2)], 0) == MAX_ITEMS


def test_a_group_whose_writes_share_storage_with_another_item_runs_its_calls_in_order(monkeypatch):
    """Two names viewing one buffer: a fill of `b` and a copy out of `a`, where `b` is `a`'s storage.
    The group is not one launch (its items would run at once): its calls run in program order (the
    copy reads what the fill wrote), as the unfused calls do."""
    from helios.production.gpu_paths import GpuPaths
    from helios.production.kernels import copies
    from helios.production.lowering.context import Context
    from helios.production.lowering.operators import lower_move_group
    from helios.production.lowering.product_choice import FixedPolicy

    storage = torch.arange(4, dtype=torch.float32, device=DEVICE)
    out = torch.zeros(4, device=DEVICE)
    tensors = {"b": storage, "a": storage, "out": out}
    context = Context(tensors, None, torch.device(DEVICE), "test", FixedPolicy("torch"), {}, GpuPaths(), None, None)
    ops = [ValidatedOperator("fill", (), ("b",), {"value": 2.0}), ValidatedOperator("copy", ("a",), ("out",), {})]
    assert move_group_size(ops, 0) == 2  # by names the two touch distinct tensors
    monkeypatch.setattr(copies, "copy_fill_group", lambda *a, **k: pytest.fail("grouped despite shared storage"))
    lower_move_group(context, ops)()
    assert torch.equal(out, torch.full((4,), 2.0, device=DEVICE))


def test_gathers_whose_writes_share_storage_run_in_order(monkeypatch):
    """The gather group's counterpart: a gather writing the buffer the next one reads under another name."""
    from helios.production.gpu_paths import GpuPaths
    from helios.production.kernels import gather
    from helios.production.lowering.context import Context
    from helios.production.lowering.operators import gather_group_size, lower_gather_group
    from helios.production.lowering.product_choice import FixedPolicy

    storage = torch.zeros(3, 2, device=DEVICE)
    tensors = {"x": torch.arange(6, dtype=torch.float32, device=DEVICE).reshape(3, 2), "index": torch.tensor(
        [2, 0, 1], dtype=torch.int32, device=DEVICE), "y": storage, "y_alias": storage, "out": torch.zeros(3, 2, device=DEVICE)}
    context = Context(tensors, None, torch.device(DEVICE), "test", FixedPolicy("torch"), {}, GpuPaths(), None, None)
    ops = [ValidatedOperator("gather", ("x", "index"), ("y",), {}),
           ValidatedOperator("gather", ("y_alias", "index"), ("out",), {})]
    assert gather_group_size(ops, 0) == 2  # by names the two touch distinct tensors
    monkeypatch.setattr(gather, "gather_group", lambda *a, **k: pytest.fail("grouped despite shared storage"))
    lower_gather_group(context, ops)()
    picked = tensors["x"][[2, 0, 1]]
    assert torch.equal(storage, picked) and torch.equal(tensors["out"], picked[[2, 0, 1]])
