"""The production runtime's device half (device side): Triton kernels, programs lowered to launch
plans over static buffers, CUDA-graph capture and replay, and `NativeModel.load`.

Importing this package imports nothing heavy; the modules below import torch and triton.
"""

from __future__ import annotations
