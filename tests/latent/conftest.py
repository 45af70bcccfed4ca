"""Latent-history tests: on a machine without CUDA the production kernels run in the Triton
interpreter, which must be switched on before any kernel module is imported."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
