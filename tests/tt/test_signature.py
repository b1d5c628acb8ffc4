"""The call signature without a device: every entry point's parameters reach it, and two calls that differ in any one of
its fields never share a plan (derived from `Signature`'s own fields and the entry points' own parameters)."""

import inspect

import pytest
import ttnn
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import SpecStandIn, TensorStandIn
from tt_rmsnorm import compat, distributed
from tt_rmsnorm.compat import llama_galaxy
from tt_rmsnorm.plan_cache import PlanCache
from tt_rmsnorm.rmsnorm_module import DistributedRMSNorm
from tt_rmsnorm.signature import (
    COMPARE,
    CONFIG,
    IDENTITY,
    NOT_IN_SIGNATURE,
    PARAMETER_FIELDS,
    TENSOR,
    VALUE,
    Held,
    Signature,
    signature,
)

FIELDS = {name: COMPARE[name] for name in Signature._fields}

MODULE_ENTRY_POINTS = [
    distributed.distributed_rms_norm,
    distributed.planned_call,
    DistributedRMSNorm.forward,
    compat.RMSNorm.forward,
    compat.SimpleRMSNorm.forward,
    compat.DistributedNorm.forward,
    llama_galaxy.DistributedNorm.forward,
]
# tt_transformers' ccl.py functions adopt the model's CCL object before they make the signature (the mock tier holds
# each of their signatures to the ops it issues): their parameter names are held here, their values there.
ENTRY_POINTS = [*MODULE_ENTRY_POINTS, compat.tt_distributed_rmsnorm, compat.tt_sharded_distributed_rmsnorm]


def _entry_id(fn) -> str:
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"


class _Equal:
    """An object equal to every other: a field compared by identity must still tell two of them apart."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=_entry_id)
def test_every_entry_point_parameter_is_a_signature_field_or_listed_with_its_reason(entry):
    for name in inspect.signature(entry).parameters:
        field = PARAMETER_FIELDS.get(name, name)
        assert field in FIELDS or name in NOT_IN_SIGNATURE, (
            f"{_entry_id(entry)}({name}) neither in Signature nor listed"
        )
    assert all(reason for reason in NOT_IN_SIGNATURE.values())


class _Captured(Exception):
    """Raised by the stand-in cache with the signature an entry point asked it for and the objects it names."""

    def __init__(self, signature, held):
        self.signature, self.held = signature, held


def _capture(monkeypatch):
    from tt_rmsnorm import plan_cache

    def planned(called, held, plan, x, residual):
        raise _Captured(called, held)

    monkeypatch.setattr(plan_cache.PLANS, "planned", planned)


def _module(cls, **attributes):
    m = object.__new__(cls)
    for name, value in attributes.items():
        object.__setattr__(m, name, value)
    return m


class _Args:
    """tt-metal's model args as the compat modules read them on every call."""

    def __init__(self, mesh, answer):
        self.mesh_device, self.answer = mesh, answer

    def is_distributed_norm(self, mode):
        return self.answer


class _Norm(compat.RMSNorm):
    def __init__(self, answer):
        for name, value in (("answer", answer), ("sharded_program_config", None), ("sharded_output_config", None)):
            object.__setattr__(self, name, value)

    def distributed_in(self, mode):
        return self.answer


def _owner(entry, mesh, answer):
    """The object a module's forward is called on, with what its forward reads (its mesh and its distribution policy,
    answering `answer`); None for the functions."""
    if entry is DistributedRMSNorm.forward:
        return _module(DistributedRMSNorm, mesh_device=mesh, is_distributed=lambda mode: answer)
    if entry is compat.RMSNorm.forward:
        return _module(
            compat.RMSNorm,
            device=mesh,
            _policy=lambda mode: answer,
            num_devices=8,
            sharded_program_config=None,
            sharded_output_config=None,
        )
    if entry is compat.SimpleRMSNorm.forward:
        return _module(compat.SimpleRMSNorm, device=mesh)
    if entry in (compat.DistributedNorm.forward, llama_galaxy.DistributedNorm.forward):
        cls = compat.DistributedNorm if entry is compat.DistributedNorm.forward else llama_galaxy.DistributedNorm
        return _module(cls, args=_Args(mesh, answer), norm=_Norm(answer))
    return None


@pytest.mark.parametrize("entry", MODULE_ENTRY_POINTS, ids=_entry_id)
def test_every_entry_point_parameter_reaches_its_signature_field(entry, monkeypatch):
    """Each parameter, given a value of its own (a tensor of its own spec where the field is a tensor's), arrives in
    the signature under its field; a module names itself (and the modules it reads), its mesh, and its policy's
    answer."""
    _capture(monkeypatch)
    mesh, answer = _Equal(), object()
    owner = _owner(entry, mesh, answer)
    names = [name for name in inspect.signature(entry).parameters if name != "self" and name not in NOT_IN_SIGNATURE]
    given_values = {
        name: TensorStandIn(object()) if FIELDS.get(PARAMETER_FIELDS.get(name, name)) == TENSOR else object()
        for name in names
    }
    with pytest.raises(_Captured) as seen:
        entry(**given_values) if owner is None else entry(owner, **given_values)
    called, held = seen.value.signature, seen.value.held
    for name, value in given_values.items():
        field = PARAMETER_FIELDS.get(name, name)
        got = getattr(called, field)
        if FIELDS[field] == TENSOR:
            assert got == (SpecStandIn(value.content), "DEVICE"), name
        elif FIELDS[field] == VALUE:
            assert got is value, name
        else:  # the object by its id, itself kept with the plan
            assert getattr(held, field) is value and got == signature_of(field, value), name
    if owner is not None:
        assert held.mesh_device is mesh and called.mesh_device == id(mesh)
        assert held.modules == owner.bound_modules() and held.modules[0] is owner
        assert called.modules == tuple(id(m) for m in owner.bound_modules())
        answers = called.distributed if isinstance(called.distributed, tuple) else (called.distributed,)
        if entry is compat.SimpleRMSNorm.forward:  # no distribution policy: one rms_norm on every device
            assert answers == (None,)
        else:
            assert answers and all(a is answer for a in answers)


def signature_of(field: str, value):
    """What an identity or config field holds of the object given for it."""
    from tt_rmsnorm.signature import config_key

    return config_key(value) if FIELDS[field] == CONFIG else id(value)


def _config(fidelity=ttnn.MathFidelity.HiFi4, fp32=True):
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=fidelity, math_approx_mode=False, fp32_dest_acc_en=fp32, packer_l1_acc=False
    )


def _program_config(block_w=4):
    return ttnn.LayerNormShardedMultiCoreProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(8, 4), subblock_w=1, block_h=1, block_w=block_w, inplace=False
    )


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["decode", "prefill", "auto", "async"]),
    st.sampled_from([ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32]),
    st.sampled_from([ttnn.DRAM_MEMORY_CONFIG, ttnn.L1_MEMORY_CONFIG]),
)


@st.composite
def _base_and_other(draw, compare: str, name: str):
    """A field's value in one call and a value in another call that must not share its plan."""
    if compare == IDENTITY:
        if name == "modules":
            base = tuple(_Equal() for _ in range(draw(st.integers(1, 2))))
            return base, draw(st.sampled_from([base[:-1] + (_Equal(),), (*base, _Equal())]))
        return _Equal(), draw(st.sampled_from([_Equal(), None]))
    if compare == TENSOR:
        content = draw(st.tuples(st.integers(1, 4), st.sampled_from(["tile", "row_major"])))
        base = TensorStandIn(content)
        others = [TensorStandIn((content[0] + 1, content[1])), TensorStandIn(content, "HOST")]
        if name != "x":
            others.append(None)
        return base, draw(st.sampled_from(others))
    if compare == CONFIG:
        base = draw(st.sampled_from([_config(), _program_config()]))
        if isinstance(base, ttnn.WormholeComputeKernelConfig):
            others = [_config(fidelity=ttnn.MathFidelity.HiFi2), _config(fp32=False), None, _program_config()]
        else:
            others = [_program_config(block_w=2), None, _config()]
        return base, draw(st.sampled_from(others))
    assert compare == VALUE
    base = draw(_VALUES)
    other = draw(_VALUES.filter(lambda v: v != base))  # equal values (1 and True, 1 and 1.0) plan alike
    return base, other


@st.composite
def _call_and_changed_field(draw):
    """A call's signature fields, and one field changed to a value that must plan again."""
    values, changed = {}, draw(st.sampled_from(sorted(FIELDS)))
    other = None
    for name, compare in FIELDS.items():
        base, alternative = draw(_base_and_other(compare, name))
        values[name] = base
        if name == changed:
            other = alternative
    return values, changed, other


@settings(max_examples=200, derandomize=True, deadline=None)
@given(_call_and_changed_field())
def test_calls_that_differ_in_one_field_never_share_a_plan_and_one_call_twice_runs_one_plan(drawn):
    values, changed, other = drawn
    plans, plan = PlanCache(), object()
    plans.put(*signature(**values), plan)
    assert plans.get(signature(**values)[0]) is plan  # the same call again, its specs read afresh
    plans.put(*signature(**{**values, "mesh_device": _Equal()}), object())  # the last call is another now
    assert plans.get(signature(**values)[0]) is plan  # found by lookup too
    changed_call, held = signature(**{**values, changed: other})
    assert changed_call != signature(**values)[0], changed
    assert plans.get(changed_call) is None, changed
    plans.put(changed_call, held, object())
    assert plans.get(signature(**values)[0]) is plan, changed  # nor does the other call's plan replace it


def test_every_field_says_how_it_is_compared_and_the_held_objects_are_the_identity_and_config_fields():
    assert set(COMPARE) == set(Signature._fields)
    assert set(COMPARE.values()) <= {IDENTITY, TENSOR, CONFIG, VALUE}
    assert set(Held._fields) == {f for f, how in COMPARE.items() if how in (IDENTITY, CONFIG)}
