"""Triton kernels of the production runtime (device side), one module per kernel family.

Every kernel computes in FP32 and rounds once when it stores, as `docs/operators.md` requires. Set
`TRITON_INTERPRET=1` before importing these modules to run them on CPU tensors.
"""

from __future__ import annotations

import os

# Whether Triton interprets the kernels: fixed when they are defined (their modules' import), so a
# CPU load after a non-interpreted import cannot run them (`helios.production.loading` says so).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
