"""Autograd, the nn.Module drop-in, torch.compile without graph breaks, and the custom-op registrations."""

import pytest
import torch

from programs.triton.autograd import (
    RMSNorm,
    RMSNormFunction,
    rms_norm,
    rms_norm_bwd_op,
    rms_norm_fp8,
    rms_norm_fp8_op,
    rms_norm_fwd_op,
)
from tests.triton.ref64 import assert_close_cancelling, fp8_expected, grads64, norm64
from tt_rmsnorm.accuracy import assert_close
from tt_rmsnorm.errors import RuleError

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def rand(*shape, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV).requires_grad_(grad)


def test_module_is_a_drop_in_for_torch_rmsnorm():
    ref_mod = torch.nn.RMSNorm(48, eps=1e-6).to(DEV)
    with torch.no_grad():
        ref_mod.weight.copy_(rand(48, seed=1))
    mod = RMSNorm(48, eps=1e-6, device=DEV)
    mod.load_state_dict(ref_mod.state_dict())
    assert list(dict(mod.named_parameters())) == ["weight"]
    x = rand(2, 5, 48, seed=2)
    y = mod(x)
    v, _, _ = norm64(x, ref_mod.weight.detach(), epsilon=1e-6)
    assert y.shape == x.shape
    assert_close(y.detach(), v, torch.float32, context="module output")
    assert_close(y.detach(), ref_mod(x).detach().double(), torch.float32, context="vs torch.nn.RMSNorm")


def test_module_eps_none_uses_dtype_eps_and_rejects_multi_dim_shape():
    x = rand(3, 16, dtype=torch.bfloat16, seed=3) * 1e-3
    y = RMSNorm(16, device=DEV, dtype=torch.bfloat16)(x)
    v, _, _ = norm64(x, torch.ones(16), epsilon=torch.finfo(torch.bfloat16).eps)
    assert_close(y.detach(), v, torch.bfloat16)
    with pytest.raises(RuleError, match=r"\[normalized_shape.last_dim\]"):
        RMSNorm((4, 16))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_autograd_function_gradients(dtype):
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    x, r = rand(6, 40, dtype=dt, seed=4, grad=True), rand(6, 40, dtype=dt, seed=5, grad=True)
    w, b = rand(40, dtype=dt, seed=6, grad=True), rand(40, dtype=dt, seed=7, grad=True)
    dy, dres = rand(6, 40, dtype=dt, seed=8), rand(6, 40, dtype=dt, seed=9)
    y, new_res = RMSNormFunction.apply(x, w, b, r, 1e-5, 1.0)
    torch.autograd.backward([y, new_res], [dy, dres])
    ref = grads64(
        x.detach(),
        w.detach(),
        dy,
        epsilon=1e-5,
        weight_offset=1.0,
        bias=b.detach(),
        residual=r.detach(),
        dresidual=dres,
    )
    for name, t in (("x", x), ("residual", r), ("weight", w), ("bias", b)):
        assert t.grad is not None and t.grad.dtype == dt, name
        assert_close_cancelling(t.grad, ref[name], dt, context=f"d{name}")


def test_torch_compile_fullgraph_matches_eager():
    mod = RMSNorm(32, eps=1e-5, device=DEV)
    with torch.no_grad():
        mod.weight.copy_(rand(32, seed=10))

    def step(x, r):
        y, h = rms_norm(x, mod.weight, epsilon=1e-5, residual=r)
        return (y * y).sum() + h.sum()

    backend = "inductor" if DEV == "cuda" else "aot_eager"  # CPU CI has no compiler toolchain guarantee
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    x, r = rand(4, 32, seed=11, grad=True), rand(4, 32, seed=12, grad=True)
    loss_c = compiled(x, r)
    loss_c.backward()
    gx_c, gw_c = x.grad.clone(), mod.weight.grad.clone()
    x.grad = None
    mod.weight.grad = None
    loss_e = step(x, r)
    loss_e.backward()
    # the compiled graph may fuse the loss reduction differently: same function, not necessarily the same bits
    assert_close(loss_c.detach().reshape(1), loss_e.detach().double().reshape(1), torch.float32, context="loss")
    assert_close_cancelling(gx_c, x.grad.double(), torch.float32, context="dx compiled vs eager")
    assert_close_cancelling(gw_c, mod.weight.grad.double(), torch.float32, context="dweight compiled vs eager")


def test_fp8_op_compiles_and_matches_reference():
    x, w = rand(5, 24, dtype=torch.bfloat16, seed=13), rand(24, dtype=torch.bfloat16, seed=14)
    fn = torch.compile(lambda a, b: rms_norm_fp8(a, b, dtype=torch.float8_e4m3fn), fullgraph=True, backend="aot_eager")
    q, scale, res = fn(x, w)
    v, _, _ = norm64(x, w)
    q_exp, s_exp = fp8_expected(v, torch.float8_e4m3fn, "row")
    assert res is None
    assert_close(q.float(), q_exp, torch.float8_e4m3fn)
    assert_close(scale, s_exp, torch.float32)


def test_custom_ops_pass_opcheck():
    x, w, r = rand(3, 20, seed=15), rand(20, seed=16), rand(3, 20, seed=17)
    torch.library.opcheck(rms_norm_fwd_op, (x, w, None, r, 1e-5, 0.0))
    _, rs, h = rms_norm_fwd_op(x, w, None, r, 1e-5, 0.0)
    torch.library.opcheck(rms_norm_bwd_op, (rand(3, 20, seed=18), h, w, rs, None, 0.0, True))
    torch.library.opcheck(rms_norm_fp8_op, (x, w, None, None, None, 1e-5, 0.0, "float8_e5m2", "tensor", 100.0))
