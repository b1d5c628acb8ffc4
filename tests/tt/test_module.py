"""The parts of `DistributedRMSNorm` that need no device: the weight from a state_dict, the memory config of a gathered
output, whether a ROW_MAJOR weight fits the interleaved rms_norm, and the width check of its inputs (remembered per
spec, a bounded number of specs)."""

import pytest
import torch
import ttnn

from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import BoundCall, PlannedModule, check_input_width
from tt_rmsnorm.planning import layouts
from tt_rmsnorm.rmsnorm_module import gathered_memory_config
from tt_rmsnorm.signature import signature
from tt_rmsnorm.weights import row_major_fits, state_dict_weight


def test_the_weight_is_read_by_name_as_float_and_must_have_dim_elements():
    sd = {"layers.0.ffn_norm.weight": torch.arange(64, dtype=torch.bfloat16).reshape(2, 32)}
    w = state_dict_weight(sd, "layers.0.ffn_norm.weight", 64)
    assert w.dtype == torch.float32 and w.shape == (64,) and torch.equal(w, torch.arange(64, dtype=torch.float32))
    with pytest.raises(RuleError) as err:
        state_dict_weight(sd, "layers.1.ffn_norm.weight", 64)
    assert err.value.rule == "module.weight_key" and "layers.1.ffn_norm.weight" in str(err.value)
    with pytest.raises(RuleError) as err:
        state_dict_weight(sd, "layers.0.ffn_norm.weight", 128)
    assert err.value.rule == "module.weight_size" and "64" in str(err.value)


def _sharded(layout, width=128, orientation=ttnn.ShardOrientation.ROW_MAJOR, buffer=ttnn.BufferType.L1):
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(7, 3))})
    return ttnn.MemoryConfig(layout, buffer, ttnn.ShardSpec(grid, [32, width], orientation))


def test_a_gathered_width_sharded_output_keeps_its_cores_with_wider_shards():
    mc = _sharded(ttnn.TensorMemoryLayout.WIDTH_SHARDED, orientation=ttnn.ShardOrientation.COL_MAJOR)
    wide = gathered_memory_config(mc, 8)
    assert wide.memory_layout == mc.memory_layout and wide.buffer_type == mc.buffer_type
    assert wide.shard_spec.grid == mc.shard_spec.grid and wide.shard_spec.orientation == mc.shard_spec.orientation
    assert list(wide.shard_spec.shape) == [32, 128 * 8]
    height = _sharded(ttnn.TensorMemoryLayout.HEIGHT_SHARDED)
    assert gathered_memory_config(height, 8) is height
    assert gathered_memory_config(ttnn.DRAM_MEMORY_CONFIG, 8) is ttnn.DRAM_MEMORY_CONFIG


def test_a_row_major_weight_fits_the_interleaved_norm_up_to_a_core_of_l1():
    ck = layouts.compute_kernel_config()
    assert row_major_fits(4096, ttnn.bfloat16, ck)
    assert not row_major_fits(8192, ttnn.bfloat16, ck)  # 1,772,896 B of L1 with the ROW_MAJOR weight
    with pytest.raises(RuleError) as err:  # another rule is the caller's to see, not a verdict on the fit
        row_major_fits(100, ttnn.bfloat16, ck)
    assert err.value.rule == "weight.row_major_shape"


class _Input(ttnn.Tensor):
    """What the width rule reads of a ttnn tensor: its shape."""

    def __init__(self, width):
        self._shape = (1, 1, 32, width)

    @property
    def shape(self):
        return self._shape


def test_input_widths_are_checked_per_mode():
    check_input_width(_Input(1024), 8192, 8, distributed=True)
    check_input_width(_Input(8192), 8192, 8, distributed=False)
    with pytest.raises(RuleError) as err:
        check_input_width(_Input(8192), 8192, 8, distributed=True)
    assert err.value.rule == "module.input_width" and "width 8192" in str(err.value) and "1024 wide" in str(err.value)
    assert "shard the activation" in err.value.fix
    with pytest.raises(RuleError) as err:
        check_input_width(_Input(1024), 8192, 8, distributed=False)
    assert "width 1024" in str(err.value) and "8192 wide" in str(err.value)
    assert "gather the fractured activation" in err.value.fix
    with pytest.raises(RuleError) as err:
        check_input_width([[1.0] * 8192], 8192, 8, distributed=False)
    assert err.value.rule == "input.ttnn_tensor" and "list" in str(err.value)


class _Tensor(ttnn.Tensor):
    """What a module's planned calls read of a ttnn tensor: its spec and storage, each read a fresh object equal to
    the last (as ttnn returns them)."""

    def __init__(self, spec, storage="DEVICE"):
        self._spec, self._storage = spec, storage

    @property
    def spec(self):
        return tuple(self._spec)

    def storage_type(self):
        return "".join(self._storage)


class _Counting(PlannedModule):
    """A module whose plan for a signature is numbered: `made` lists the signatures' fields it planned."""

    def __init__(self, reads=()):
        self.mesh_device = object()
        self.reads = reads
        self.made = []  # appended to, not set: setting an attribute forgets the planned calls

    def bound_modules(self):
        return (self, *self.reads)

    def plan(self, signature, held, x, residual):
        self.made.append(signature)
        return BoundCall(f"run{len(self.made)}", "w", None, None)

    def forward(self, x, mode="decode", residual=None):
        called, held = signature(
            mesh_device=self.mesh_device, modules=self.bound_modules(), x=x, residual=residual, mode=mode
        )
        return PLANS.planned(called, held, self.plan_new, x, residual).run

    __call__ = forward


@pytest.fixture(autouse=True)
def _empty_plan_cache():
    PLANS.forget()
    yield
    PLANS.forget()


def test_a_planned_module_plans_once_per_signature_and_finds_the_earlier_ones():
    m = _Counting()
    x, y = _Tensor(["x"]), _Tensor(["y"])
    assert m(x) == "run1"
    assert m(_Tensor(["x"])) == "run1"  # an equal spec
    assert m(x, "prefill") == "run2"  # another mode
    assert m(x) == "run1"  # found again, not planned
    assert m(y) == "run3"  # another spec
    assert m(_Tensor(["y"], "HOST")) == "run4"  # storage
    assert _Counting()(x) == "run1"  # another module of the same calls plans its own
    assert len(m.made) == 4


def test_the_residual_is_part_of_the_signature():
    m, x = _Counting(), _Tensor(["x"])
    assert m(x) == "run1"
    assert m(x, residual=_Tensor(["r"])) == "run2"
    assert m(x, residual=_Tensor(["r"])) == "run2"  # the last call, its residual equal
    assert m(x, residual=_Tensor(["s"])) == "run3"
    assert m(x) == "run1"
    assert len(m.made) == 3


def test_setting_an_attribute_forgets_the_module_s_planned_calls_only():
    m, other, x = _Counting(), _Counting(), _Tensor(["x"])
    m(x), other(x)
    m.eps = 1e-3
    assert m(x) == "run2" and len(m.made) == 2
    assert other(x) == "run1" and len(other.made) == 1


def test_setting_an_attribute_of_a_module_whose_attributes_a_plan_reads_forgets_that_plan():
    norm = _Counting()
    layer, x = _Counting(reads=(norm,)), _Tensor(["x"])
    layer(x)
    norm.eps = 1e-3  # the layer's plan bound the norm's attributes as they were
    assert layer(x) == "run2"


def test_a_module_s_plan_refuses_what_is_not_a_tensor_before_anything_is_cached():
    class Refusing(_Counting):
        def plan(self, signature, held, x, residual):
            self.made.append(signature)
            raise RuleError("input.ttnn_tensor", "x must be a ttnn mesh tensor", type(x).__name__, "a tensor")

    m = Refusing()
    for _ in range(2):
        with pytest.raises(RuleError):
            m([1.0])
    assert len(m.made) == 2 and len(PLANS) == 0
