"""A call's input arrays: checked against the def's declarations and made contiguous.

    as_input(info, value) -> np.ndarray     one input, as the kernels take it

An input is a NumPy array of the declared rank and dtype (any strides: a non-contiguous
one is copied), or, for a 0-d input, a Python or NumPy scalar that fits the dtype.
Anything else is a `ShapeError` at the input's declaration, with a hint. A zero-stride
(broadcast) view is copied only up to `BROADCAST_COPY_LIMIT` bytes.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from compiler.diagnostics import ShapeError
from compiler.frontend.ast import ScalarType
from compiler.frontend.checked import TensorInfo
from compiler.interp.expr import NP_DTYPE


def _declaration(info: TensorInfo) -> str:
    return info.span.text or info.name


def as_input(info: TensorInfo, value: Any) -> np.ndarray:
    """`value` as a C-contiguous array of the declared dtype; a ShapeError otherwise."""
    expected = np.dtype(NP_DTYPE[info.dtype])
    if info.rank == 0 and isinstance(value, (numbers.Number, np.generic)):
        return scalar_input(info, value, expected)
    if not isinstance(value, np.ndarray):
        raise ShapeError(
            f"input '{info.name}' must be a NumPy array, got {type(value).__name__}",
            info.span,
            hint="convert with np.asarray(..., dtype=np." + expected.name + ")",
        )
    if value.ndim != info.rank:
        raise ShapeError(
            f"input '{info.name}' is declared with rank {info.rank} "
            f"(`{_declaration(info)}`), got an array of rank {value.ndim} with shape "
            f"{tuple(value.shape)}",
            info.span,
        )
    if value.dtype != expected:
        raise ShapeError(
            f"input '{info.name}' is declared {info.dtype.value}, got an array of "
            f"dtype {value.dtype}",
            info.span,
            hint=f"convert it with {info.name}.astype(np.{expected.name})",
        )
    if value.flags.c_contiguous:
        return value
    if 0 in value.strides and value.nbytes > BROADCAST_COPY_LIMIT:
        raise ShapeError(
            f"input '{info.name}' is a broadcast view (strides {value.strides}) of "
            f"{value.nbytes} bytes: the kernel needs a contiguous copy, larger than "
            f"BROADCAST_COPY_LIMIT ({BROADCAST_COPY_LIMIT} bytes)",
            info.span,
            hint="pass the smaller array and broadcast in TC (index it by fewer variables), "
            "or pass np.ascontiguousarray(...) yourself if you mean the copy",
        )
    # np.ascontiguousarray would turn a 0-d array into shape (1,).
    return value.copy(order="C")


BROADCAST_COPY_LIMIT = 2**30
"""Bytes: the largest contiguous copy made of a zero-stride (broadcast) input view."""


def scalar_input(info: TensorInfo, value: Any, expected: np.dtype) -> np.ndarray:
    if isinstance(value, np.generic) and value.dtype != expected:  # typed: the array rule
        raise ShapeError(
            f"input '{info.name}' is declared {info.dtype.value}, got a NumPy scalar of "
            f"dtype {value.dtype}",
            info.span,
            hint=f"pass np.{expected.name}(...) or a Python number",
        )
    is_integral = isinstance(value, (numbers.Integral, np.integer, np.bool_))
    if info.dtype.is_float or (is_integral and not isinstance(value, (bool, np.bool_))):
        if not info.dtype.is_float and not _fits(int(value), expected):
            raise ShapeError(
                f"input '{info.name}' is declared {info.dtype.value}; "
                f"{value!r} is out of its range",
                info.span,
            )
        return np.asarray(value, dtype=expected)
    if info.dtype is ScalarType.BOOL and isinstance(value, (bool, np.bool_)):
        return np.asarray(value, dtype=expected)
    raise ShapeError(
        f"input '{info.name}' is declared {info.dtype.value}, got {type(value).__name__} {value!r}",
        info.span,
        hint=f"pass an integer or np.{expected.name}(...)",
    )


def _fits(value: int, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return info.min <= value <= info.max
