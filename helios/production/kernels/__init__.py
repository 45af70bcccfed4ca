"""Triton kernels of the production runtime (device side), one module per kernel family.

Every kernel computes in FP32 and rounds once when it stores, as `docs/operators.md` requires. Set
`TRITON_INTERPRET=1` before importing these modules to run them on CPU tensors.
"""

from __future__ import annotations

import os

# Whether Triton interprets the kernels: fixed when they are defined (their modules' import), so a
# CPU load after a non-interpreted import cannot run them (`helios.production.loading` says so).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRETED:
    import warnings

    # The interpreter evaluates every lane of a block in NumPy, masked ones included: arithmetic on
    # their fill values (-inf - -inf in a softmax's masked lanes) raises NumPy's "invalid value"
    # warnings on a CPU run although those lanes are never stored (a GPU's arithmetic raises none).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
