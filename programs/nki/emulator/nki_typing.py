"""Emulated `nki.typing` / `neuronxcc.nki.typing`: `tensor[shape, dtype]` types. As an annotation of a kernel argument
it declares the shape (and dtype) the kernel expects, and a launch with a different argument is refused; as a kernel
argument it stands for a tensor of that shape and dtype whose values are not given (AWS's tutorials benchmark kernels
on `nt.tensor[[8192, 4096], nl.bfloat16]`), which the launch fills with zeros."""

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

    def placeholder(self, name) -> np.ndarray:
        """The array a launch passes for this type given as an argument: zeros of its shape and dtype."""
        if self.shape is None or self.dtype is None:
            raise TypeError(f"kernel argument {name}: a tensor type passed as an argument needs a shape and a dtype")
        return np.zeros(self.shape, dtype=self.dtype)

    def __repr__(self):
        return f"tensor[{self.shape}, {self.dtype}]"


def _is_dim(x) -> bool:
    return isinstance(x, (int, np.integer))


class tensor:  # noqa: N801 - the NKI name
    """`tensor` alone annotates any tensor; `tensor[shape, dtype]`, `tensor[shape]` (shape a list or tuple) and
    `tensor[d0, d1, ...]` / `tensor[d0, d1, ..., dtype]` a specific one."""

    def __class_getitem__(cls, params):
        params = params if isinstance(params, tuple) else (params,)
        dtype = None
        if params and not _is_dim(params[-1]) and not isinstance(params[-1], (list, tuple)):
            params, dtype = params[:-1], params[-1]
        if len(params) == 1 and isinstance(params[0], (list, tuple)):
            shape = params[0]
        elif all(_is_dim(d) for d in params):
            shape = params or None
        else:
            raise TypeError(f"nki.typing.tensor[shape, dtype]: cannot read a shape from {params!r}")
        return TensorType(shape, dtype)
