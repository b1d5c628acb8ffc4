"""Torch and Hugging Face norm modules read by their conventions (`tt_rmsnorm.torch_norms`), without a device: the
epsilon and weight each holds, and the package's distributed norm with them (the reference model) against the torch
module's own forward."""

import pytest
import torch
from torch import nn

from tt_rmsnorm import reference
from tt_rmsnorm.accuracy import assert_close
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.torch_norms import read_torch_norm

DIM = 8192


class LlamaRMSNorm(nn.Module):
    """Hugging Face's Llama convention: `weight` and `variance_epsilon`."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class GemmaRMSNorm(nn.Module):
    """Hugging Face's Gemma convention: `eps`, the weight stored as w - 1."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class ScaleNorm(nn.Module):
    """A norm of no known convention."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))


def _random_weight(module, generator):
    with torch.no_grad():
        if getattr(module, "weight", None) is not None:
            module.weight.copy_(0.1 * torch.randn(module.weight.shape, generator=generator) + 0.9)
    return module


MODULES = {
    "nn_rmsnorm": lambda: nn.RMSNorm(DIM, eps=1e-5),
    "nn_rmsnorm_default_eps": lambda: nn.RMSNorm(DIM),
    "nn_rmsnorm_without_weight": lambda: nn.RMSNorm(DIM, eps=1e-6, elementwise_affine=False),
    "hf_llama": lambda: LlamaRMSNorm(DIM, eps=1e-6),
    "hf_gemma": lambda: GemmaRMSNorm(DIM, eps=1e-6),
}


@pytest.mark.parametrize("name", MODULES)
def test_the_package_s_norm_with_what_it_reads_equals_the_torch_module_s_forward(name):
    g = torch.Generator().manual_seed(7)
    norm = _random_weight(MODULES[name](), g)
    read = read_torch_norm(norm)
    assert read.dim == DIM and read.weight.dtype == torch.float32 and read.weight.shape == (DIM,)
    x = reference.quantize(torch.randn(1, 1, 32, DIM, generator=g) * 3.0, "bfloat16")
    ours, _ = reference.distributed_rms_norm(x, read.weight, num_devices=8, epsilon=read.epsilon)
    with torch.no_grad():
        if name == "nn_rmsnorm_default_eps":  # torch takes the epsilon of the input's dtype: the bf16 activations'
            expected = nn.functional.rms_norm(x.double(), (DIM,), norm.weight.double(), torch.finfo(torch.bfloat16).eps)
        else:
            expected = norm.double()(x.double())
    assert_close(ours, expected, "bfloat16", context=name)


def test_each_convention_is_read_as_its_module_defines_it():
    assert read_torch_norm(nn.RMSNorm(DIM, eps=1e-5)).epsilon == 1e-5
    assert read_torch_norm(nn.RMSNorm(DIM)).epsilon == torch.finfo(torch.bfloat16).eps
    assert read_torch_norm(nn.RMSNorm(DIM), torch.float32).epsilon == torch.finfo(torch.float32).eps
    assert torch.equal(read_torch_norm(nn.RMSNorm(DIM, elementwise_affine=False)).weight, torch.ones(DIM))
    assert read_torch_norm(LlamaRMSNorm(DIM, eps=3e-6)).epsilon == 3e-6
    gemma = read_torch_norm(GemmaRMSNorm(DIM, eps=2e-6))
    assert gemma.epsilon == 2e-6 and torch.equal(gemma.weight, torch.ones(DIM))  # stored w - 1 = 0
    assert [read_torch_norm(m()).convention for m in (lambda: nn.RMSNorm(8), lambda: LlamaRMSNorm(8))] == [
        "torch.nn.RMSNorm",
        "Llama-style",
    ]


@pytest.mark.parametrize(
    "module, rule",
    [
        (ScaleNorm(DIM), "torch_norm.weight"),
        (nn.RMSNorm((4, DIM)), "torch_norm.normalized_shape"),
        (type("MyNorm", (nn.Module,), {})(), "torch_norm.weight"),
    ],
    ids=["no_weight_attribute", "two_normalized_dims", "empty_module"],
)
def test_a_module_of_no_known_convention_is_refused_naming_what_it_lacks(module, rule):
    with pytest.raises(RuleError) as err:
        read_torch_norm(module)
    assert err.value.rule == rule
    named = "normalized_shape (4, 8192)" if rule == "torch_norm.normalized_shape" else type(module).__name__
    assert named in str(err.value)


def test_a_weighted_module_without_an_epsilon_of_a_known_name_is_refused():
    norm = LlamaRMSNorm(DIM)
    del norm.variance_epsilon
    with pytest.raises(RuleError) as err:
        read_torch_norm(norm)
    assert err.value.rule == "torch_norm.convention" and "LlamaRMSNorm" in str(err.value)
