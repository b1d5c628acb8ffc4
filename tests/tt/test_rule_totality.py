"""The checkers are total: every public check entry point, given any arguments ttnn can describe (tests/tt/
ttnn_arguments.py), either accepts or raises RuleError. Any other exception (KeyError, ZeroDivisionError, ...) would
turn a call ttnn runs, or refuses with its own message, into a crash of the package.

The suite runs a fixed, derandomized sample; `make fuzz-rules N=...` runs N fresh examples per entry point
(TT_RMSNORM_RULE_EXAMPLES=N)."""

import os
import warnings

import pytest
import ttnn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loguru import logger

from tests.tt import ttnn_arguments as ta
from tt_rmsnorm.distributed import plan_distributed_rms_norm
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning import paths, planner
from tt_rmsnorm.rules.ccl_checks import check_all_gather_async, check_fused_rms_minimal
from tt_rmsnorm.rules.op_checks import check_all_gather, check_post_all_gather, check_pre_all_gather, check_rms_norm
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.testing.mock_cluster import MESH_SHAPES
from tt_rmsnorm.topology import resolve_cluster_axis

EXAMPLES_ENV = "TT_RMSNORM_RULE_EXAMPLES"
_FRESH = int(os.environ.get(EXAMPLES_ENV, "0"))
# The suite's sample: deterministic, a few seconds per entry point on one core.
TOTALITY = settings(
    max_examples=_FRESH or 300,
    derandomize=not _FRESH,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.fixture(autouse=True)
def _quiet():
    """The rules log and warn on accepted but lossy options (use_2d_core_grid); thousands of calls need neither."""
    logger.disable("tt_rmsnorm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logger.enable("tt_rmsnorm")


def accepts_or_refuses(check, *args, **kw) -> None:
    """Run a check: its verdict is a return or a RuleError; anything else propagates and fails the example."""
    try:
        check(*args, **kw)
    except RuleError:
        pass


@TOTALITY
@given(x=ta.any_inputs(), data=st.data())
def test_pre_all_gather(x, data):
    accepts_or_refuses(
        check_pre_all_gather,
        x,
        dtype=data.draw(ta.out_dtypes(), "dtype"),
        residual_input_tensor=data.draw(ta.residuals_for(x), "residual"),
        compute_kernel_config=data.draw(ta.compute_kernel_configs(), "compute_kernel_config"),
        program_config=data.draw(ta.program_configs_for(x), "program_config"),
        memory_config=data.draw(ta.output_memory_configs(x.padded_shape), "memory_config"),
        use_2d_core_grid=data.draw(st.none() | st.booleans(), "use_2d_core_grid"),
        compute_grid=data.draw(ta.compute_grids(), "compute_grid"),
    )


@TOTALITY
@given(x=ta.any_inputs(), data=st.data())
def test_post_all_gather(x, data):
    accepts_or_refuses(
        check_post_all_gather,
        x,
        data.draw(ta.stats_for(x), "stats"),
        epsilon=data.draw(ta.epsilons(), "epsilon"),
        weight=data.draw(ta.affine_for(x), "weight"),
        bias=data.draw(ta.affine_for(x), "bias"),
        memory_config=data.draw(ta.output_memory_configs(x.padded_shape), "memory_config"),
        compute_kernel_config=data.draw(ta.compute_kernel_configs(), "compute_kernel_config"),
        program_config=data.draw(ta.program_configs_for(x), "program_config"),
        dtype=data.draw(ta.out_dtypes(), "dtype"),
        use_2d_core_grid=data.draw(st.none() | st.booleans(), "use_2d_core_grid"),
        compute_grid=data.draw(ta.compute_grids(), "compute_grid"),
    )


@TOTALITY
@given(x=ta.any_inputs(), data=st.data())
def test_rms_norm(x, data):
    accepts_or_refuses(
        check_rms_norm,
        x,
        epsilon=data.draw(ta.epsilons(), "epsilon"),
        weight=data.draw(ta.affine_for(x), "weight"),
        bias=data.draw(ta.affine_for(x), "bias"),
        residual_input_tensor=data.draw(ta.residuals_for(x), "residual"),
        memory_config=data.draw(ta.output_memory_configs(x.padded_shape), "memory_config"),
        program_config=data.draw(ta.program_configs_for(x), "program_config"),
        compute_kernel_config=data.draw(ta.compute_kernel_configs(), "compute_kernel_config"),
        compute_grid=data.draw(ta.compute_grids(), "compute_grid"),
    )


@TOTALITY
@given(x=ta.any_inputs(), system=ta.systems(), data=st.data())
def test_all_gather(x, system, data):
    mesh_shape = MESH_SHAPES[system]
    accepts_or_refuses(
        check_all_gather,
        x,
        data.draw(st.sampled_from((3, -1, 2)) | ta.dims_of_rank(), "dim"),
        cluster_axis=data.draw(ta.gather_axes(mesh_shape), "cluster_axis"),
        mesh_shape=mesh_shape,
        memory_config=data.draw(ta.output_memory_configs(), "memory_config"),
        output_given=data.draw(st.booleans(), "output_given"),
    )


@TOTALITY
@given(x=ta.any_inputs(), system=ta.systems(), data=st.data())
def test_all_gather_async(x, system, data):
    mesh_shape = MESH_SHAPES[system]
    accepts_or_refuses(
        check_all_gather_async,
        x,
        data.draw(st.sampled_from((3, -1, 2)) | ta.dims_of_rank(), "dim"),
        multi_device_global_semaphore=data.draw(ta.semaphores_for(x, 2), "semaphores"),
        mesh_shape=mesh_shape,
        cluster_axis=data.draw(ta.gather_axes(mesh_shape), "cluster_axis"),
        persistent_output_buffer=data.draw(ta.optional_tensors(), "persistent_output_buffer"),
        memory_config=data.draw(ta.output_memory_configs(), "memory_config"),
        barrier_semaphore=data.draw(st.none() | ta.semaphores_for(x, 1), "barrier_semaphore"),
        num_links=data.draw(ta.num_links(), "num_links"),
        compute_grid=data.draw(st.none() | ta.compute_grids(), "compute_grid"),
    )


@TOTALITY
@given(
    x=ta.mostly(ta.decode_inputs(), ta.any_inputs(), 2),
    system=st.sampled_from(("t3k", "galaxy", "t3k", "galaxy", "n300", "n150", "p300", "bh-galaxy")),
    data=st.data(),
)
def test_fused_rms_minimal(x, system, data):
    mesh_shape = MESH_SHAPES[system]
    axis = data.draw(ta.gather_axes(mesh_shape), "cluster_axis")
    n = mesh_shape[axis] if axis in (0, 1) else None
    ck = data.draw(ta.compute_kernel_configs(), "compute_kernel_config")
    accepts_or_refuses(
        check_fused_rms_minimal,
        x,
        data.draw(ta.program_configs_for(x), "program_config"),
        axis,
        mesh_shape,
        data.draw(ta.semaphores_for(x, 1), "global_semaphore"),
        persistent_output_tensor=data.draw(ta.optional_tensors(), "persistent_output_tensor"),
        num_links=data.draw(ta.num_links(), "num_links"),
        dtype=data.draw(ta.out_dtypes(), "dtype"),
        compute_kernel_config=ck,
        memory_config=data.draw(ta.mostly(st.none(), ta.output_memory_configs(x.padded_shape), 2), "memory_config"),
        residual_input_tensor=data.draw(ta.residuals_for(x), "residual"),
        weight=data.draw(ta.mostly(ta.affine_for(x).filter(lambda w: w is not None), st.none()), "weight"),
        stats=data.draw(ta.fused_stats_for(x, n, ck), "stats"),
    )


@st.composite
def _mesh_axes(draw) -> tuple[tuple[int, int], int | None, int]:
    """A mock system's mesh, an axis it can gather on, and the devices on that axis."""
    shape = MESH_SHAPES[draw(ta.systems())]
    axis = draw(st.sampled_from((None, 0, 1) if 1 in shape else (0, 1)))
    return (shape, *resolve_cluster_axis(shape, axis))


@TOTALITY
@given(x=ta.any_inputs(), mesh=_mesh_axes(), path=st.sampled_from(("auto", *paths.PATHS)), data=st.data())
def test_path_plans(x, mesh, path, data):
    """The compositions: each path's plan checks every op it will call (pre -> gather -> post, fused, local) on the
    tensors those ops will see."""
    mesh_shape, axis, n = mesh
    call = paths.Call(
        epsilon=data.draw(ta.epsilons(), "epsilon"),
        dtype=data.draw(ta.out_dtypes(), "dtype"),
        memory_config=data.draw(ta.output_memory_configs(x.padded_shape), "memory_config"),
        cluster_axis=axis,
        num_devices=n,
        mesh_shape=mesh_shape,
    )
    accepts_or_refuses(
        planner.plan_call,
        x,
        data.draw(ta.affine_for(x), "weight"),
        data.draw(ta.residuals_for(x), "residual"),
        mesh_device=None,
        compute_grid=data.draw(ta.compute_grids(), "compute_grid"),
        num_devices=n,
        call=call,
        path=path,
        sharded=data.draw(st.none() | st.booleans(), "sharded"),
        program_config=data.draw(ta.program_configs_for(x), "program_config"),
        compute_kernel_config=data.draw(ta.compute_kernel_configs(), "compute_kernel_config"),
        ccl=data.draw(st.sampled_from((None, True)), "ccl"),
    )


@TOTALITY
@given(
    shape=ta.shapes(),
    system=ta.systems(),
    axis=st.none() | st.integers(-1, 2),
    grid=ta.compute_grids(),
    dtype=st.sampled_from(ta.DTYPES),
    path=st.sampled_from(("auto", *paths.PATHS)),
    ccl=st.sampled_from((None, True)),
    with_weight=st.booleans(),
    epsilon=ta.epsilons(),
    x_mc=st.none() | ta.tensor_memory_configs(),
    sharded=st.none() | st.booleans(),
    pc=ta.program_configs(),
    ck=ta.compute_kernel_configs(),
    mc=ta.output_memory_configs(),
    out_dtype=ta.out_dtypes(),
    arch=st.none() | ta.arches(),
)
def test_plan_distributed_rms_norm(
    shape, system, axis, grid, dtype, path, ccl, with_weight, epsilon, x_mc, sharded, pc, ck, mc, out_dtype, arch
):
    accepts_or_refuses(
        plan_distributed_rms_norm,
        shape,
        MESH_SHAPES[system],
        cluster_axis=axis,
        compute_grid=grid,
        arch=arch,
        dtype=dtype,
        path=path,
        ccl=ccl,
        with_weight=with_weight,
        epsilon=epsilon,
        input_memory_config=x_mc,
        sharded=sharded,
        program_config=pc,
        compute_kernel_config=ck,
        memory_config=mc,
        out_dtype=out_dtype,
    )


def test_argument_space_reaches_every_dtype_layout_and_memory_layout():
    """The strategies draw what the property needs: every dtype, both layouts, every memory layout and buffer type,
    host storage, ranks 1 to 4, empty dims and both architectures."""
    seen = {"dtype": set(), "layout": set(), "memory": set(), "buffer": set(), "rank": set(), "host": set()}
    seen["arch"] = set()
    empty = []

    @settings(max_examples=400, derandomize=True, database=None, deadline=None)
    @given(ta.tensors())
    def collect(t: TensorDesc):
        seen["dtype"].add(t.dtype)
        seen["layout"].add(t.layout)
        seen["memory"].add(t.memory_layout)
        seen["buffer"].add(t.memory_config.buffer_type)
        seen["rank"].add(t.rank)
        seen["host"].add(t.on_device)
        seen["arch"].add(t.arch.name)
        empty.append(0 in t.shape)

    collect()
    assert seen["dtype"] == set(ta.DTYPES)
    assert seen["layout"] == set(ta.LAYOUTS)
    assert seen["memory"] == {ttnn.TensorMemoryLayout.INTERLEAVED, *ta.SHARDED}
    assert seen["buffer"] == set(ta.BUFFERS)
    assert seen["rank"] == {1, 2, 3, 4}
    assert seen["host"] == {True, False}
    assert seen["arch"] == set(ta.ARCHES)
    assert any(empty)
