"""Production tests: on a machine without CUDA the Triton kernels run in the interpreter.

`TRITON_INTERPRET=1` must be set before any `@triton.jit` decorator runs, so it is set here, before
any test module imports `helios.production.kernels`.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
