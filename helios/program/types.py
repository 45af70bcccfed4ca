"""Tensor types of the operator set (host side): a dtype and a static shape.

`TensorType` is what shape rules consume and produce. Dtypes are the wire enum `helios.v1.DType`;
`DTYPE_NAMES` gives each its short spelling for messages and attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError
from helios.proto import manifest_pb2

F32 = manifest_pb2.DTYPE_F32
BF16 = manifest_pb2.DTYPE_BF16
F16 = manifest_pb2.DTYPE_F16
I32 = manifest_pb2.DTYPE_I32
I64 = manifest_pb2.DTYPE_I64
U8 = manifest_pb2.DTYPE_U8
U32 = manifest_pb2.DTYPE_U32
F64 = manifest_pb2.DTYPE_F64

DTYPE_NAMES: dict[int, str] = {
    F32: "f32",
    BF16: "bf16",
    F16: "f16",
    I32: "i32",
    I64: "i64",
    U8: "u8",
    U32: "u32",
    F64: "f64",
}
DTYPES_BY_NAME: dict[str, int] = {name: dtype for dtype, name in DTYPE_NAMES.items()}

FLOAT_DTYPES = frozenset({F32, BF16, F16, F64})
# Activation dtypes: what hidden states, weights and caches may be stored in.
ACTIVATION_DTYPES = frozenset({F32, BF16, F16})
INTEGER_DTYPES = frozenset({I32, I64, U8, U32})


class InvalidTensorType(HeliosError):
    """A tensor type has an unknown dtype or a negative extent."""


def dtype_name(dtype: int) -> str:
    return DTYPE_NAMES.get(dtype, f"dtype#{dtype}")


def parse_dtype(dtype: int | str) -> int:
    """The wire enum value of a dtype given as enum value or short name ("f32", "bf16", ...)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES_BY_NAME:
            raise InvalidTensorType(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPES_BY_NAME)}")
        return DTYPES_BY_NAME[dtype]
    if dtype not in DTYPE_NAMES:
        raise InvalidTensorType(f"unknown dtype enum value {dtype}")
    return dtype


@dataclass(frozen=True, slots=True)
class TensorType:
    """A dtype (wire enum) and a static shape. A leading 0 marks a cache plane sized at load."""

    dtype: int
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise InvalidTensorType(f"unknown dtype enum value {self.dtype}")
        if any((not isinstance(e, int)) or e < 0 for e in self.shape):
            raise InvalidTensorType(f"shape {self.shape} must hold non-negative integers")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{dtype_name(self.dtype)}[{', '.join(str(e) for e in self.shape)}]"
