"""Shared fixtures of the production tests: the device and activation dtype under test, conversions
between torch tensors and the reference's NumPy arrays, random paged cohorts, the tiny-core
preparation the executor tests share (`tiny_cores` in conftest.py), and mutants of a kernel module
(`mutant_module`)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pytest
import torch

from helios.ignition.prepare import PreparationOptions

GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if GPU else "cpu")
# bf16 on the GPU; fp32 on CPU, where the interpreter's bf16 arithmetic is broken.
DTYPE = torch.bfloat16 if GPU else torch.float32
# An fp32 CPU test: the production runtime on device="cpu" (interpreted kernels) token for token
# against the fp32 reference. A process on a GPU machine compiles the kernels (they cannot be
# interpreted there) and serves bf16: the test_gpu_*.py modules cover the device.
CPU_FP32 = pytest.mark.skipif(GPU, reason="an fp32 CPU test (interpreted kernels, device=\"cpu\"); on a GPU "
                              "the kernels are compiled, and the test_gpu_*.py modules cover the device")
# Tolerance of a result stored in DTYPE against the FP32 reference.
ATOL, RTOL = (2e-2, 2e-2) if GPU else (2e-5, 2e-5)

# Tiny cores of the executor tests: 19 prompt tokens are prefill chunks of 16 and 3 (pages of 4
# tokens), then decode rounds.
PROMPT = (5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120, 121, 9, 250)
TINY_OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16),
                                  context_tokens=64)
PAGES = 16


def tensor(array: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A device tensor of `array` (floating arrays take the activation dtype unless given)."""
    t = torch.from_numpy(np.ascontiguousarray(array))
    if dtype is None and t.is_floating_point():
        dtype = DTYPE
    return t.to(device=DEVICE, dtype=dtype or t.dtype)


def values(array: np.ndarray) -> np.ndarray:
    """`array` as the stored activation dtype holds it, back in float32 (what the reference reads)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(DTYPE).float().numpy()


def numpy(t: torch.Tensor) -> np.ndarray:
    return (t.float() if t.is_floating_point() else t).cpu().numpy()


def close(actual: torch.Tensor, expected: np.ndarray, atol: float = ATOL, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(numpy(actual), expected, atol=atol, rtol=rtol)


@dataclass(frozen=True)
class Cohort:
    """A random packed round: lanes with histories and query rows, pages shuffled over the plane."""

    token_lane: np.ndarray  # [P] i32, -1 on padding rows
    positions: np.ndarray  # [P] i32
    page_table: np.ndarray  # [B, max_pages] i32
    pages: int  # physical pages of the plane
    page_tokens: int


def cohort(rng: np.random.Generator, *, lanes: int, history: list[int], queries: list[int], padding: int,
           page_tokens: int, max_pages: int, spare_pages: int = 3) -> Cohort:
    """Lane l has `history[l]` committed tokens and `queries[l]` new rows (interleaved order is kept
    per lane: rows of one lane are contiguous, as packing lays them out)."""
    pages = lanes * max_pages + spare_pages
    physical = rng.permutation(pages).astype(np.int32)
    page_table = physical[: lanes * max_pages].reshape(lanes, max_pages)
    token_lane, positions = [], []
    for lane in range(lanes):
        for i in range(queries[lane]):
            token_lane.append(lane)
            positions.append(history[lane] + i)
    token_lane += [-1] * padding
    positions += [0] * padding
    return Cohort(np.array(token_lane, np.int32), np.array(positions, np.int32), page_table, pages, page_tokens)


def mutant_module(module: ModuleType, old: str, new: str, directory) -> ModuleType:
    """`module` with `old` replaced by `new` (exactly once), imported from a file of its own (the Triton
    interpreter reads kernel sources back)."""
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"the mutation's target is not unique in {module.__name__}: {old!r}"
    name = f"{module.__name__.rsplit('.', 1)[-1]}_mutant_{abs(hash(new)) % 10**8}"
    path = directory / f"{name}.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location(name, path)
    mutant = importlib.util.module_from_spec(spec)
    sys.modules[name] = mutant
    spec.loader.exec_module(mutant)
    return mutant
