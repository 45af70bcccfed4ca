"""The GPU's code paths on a CPU (device side, no torch): `GpuPaths`, one explicit switch.

On a CPU the production runtime normally takes the choices that make the Triton interpreter fast:
products on torch, every kernel over one large tile, attention in one pass over the context, and the
executor's host staging *is* the device buffer, so uploads are no-ops. The branches a GPU takes are
then reached only by single kernel tests: the multi-output product's per-group tile offsets, the
column and K tiling, programs of one or a few rows (norm, rotary: row offsets from the program id),
the context splits and their combine pass, blocked vocabulary scans (sampler, argmax), blocked row
copies, and the page-table uploads (whole rows and entry slices) out of separate staging.

`LoadOptions(gpu_paths=GpuPaths())` (and `lower_program(..., gpu_paths=...)`, `NativeExecutor(...,
separate_staging=True)`) forces those branches at the smallest shapes that still take each of
them, on any device; numerics are unchanged (every kernel still loads, computes in FP32 and rounds
once on store). What it forces, per launch:

  products   Triton (the "auto" policy becomes "triton", so the q/k/v and gate/up fusions are taken),
             at least two column tiles per output group and at least two K steps (`product_blocks`);
  norm, rotary   `rows_per_program` rows a program: several programs, each at a row offset;
  attention  `attention_splits` context splits with the combine pass, at every context length,
             walking `attention_keys` keys a program iteration;
  sampler, argmax   `vocab_block` ids a program (several blocks a row, the last one partial);
  gathers, activation   `copy_block` elements a program iteration (several iterations a row);
  executor   staging distinct from the device buffers (not pinned on a CPU), uploaded by copies of
             whole buffers, rows and page-table entry slices, as on a GPU.

With it off (the default) nothing changes, on a GPU or a CPU. The interpreter pays about 5 ms per
program iteration, so the defaults are the smallest that take every branch on tiny cores.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError


class GpuPathsError(HeliosError):
    """A `GpuPaths` field is out of range (not a power of two, too small to take its branch)."""


def _power_of_two(value: int) -> bool:
    return value >= 1 and not value & (value - 1)


@dataclass(frozen=True, slots=True)
class GpuPaths:
    """The GPU's branches forced at small shapes (see the module docstring)."""

    rows_per_program: int = 4  # norm and rotary: rows a program (a GPU takes 1, the CPU default all)
    attention_splits: int = 2  # context splits of every attention launch (> 1: the combine pass runs)
    attention_keys: int = 16  # keys a program iteration of attention (AttentionTile.block_n, >= 16)
    vocab_block: int = 128  # ids a program of the sampler's kernels and argmax
    copy_block: int = 16  # elements a program iteration of the row gathers and the gated activation

    def __post_init__(self) -> None:
        for name in ("rows_per_program", "attention_splits", "attention_keys", "vocab_block", "copy_block"):
            value = getattr(self, name)
            if not isinstance(value, int) or not _power_of_two(value):
                raise GpuPathsError(f"GpuPaths.{name} must be a positive power of two, got {value!r}")
        if self.attention_splits < 2:
            raise GpuPathsError(f"GpuPaths.attention_splits must be at least 2 (the combine pass), "
                                f"got {self.attention_splits}")
        if self.attention_keys < 16:
            raise GpuPathsError(f"GpuPaths.attention_keys must be at least 16 (tl.dot), got {self.attention_keys}")

    def describe(self) -> str:
        return (f"gpu paths: triton products (>= 2 column tiles and K steps), {self.rows_per_program} rows a "
                f"norm/rotary program, {self.attention_splits} attention splits of {self.attention_keys}-key "
                f"steps, {self.vocab_block}-id vocabulary blocks, {self.copy_block}-element copies, "
                "separate staging")
