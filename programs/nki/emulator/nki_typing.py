"""Emulated `nki.typing` / `neuronxcc.nki.typing`: `tensor[shape, dtype]` annotations that declare the shape (and
dtype) a kernel expects of an argument; a launch with a different argument is refused."""

from __future__ import annotations

import numpy as np

from programs.nki.emulator import limits
from programs.nki.emulator.constraints import fail


class TensorType:
    def __init__(self, shape=None, dtype=None):
        self.shape = None if shape is None else tuple(int(s) for s in shape)
        self.dtype = None if dtype is None else np.dtype(dtype)

    def check(self, name, value):
        shape = tuple(getattr(value, "shape", ()))
        if self.shape is not None and shape != self.shape:
            fail(
                "argument shape differs from its nki.typing annotation",
                f"{name}: {shape} vs {self.shape}",
                "pass a tensor of the declared shape",
                limits.NKI_RELEASE_NOTES,
            )
        if self.dtype is not None and np.dtype(value.dtype) != self.dtype:
            fail(
                "argument dtype differs from its nki.typing annotation",
                f"{name}: {value.dtype} vs {self.dtype}",
                "pass a tensor of the declared dtype",
                limits.NKI_RELEASE_NOTES,
            )

    def __repr__(self):
        return f"tensor[{self.shape}, {self.dtype}]"


class tensor:  # noqa: N801 - the NKI name
    """`tensor` alone annotates any tensor; `tensor[shape, dtype]` / `tensor[shape]` a specific one."""

    def __class_getitem__(cls, params):
        params = (
            params
            if isinstance(params, tuple) and len(params) == 2 and not isinstance(params[1], int)
            else (
                params,
                None,
            )
        )
        return TensorType(*params)
