"""Triton kernels of the production runtime (device side), one module per kernel family.

Every kernel computes in FP32 and rounds once when it stores, as `docs/operators.md` requires. Set
`TRITON_INTERPRET=1` before importing these modules to run them on CPU tensors.
"""

from __future__ import annotations
