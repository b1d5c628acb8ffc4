"""Triton tests run on CPU under Triton's interpreter when no CUDA device is present.

Triton reads TRITON_INTERPRET when a kernel is decorated, so it is set here, before any test imports programs.triton."""

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
