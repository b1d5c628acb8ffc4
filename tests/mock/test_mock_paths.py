"""Every path of `distributed_rms_norm` through real ttnn on mock T3000 / Galaxy / N150 meshes: the ttnn ops each path
calls, per-device shapes and memory configs, the residual; the plan cache (a planned call re-checks nothing, a call
that differs in one checked field is checked again and fails before any ttnn op); and the trace contract (a planned
call allocates no semaphore and no buffer)."""

import pytest

from tt_rmsnorm.testing import mock_cluster, workers

pytestmark = pytest.mark.mock_cluster

HIDDEN = 8192
AXIS = {"t3k": None, "galaxy": 1, "n150": None}
WATCHED = (
    "rms_norm_pre_all_gather",
    "rms_norm_post_all_gather",
    "all_gather",
    "rms_norm",
    "fused_rms_minimal",
    "add",
    "copy",
)


class _Recorder:
    """Wraps ttnn entry points to record which run (and optionally to refuse them)."""

    def __init__(self, ttnn, refuse=False):
        self.ttnn, self.refuse, self.calls, self.saved = ttnn, refuse, [], []

    def _wrap(self, owner, name):
        fn = getattr(owner, name)

        def recorded(*args, **kwargs):
            self.calls.append(name)
            if self.refuse:
                raise AssertionError(f"ttnn.{name} ran")
            return fn(*args, **kwargs)

        self.saved.append((owner, name, fn))
        setattr(owner, name, recorded)

    def __enter__(self):
        for name in WATCHED:
            self._wrap(self.ttnn, name)
        self._wrap(self.ttnn.experimental, "all_gather_async")
        self._wrap(self.ttnn, "to_memory_config")
        return self

    def __exit__(self, *exc):
        for owner, name, fn in self.saved:
            setattr(owner, name, fn)


def _address(t) -> int:
    """Where device 0's buffer of `t` lives: two tensors with one address are one tensor."""
    import ttnn

    return ttnn.get_device_tensors(t)[0].buffer_address()


def _setup(mesh, system, tokens, hidden=HIDDEN):
    import torch

    import tt_rmsnorm

    axis = AXIS[system]
    n = tuple(mesh.shape)[1]
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis) if n > 1 else None
    grid = mesh.compute_with_storage_grid_size()
    # the decode plan on the sharded layout, where a decoder keeps its activations (its input_memory_config is that
    # layout's); x, r and w come in DRAM
    plan = tt_rmsnorm.plan_distributed_rms_norm(
        (1, 1, tokens, hidden // n),
        tuple(mesh.shape),
        cluster_axis=axis,
        compute_grid=(grid.x, grid.y),
        sharded=True if tokens == 32 else None,
    )
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, hidden), mesh, cluster_axis=axis)
    r = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, hidden), mesh, cluster_axis=axis)
    w = tt_rmsnorm.prepare_weight(torch.randn(hidden), mesh, cluster_axis=axis)
    return ccl, plan, x, r, w


def _run_path(mesh, system, path, tokens, residual):
    import ttnn

    import tt_rmsnorm

    ccl, _, x, r, w = _setup(mesh, system, tokens, hidden=HIDDEN if system != "n150" else 4096)
    kw = {"residual": r} if residual else {}
    axis = AXIS[system]
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, cluster_axis=axis, path=path, ccl=ccl, **kw)  # plans
    with _Recorder(ttnn) as rec:
        out = tt_rmsnorm.distributed_rms_norm(x, w, mesh, epsilon=1e-5, cluster_axis=axis, path=path, ccl=ccl, **kw)
    y, summed = out if residual else (out, None)

    def facts(t):
        return [
            (tuple(d.shape), str(d.memory_config().memory_layout).rsplit(".", 1)[-1])
            for d in ttnn.get_device_tensors(t)
        ]

    return {
        "calls": rec.calls,
        "out": facts(y),
        "summed": None if summed is None else facts(summed),
        "summed_is_residual": summed is not None and _address(summed) == _address(r),
    }


CASES = [
    ("t3k", "classic", 32, ["to_memory_config", "rms_norm_pre_all_gather", "all_gather", "rms_norm_post_all_gather"]),
    (
        "t3k",
        "async",
        32,
        ["to_memory_config", "rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"],
    ),
    ("t3k", "fused", 32, ["to_memory_config", "fused_rms_minimal"]),
    ("t3k", "classic", 128, ["rms_norm_pre_all_gather", "all_gather", "rms_norm_post_all_gather"]),
    ("t3k", "async", 128, ["rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"]),
    (
        "galaxy",
        "classic",
        32,
        ["to_memory_config", "rms_norm_pre_all_gather", "all_gather", "rms_norm_post_all_gather"],
    ),
    (
        "galaxy",
        "async",
        32,
        ["to_memory_config", "rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"],
    ),
    ("galaxy", "fused", 32, ["to_memory_config", "fused_rms_minimal"]),
    ("galaxy", "classic", 128, ["rms_norm_pre_all_gather", "all_gather", "rms_norm_post_all_gather"]),
    ("galaxy", "async", 128, ["rms_norm_pre_all_gather", "all_gather_async", "rms_norm_post_all_gather"]),
    ("n150", "local", 32, ["rms_norm"]),
    ("n150", "local", 128, ["rms_norm"]),
]


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize(
    "system, path, tokens, ops", CASES, ids=[f"{s}-{p}-{'decode' if t == 32 else 'prefill'}" for s, p, t, _ in CASES]
)
def test_each_path_runs_its_ttnn_ops(system, path, tokens, ops, residual):
    got = workers.run_isolated(system, _run_path, system, path, tokens, residual)
    calls = [c for c in got["calls"] if c not in ("to_memory_config", "add", "copy")]
    assert calls == [c for c in ops if c != "to_memory_config"], got["calls"]
    if residual and path in ("classic", "async") and tokens == 128 or residual and path == "local":
        assert got["calls"][0] == "add", got["calls"]  # the interleaved post and rms_norm normalize their input
    # a decode residual moved to L1 holds the sum in the moved copy: copied back into the caller's residual, last
    copied_back = residual and path == "fused"
    assert ("copy" in got["calls"]) == copied_back and (got["calls"][-1] == "copy") == copied_back, got["calls"]
    mesh = mock_cluster.MESH_SHAPES[system]
    local = (HIDDEN if system != "n150" else 4096) // mesh[1]
    assert [s for s, _ in got["out"]] == [(1, 1, tokens, local)] * (mesh[0] * mesh[1])
    # the output keeps x's memory config (DRAM interleaved here) unless memory_config says otherwise
    assert {m for _, m in got["out"]} == {"INTERLEAVED"}
    assert (got["summed"] is not None) == residual
    if residual:
        assert [s for s, _ in got["summed"]] == [(1, 1, tokens, local)] * (mesh[0] * mesh[1])
        assert got["summed_is_residual"]  # the residual contract: x + residual lands in the caller's residual


def _sharded_residual(mesh, system, path):
    """Decode with x and the residual already width-sharded in L1 (as a decoder keeps them): the op writes the sum
    into the residual itself, x stays."""
    import torch
    import ttnn

    import tt_rmsnorm

    ccl, plan, _, _, w = _setup(mesh, system, 32)
    axis = AXIS[system]
    mc = plan.norm.input_memory_config
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, HIDDEN), mesh, cluster_axis=axis, memory_config=mc)
    r = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32, HIDDEN), mesh, cluster_axis=axis, memory_config=mc)
    with _Recorder(ttnn) as rec:
        _, summed = tt_rmsnorm.distributed_rms_norm(
            x, w, mesh, epsilon=1e-5, cluster_axis=axis, residual=r, path=path, ccl=ccl
        )

    return {
        "calls": rec.calls,
        "summed_is_residual": _address(summed) == _address(r),
        "x_kept": _address(x) != _address(r),
    }


def _dram_input_on_the_sharded_layout(mesh, path, residual):
    """Decode with x (and the residual) in DRAM, asked onto the sharded layout: moved to L1, normalized there, the
    output moved back to x's DRAM; with a residual the sharded pre writes the sum over the moved residual, and the sum
    is copied back into the caller's residual."""
    import ttnn

    import tt_rmsnorm

    ccl, _, x, r, w = _setup(mesh, "t3k", 32)
    call = dict(epsilon=1e-5, residual=r if residual else None, path=path, ccl=ccl, sharded=True)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    with _Recorder(ttnn) as rec:
        out = tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    y, summed = out if residual else (out, r)
    return rec.calls, y.memory_config() == x.memory_config(), _address(summed) == _address(r)


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("path", ["classic", "async"])
def test_a_dram_input_on_the_sharded_layout_moves_there_and_back(path, residual):
    calls, output_in_dram, summed_is_residual = workers.run_isolated(
        "t3k", _dram_input_on_the_sharded_layout, path, residual
    )
    gather = "all_gather" if path == "classic" else "all_gather_async"
    norm = ["rms_norm_pre_all_gather", gather, "rms_norm_post_all_gather", "to_memory_config"]
    if residual:  # residual and x to L1, the norm, the sum back to DRAM and into the residual
        assert calls == ["to_memory_config", "to_memory_config", *norm, "to_memory_config", "copy"]
    else:
        assert calls == ["to_memory_config", *norm]
    assert output_in_dram and summed_is_residual


@pytest.mark.parametrize("system, path", [("t3k", "classic"), ("t3k", "async"), ("t3k", "fused"), ("galaxy", "fused")])
def test_a_sharded_residual_is_updated_in_place_without_a_copy(system, path):
    got = workers.run_isolated(system, _sharded_residual, system, path)
    assert got["summed_is_residual"] and got["x_kept"]
    assert "copy" not in got["calls"] and "to_memory_config" not in got["calls"] and "add" not in got["calls"]


def _cache_then_bad_field(mesh, variant):
    """A good call (planned and cached), then the same call with one field changed: the rule fires with no ttnn op."""
    import torch
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.errors import RuleError
    from tt_rmsnorm.planning import layouts

    ccl, plan, x, r, w = _setup(mesh, "t3k", 128)
    good = dict(epsilon=1e-5, ccl=ccl, path="async")
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, **good)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, **good)
    args, kw = [x, w, mesh], dict(good)
    if variant == "weight_width":
        args[1] = tt_rmsnorm.prepare_weight(torch.randn(HIDDEN * 2), mesh)
    elif variant == "input_fp32_no_fp32_acc":
        args[0] = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, HIDDEN), mesh, dtype=ttnn.float32)
        kw["compute_kernel_config"] = layouts.compute_kernel_config(fp32_dest_acc_en=False)
    elif variant == "residual_shape":
        kw["residual"] = tt_rmsnorm.shard_activation(torch.randn(1, 1, 64, HIDDEN), mesh)
    elif variant == "welford_program_config":
        kw["program_config"] = ttnn.LayerNormDefaultProgramConfig(use_welford=True)
    elif variant == "sharded_prefill":
        kw["sharded"] = True
    elif variant == "mutated_compute_config":
        cfg = layouts.compute_kernel_config(fp32_dest_acc_en=True)
        x32 = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, HIDDEN), mesh, dtype=ttnn.float32)
        args[0] = x32
        kw["compute_kernel_config"] = cfg
        tt_rmsnorm.distributed_rms_norm(*args, **kw)  # planned with fp32 accumulation: accepted
        cfg.fp32_dest_acc_en = False  # the same object, now without it
    elif variant == "host_input":
        args[0] = ttnn.from_torch(torch.randn(1, 1, 128, 1024), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with _Recorder(ttnn, refuse=True) as rec:
        try:
            tt_rmsnorm.distributed_rms_norm(*args, **kw)
        except RuleError as e:
            return {"rule": e.rule, "ttnn_calls": rec.calls}
    return {"rule": None, "ttnn_calls": rec.calls}


@pytest.mark.parametrize(
    "variant, rule",
    [
        ("weight_width", "weight.row_major_shape"),
        ("input_fp32_no_fp32_acc", "pre.fp32_needs_fp32_acc"),
        ("residual_shape", "residual.shape"),
        ("welford_program_config", "pre.welford"),
        ("sharded_prefill", "sharded.height_32"),
        ("mutated_compute_config", "pre.fp32_needs_fp32_acc"),
        ("host_input", "input.on_device"),
    ],
)
def test_a_cached_call_with_one_bad_field_still_fails_before_ttnn(variant, rule):
    got = workers.run_isolated("t3k", _cache_then_bad_field, variant)
    assert got == {"rule": rule, "ttnn_calls": []}


def _planned_call_allocates_nothing(mesh, system, tokens, path):
    """Warm up once, then call again with every creation function refusing to run (what trace capture needs)."""
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.plan_cache import PLANS

    ccl, _, x, r, w = _setup(mesh, system, tokens)
    axis = AXIS[system]
    call = dict(epsilon=1e-5, cluster_axis=axis, residual=r, ccl=ccl, path=path)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    plans = len(PLANS)
    saved = {
        n: getattr(ttnn, n) for n in ("create_global_semaphore", "from_torch", "as_tensor", "allocate_tensor_on_device")
    }

    def refuse(*args, **kwargs):
        raise AssertionError("allocation inside a planned call")

    for name in saved:
        setattr(ttnn, name, refuse)
    try:
        for _ in range(3):
            tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    finally:
        for name, fn in saved.items():
            setattr(ttnn, name, fn)
    return plans, len(PLANS), ccl.describe()


@pytest.mark.parametrize(
    "system, tokens, path",
    [("t3k", 32, "fused"), ("t3k", 128, "async"), ("galaxy", 32, "fused"), ("galaxy", 32, "async")],
    ids=["t3k-fused-decode", "t3k-async-prefill", "galaxy-fused-decode", "galaxy-async-decode"],
)
def test_a_planned_call_allocates_no_semaphore_or_buffer(system, tokens, path):
    before, after, resources = workers.run_isolated(system, _planned_call_allocates_nothing, system, tokens, path)
    assert before == after >= 1, resources
    assert "persistent buffer" in resources


def _fused_into_next_matmul_config(mesh):
    """Decode with the output asked for in another width-sharded L1 layout (the next matmul's input): the fused op
    writes it directly, with no move after the norm."""
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.planning import layouts

    ccl, plan, x, r, w = _setup(mesh, "t3k", 32)
    target = layouts.sharded_memory_config((1, 1, 32, 1024), (8, 4))
    assert target != plan.norm.input_memory_config
    x = ttnn.to_memory_config(x, plan.norm.input_memory_config)  # decode activations live in L1, as models keep them
    call = dict(epsilon=1e-5, ccl=ccl, memory_config=target)
    tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    with _Recorder(ttnn) as rec:
        y = tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
    return rec.calls, all(t.memory_config() == target for t in ttnn.get_device_tensors(y))


def test_fused_writes_the_next_matmuls_memory_config():
    calls, placed = workers.run_isolated("t3k", _fused_into_next_matmul_config)
    assert calls == ["fused_rms_minimal"] and placed


def _output_dtype(mesh, dtype):
    """Each path of T3000 asked for an output dtype (None: x's)."""
    import torch
    import ttnn

    import tt_rmsnorm

    ccl, plan, x, _, w = _setup(mesh, "t3k", 128)
    decode = tt_rmsnorm.shard_activation(
        torch.randn(1, 1, 32, HIDDEN), mesh, memory_config=_setup(mesh, "t3k", 32)[1].norm.input_memory_config
    )
    out = getattr(ttnn, dtype) if dtype else None
    got = {}
    for path, t in (("classic", x), ("async", x), ("fused", decode)):
        y = tt_rmsnorm.distributed_rms_norm(t, w, mesh, epsilon=1e-5, path=path, ccl=ccl, dtype=out)
        got[path] = str(ttnn.get_device_tensors(y)[0].dtype).rsplit(".", 1)[-1]
    return got


@pytest.mark.parametrize("dtype", [None, "float32"])
def test_every_path_writes_the_output_dtype_asked_for(dtype):
    got = workers.run_isolated("t3k", _output_dtype, dtype)
    assert got == dict.fromkeys(("classic", "async", "fused"), "FLOAT32" if dtype else "BFLOAT16")


def _weight_reaches(mesh, with_weight):
    """Which op receives which tensor as its weight, on every path of a T3000 (local: the one-device axis 0)."""
    import torch

    import tt_rmsnorm
    from tt_rmsnorm.testing.recorder import recording

    ccl, plan, x, _, w = _setup(mesh, "t3k", 128)
    w = w if with_weight else None
    decode = tt_rmsnorm.shard_activation(
        torch.randn(1, 1, 32, HIDDEN), mesh, memory_config=_setup(mesh, "t3k", 32)[1].norm.input_memory_config
    )
    full = tt_rmsnorm.shard_activation(torch.randn(1, 1, 128, 4096), mesh, cluster_axis=0)
    w_full = tt_rmsnorm.prepare_weight(torch.randn(4096), mesh, cluster_axis=0) if with_weight else None
    runs = [("classic", x, w, None), ("async", x, w, None), ("local", full, w_full, 0)]
    if with_weight:  # fused_rms_minimal takes a weight always
        runs.append(("fused", decode, w, None))
    got = {}
    for path, t, weight, axis in runs:
        call = dict(epsilon=1e-5, path=path, ccl=ccl if axis is None else None, cluster_axis=axis)
        tt_rmsnorm.distributed_rms_norm(t, weight, mesh, **call)
        with recording() as rec:
            tt_rmsnorm.distributed_rms_norm(t, weight, mesh, **call)
        got[path] = [(c.op, c.tensors["weight"] == id(weight)) for c in rec.calls if "weight" in c.tensors]
    return got


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
def test_the_weight_reaches_the_op_that_applies_it(with_weight):
    got = workers.run_isolated("t3k", _weight_reaches, with_weight)
    expect = {
        "classic": [("rms_norm_post_all_gather", True)],
        "async": [("rms_norm_post_all_gather", True)],
        "local": [("rms_norm", True)],
        "fused": [("fused_rms_minimal", True)],
    }
    assert got == (expect if with_weight else {p: [] for p in ("classic", "async", "local")})


def _output_placed(mesh, sharded):
    """classic and async with the output asked for in L1 interleaved, from the interleaved or the sharded layout."""
    import ttnn

    import tt_rmsnorm
    from tt_rmsnorm.testing.recorder import recording

    ccl, _, x, _, w = _setup(mesh, "t3k", 32 if sharded else 128)
    got = {}
    for path in ("classic", "async"):
        call = dict(epsilon=1e-5, path=path, ccl=ccl, sharded=sharded, memory_config=ttnn.L1_MEMORY_CONFIG)
        tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
        with recording() as rec:
            y = tt_rmsnorm.distributed_rms_norm(x, w, mesh, **call)
        got[path] = (y.memory_config() == ttnn.L1_MEMORY_CONFIG, rec.ops.count("to_memory_config"))
    return got


@pytest.mark.parametrize("sharded", [False, True], ids=["interleaved", "sharded"])
def test_the_output_lands_in_the_memory_config_asked_for(sharded):
    got = workers.run_isolated("t3k", _output_placed, sharded)
    # interleaved: the post writes the target itself; sharded: x moves to L1 shards and the output moves to the target
    assert got == dict.fromkeys(("classic", "async"), (True, 2 if sharded else 0))
