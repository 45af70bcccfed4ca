"""The reference runtime (host side, NumPy only): the executable specification of Helios.

`operators` holds one NumPy function per operator of the set, `interpreter` executes a captured
program, `philox` and `sampling` define the random draws and the sampling filters bit for bit,
`executor` runs round plans (the executor seam of `helios.runtime.rounds`), `engine` runs one
request at a time through them, and `loading.load_runtime` (re-exported here) builds the runtime the
commands serve. Nothing here imports torch or triton; a test enforces it.
"""

from __future__ import annotations

from helios.reference.loading import load_runtime

__all__ = ["load_runtime"]
