"""The NumPy Philox against Triton's own `tl.randint` / `tl.rand`, run by the Triton interpreter.

TRITON_INTERPRET=1 must be set before any kernel is defined, so the kernels run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helios.reference import philox

pytest.importorskip("triton")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

SEEDS = [0, 1, -1, 42, 2**31 - 1, 2**32 + 7, 2**63 - 1, -(2**63), 123456789123, -987654321]

_KERNELS = r"""
import json, sys
import numpy as np
import torch
import triton
import triton.language as tl

@triton.jit
def draw(seed, offsets, ints, floats, n, BLOCK: tl.constexpr):
    index = tl.arange(0, BLOCK)
    mask = index < n
    offset = tl.load(offsets + index, mask=mask)
    tl.store(ints + index, tl.randint(seed, offset).to(tl.int32, bitcast=True), mask=mask)
    tl.store(floats + index, tl.rand(seed, offset), mask=mask)

seeds, wide, narrow = json.loads(sys.stdin.read())
result = []
for seed in seeds:
    row = {}
    for name, values, dtype in (("wide", wide, torch.int64), ("narrow", narrow, torch.int32)):
        offsets = torch.tensor(values, dtype=dtype)
        ints = torch.empty(len(values), dtype=torch.int32)
        floats = torch.empty(len(values), dtype=torch.float32)
        # A Python int seed becomes an i32 or i64 kernel argument by its size, as on a GPU.
        draw[(1,)](seed, offsets, ints, floats, len(values), BLOCK=triton.next_power_of_2(len(values)))
        row[name] = [ints.numpy().view(np.uint32).tolist(), floats.numpy().view(np.uint32).tolist()]
    result.append(row)
print(json.dumps(result))
"""


def test_numpy_philox_reproduces_triton_randint_and_rand_bit_for_bit():
    rng = np.random.default_rng(3)
    wide = [0, 1, 2**32 - 1, 2**32, (7 << 32) | 1, -1, 2**63 - 1] + rng.integers(-2**63, 2**63 - 1, 500).tolist()
    narrow = [0, 1, 2**31 - 1, -1, -(2**31)] + rng.integers(-2**31, 2**31 - 1, 250).tolist()
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", _KERNELS], input=json.dumps([SEEDS, wide, narrow]), cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    triton_words = json.loads(completed.stdout)
    for seed, row in zip(SEEDS, triton_words, strict=True):
        for name, offsets, is_wide in (("wide", np.array(wide, np.int64), True),
                                       ("narrow", np.array(narrow, np.int32), False)):
            ints, floats = row[name]
            seeds = np.full(len(offsets), seed, dtype=np.int64)
            np.testing.assert_array_equal(philox.randint(seeds, offsets, wide=is_wide), np.array(ints, np.uint32),
                                          err_msg=f"randint seed={seed} {name}")
            np.testing.assert_array_equal(philox.rand(seeds, offsets, wide=is_wide).view(np.uint32),
                                          np.array(floats, np.uint32), err_msg=f"rand seed={seed} {name}")
