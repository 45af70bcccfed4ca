"""Counter-based Philox4x32-10 in NumPy, bit for bit as Triton's `tl.randint` / `tl.rand` (host side).

Random123's Philox4x32 with 10 rounds. Per round, with M0 = 0xD2511F53 and M1 = 0xCD9E8D57:

    c0, c1, c2, c3 = hi(M1*c2) ^ c1 ^ k0,  lo(M1*c2),  hi(M0*c0) ^ c3 ^ k1,  lo(M0*c0)
    k0, k1 = k0 + 0x9E3779B9, k1 + 0xBB67AE85          (all mod 2^32)

Triton's key and counter (what `randint(seed, offset)` does):

    k0 = seed_u64 & 0xFFFFFFFF        k1 = seed_u64 >> 32      (a negative seed sign-extends)
    c0 = offset & 0xFFFFFFFF          c1 = offset >> 32 for a 64-bit offset, else 0;   c2 = c3 = 0

`randint` is the first output word; `rand` reads it as int32, maps x < 0 to ~x and multiplies by
float32 4.6566127342e-10. Helios's sampling counter is the 64-bit offset
`(token_position << 32) | draw_index` (docs/sampling.md).
"""

from __future__ import annotations

import numpy as np

PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint32(0x9E3779B9)
PHILOX_W1 = np.uint32(0xBB67AE85)
PHILOX_ROUNDS = 10
RAND_SCALE = np.float32(4.6566127342e-10)
_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def philox4x32(
    counter: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    key: tuple[np.ndarray, np.ndarray],
    rounds: int = PHILOX_ROUNDS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32-`rounds` of uint32 arrays (broadcast together); returns the four output words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in counter)
    k0, k1 = (np.asarray(k, dtype=np.uint32) for k in key)
    c0, c1, c2, c3, k0, k1 = np.broadcast_arrays(c0, c1, c2, c3, k0, k1)
    with np.errstate(over="ignore"):
        for _ in range(rounds):
            product0 = PHILOX_M0 * c0.astype(np.uint64)
            product1 = PHILOX_M1 * c2.astype(np.uint64)
            hi0, lo0 = (product0 >> _32).astype(np.uint32), (product0 & _LOW).astype(np.uint32)
            hi1, lo1 = (product1 >> _32).astype(np.uint32), (product1 & _LOW).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = k0 + PHILOX_W0
            k1 = k1 + PHILOX_W1
    return c0, c1, c2, c3


def _bits64(value: np.ndarray | int) -> np.ndarray:
    """The 64 bits of an integer (array) as uint64: signed values in two's complement."""
    if isinstance(value, int):
        return np.asarray(value % 2**64, dtype=np.uint64)
    array = np.asarray(value)
    if array.dtype.kind == "i":
        return array.astype(np.int64).view(np.uint64)
    return array.astype(np.uint64)


def seed_key(seed: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(k0, k1) of a seed taken as uint64; negative seeds sign-extend (two's complement bits)."""
    bits = _bits64(seed)
    return (bits & _LOW).astype(np.uint32), (bits >> _32).astype(np.uint32)


def offset_counter(offset: np.ndarray | int, wide: bool = True) -> tuple[np.ndarray, ...]:
    """(c0, c1, c2, c3) of an offset: wide (64-bit) offsets carry their high word in c1."""
    bits = _bits64(offset)
    c0 = (bits & _LOW).astype(np.uint32)
    c1 = (bits >> _32).astype(np.uint32) if wide else np.zeros_like(c0)
    zero = np.zeros_like(c0)
    return c0, c1, zero, zero


def randint(seed: np.ndarray | int, offset: np.ndarray | int, wide: bool = True) -> np.ndarray:
    """uint32 words as `tl.randint(seed, offset)`; `wide` says the offset is a 64-bit integer."""
    return philox4x32(offset_counter(offset, wide), seed_key(seed))[0]


def uint_to_uniform_float(words: np.ndarray) -> np.ndarray:
    """float32 in [0, 1) from uint32 words, as Triton's `uint_to_uniform_float`."""
    x = np.asarray(words, dtype=np.uint32).view(np.int32)
    x = np.where(x < 0, ~x, x)
    return (x.astype(np.float32) * RAND_SCALE).astype(np.float32)


def rand(seed: np.ndarray | int, offset: np.ndarray | int, wide: bool = True) -> np.ndarray:
    """float32 uniforms in [0, 1) as `tl.rand(seed, offset)`."""
    return uint_to_uniform_float(randint(seed, offset, wide))


def sampling_offset(token_position: np.ndarray | int, draw_index: int = 0) -> np.ndarray:
    """The 64-bit Philox offset of a sampling draw: `(token_position << 32) | draw_index`."""
    position = np.asarray(token_position, dtype=np.int64)
    return (position << np.int64(32)) | np.int64(draw_index)
