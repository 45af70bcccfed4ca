"""The production runtime's device half (device side): Triton kernels, programs lowered to launch
plans over static buffers, CUDA-graph capture and replay, the executor (round plans in one or two
frames) and `NativeModel.load`. The host engine that drives it is `helios.engine`.

Importing this package imports nothing heavy: `load_runtime` (loading.py, re-exported here) imports
torch when it loads a core; the other modules import torch and triton.
"""

from __future__ import annotations

from helios.production.loading import load_runtime

__all__ = ["load_runtime"]
