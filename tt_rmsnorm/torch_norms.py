"""How torch and Hugging Face RMSNorm modules hold their epsilon and weight, so that a model's own norm module builds
the package's (`DistributedRMSNorm.from_torch`).

- `torch.nn.RMSNorm`, recognised by `normalized_shape` and `eps`: epsilon `eps`, where None the epsilon of the
  activations' dtype (torch takes `finfo(input.dtype).eps`); weight `weight`, where None (`elementwise_affine=False`)
  no scale;
- Hugging Face Llama-style (`LlamaRMSNorm`, Mistral, Qwen2, ...), recognised by `variance_epsilon`: epsilon
  `variance_epsilon`, weight `weight`;
- Hugging Face Gemma-style (`GemmaRMSNorm`, `Gemma2RMSNorm`, ...), recognised by a Gemma...RMSNorm class with `eps`:
  epsilon `eps`, weight `1 + weight` (stored as w - 1).

A module that has none of these is a RuleError naming what it lacks. No scale is a weight of ones: the kernels multiply
by it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tt_rmsnorm.errors import RuleError


@dataclass(frozen=True)
class TorchNorm:
    """What a torch norm module computes: y = x / sqrt(mean(x^2) + epsilon) * weight, over `dim` elements."""

    convention: str
    dim: int
    epsilon: float
    weight: torch.Tensor  # float32, `dim` elements, the unit offset applied


def read_torch_norm(norm, activation_dtype=torch.bfloat16) -> TorchNorm:
    """The epsilon and weight of a torch RMSNorm module by the conventions above. `activation_dtype`: the dtype of
    the activations the norm will see, whose epsilon `torch.nn.RMSNorm(eps=None)` takes."""
    name = type(norm).__name__
    weight = getattr(norm, "weight", None)
    if hasattr(norm, "normalized_shape") and hasattr(norm, "eps"):
        shape = tuple(norm.normalized_shape)
        if len(shape) != 1:
            raise RuleError(
                "torch_norm.normalized_shape",
                "a norm over the last dim only: the hidden dim is one dim",
                f"normalized_shape {shape}",
                "torch.nn.RMSNorm(hidden_size, ...)",
            )
        epsilon = torch.finfo(activation_dtype).eps if norm.eps is None else float(norm.eps)
        return TorchNorm("torch.nn.RMSNorm", shape[0], epsilon, _weight(weight, shape[0], 0.0))
    if weight is None:
        raise RuleError(
            "torch_norm.weight",
            "a Hugging Face RMSNorm module holds its scale as `weight`",
            f"{name} without weight",
            "give the module a weight, or build DistributedRMSNorm from its state_dict",
        )
    dim = weight.numel()
    if "gemma" in name.lower() and hasattr(norm, "eps"):
        return TorchNorm("Gemma-style", dim, float(norm.eps), _weight(weight, dim, 1.0))
    if hasattr(norm, "variance_epsilon"):
        return TorchNorm("Llama-style", dim, float(norm.variance_epsilon), _weight(weight, dim, 0.0))
    raise RuleError(
        "torch_norm.convention",
        "a torch RMSNorm module of a known convention: torch.nn.RMSNorm (normalized_shape, eps), Hugging Face "
        "Llama-style (variance_epsilon) or Gemma-style (a Gemma...RMSNorm class with eps, weight stored as w - 1)",
        f"{name} with {sorted(k for k in ('eps', 'variance_epsilon', 'normalized_shape') if hasattr(norm, k))}",
        "build DistributedRMSNorm from the state_dict with eps= and add_unit_offset= as the module defines them",
    )


def _weight(weight, dim: int, offset: float) -> torch.Tensor:
    if weight is None:
        return torch.ones(dim)
    return weight.detach().reshape(-1).float() + offset
