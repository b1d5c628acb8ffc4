"""tt-metal's RMSNorm tests under tests/ttnn/unit_tests/operations/fused/ as conformance-corpus entries: the
distributed layernorm tests (sharded, exhaustive, allclose, ulp, 2-D core grid, wide pre) and the single-device
rms_norm tests (interleaved, sharded, the bad-user repro). The entry format is in corpus_format."""

from __future__ import annotations

import functools
import itertools
import math

# corpus_format puts tests/mock (the agreement battery's spec language) on the path
from tests.conformance.corpus_format import FUSED, add_entry, call, grid_range, product, stats_one_core, width_shard
from tests.mock.mock_cases import CK, DPC, PC, S, T

ENTRIES: list[dict] = []
entry = functools.partial(add_entry, ENTRIES)

HIGH = CK(fp32=True, fidelity="HiFi4", approx=False)  # distributed_norm_test_utils: use_high_precision=True
LOW = CK(fp32=False, fidelity="HiFi2", approx=True)  # use_high_precision=False

# --- tests/ttnn/.../fused/test_distributed_layernorm_sharded.py (one device, decode shapes) --------------------------
SRC = FUSED + "test_distributed_layernorm_sharded.py"


def sharded_pc(width, grid):
    block_w = width // (grid[0] * grid[1]) // 32
    return PC(grid, block_w, 1, block_w)  # the test sets subblock_w = block_w


for p in product(seed=(0, 1234), num_devices=(4, 8), input_df=("bf8", "bf16"), fuse_residual=(False, True)):
    x = T((1, 1, 32, 2048), p["input_df"], mem=width_shard(2048, (8, 4)))
    pre = call("pre", x, residual=x if p["fuse_residual"] else None, program_config=sharded_pc(2048, (8, 4)))
    entry(SRC, "test_pre_allgather_layernorm", p, "n150", [pre])
for p in product(seed=(0, 1234), num_devices=(4, 8), input_df=("bf8", "bf16")):
    x = T((1, 1, 32, 1024), p["input_df"], mem=width_shard(1024, (1, 4)))
    entry(
        SRC,
        "test_pre_allgather_layernorm_1d_reduce",
        p,
        "n150",
        [call("pre", x, program_config=sharded_pc(1024, (1, 4)))],
    )
for p in product(
    seed=(0, 1234), num_devices=(4, 8), input_df=("bf8", "bf16"), output_df=("bf8", "bf16"), weights_df=("bf8", "bf16")
):
    n = p["num_devices"]
    post = call(
        "post",
        T((1, 1, 32, 2048), p["input_df"], mem=width_shard(2048, (8, 2))),
        stats=T((1, 1, 32, 32 * n), mem=stats_one_core(32 * n), kind="means"),  # torch E[x^2] per device
        weight=T((1, 1, 1, 2048), p["weights_df"]),
        epsilon=1e-6,
        program_config=sharded_pc(2048, (8, 2)),
        dtype=p["output_df"],
    )
    entry(SRC, "test_post_allgather_layernorm", p, "n150", [post])
for p in product(
    seed=(0, 1234),
    input_df=("bf8", "bf16"),
    weights_df=("bf8", "bf16"),
    grids=(((8, 4), (0, 0), (8, 4)), ((4, 4), (1, 0), (4, 4)), ((8, 2), (0, 0), (8, 3)), ((2, 4), (0, 0), (4, 2))),
):
    core_grid, offset, out_grid = p["grids"]
    x = T((1, 1, 32, 2048), p["input_df"], mem=width_shard(2048, core_grid, offset=offset))
    out_w = math.ceil(2048 / (out_grid[0] * out_grid[1]) / 32) * 32
    post = call(
        "post",
        x,
        stats=T((1, 1, 32, 32), mem=stats_one_core(32, core=offset), kind="means"),  # the pre's output, concatenated
        weight=T((1, 1, 1, 2048), p["weights_df"]),
        epsilon=1e-6,
        program_config=sharded_pc(2048, core_grid),
        dtype=p["input_df"],
        memory_config=S("WIDTH", grid_range(out_grid), (32, out_w)),
    )
    params = {**p, "grids": f"{core_grid[0]}x{core_grid[1]}@{offset[0]},{offset[1]}->{out_grid[0]}x{out_grid[1]}"}
    entry(
        SRC,
        "test_simulated_distributed_layernorm",
        params,
        "n150",
        [call("pre", x, program_config=sharded_pc(2048, core_grid)), post],
    )

# --- tests/ttnn/.../fused/test_distributed_layernorm.py (T3000 and 4-chip meshes; skipped before any call) ------------
SRC = FUSED + "test_distributed_layernorm.py"
SHAPES = ((1, 1, 2048, 8192), (1, 1, 128, 8192), (2, 1, 128, 8192))
LEGACY_CCL = "pytest.skip(LEGACY_CCL_SKIP) before any call: the legacy ttnn.all_gather it used was removed"


def legacy_chain(shape, n, dtype, stats_dtype, weight=True):
    local = shape[:-1] + (shape[-1] // n,)
    ck = CK(fp32=False, fidelity="HiFi4", approx=False)
    x = T(local, dtype)
    w = T((1, 1, local[-1] // 32, 32), layout="RM") if weight else None
    stats = T(shape[:-1] + (32 * n,), stats_dtype, kind="sums")
    return [
        call("pre", x, compute_kernel_config=ck, dtype=stats_dtype),
        call("post", x, stats=stats, weight=w, epsilon=1e-5, compute_kernel_config=ck),
    ]


for p in product(dtype=("bf16", "bf8"), stats_dtype=("bf16", "bf8"), inp_shape=SHAPES):
    calls = legacy_chain(p["inp_shape"], 8, p["dtype"], p["stats_dtype"])
    entry(SRC, "test_distributed_layernorm_with_program_cache", p, "t3k", calls, "skipped", LEGACY_CCL)
for p in product(has_weights=(True, False), dtype=("bf16", "bf8"), stats_dtype=("bf16", "bf8"), inp_shape=SHAPES):
    calls = legacy_chain(p["inp_shape"], 4, p["dtype"], p["stats_dtype"], p["has_weights"])
    why = LEGACY_CCL if p["has_weights"] else "pytest.skip('RMSNorm does not support no weights') before any call"
    entry(SRC, "test_distributed_layernorm_with_program_cache_4chip", p, "t3k", calls, "skipped", why)


# --- distributed_norm_test_utils.run_distributed_norm_test (T3000 1x8, bf16, per device hidden / 8) -------------------
def utils_chain(batch, seq, hidden, eps, ck=HIGH, pc=None, weight_layout="TILE", use_2d=None):
    w = hidden // 8
    x = T((batch, 1, seq, w))
    weight = T((1, 1, 1, w)) if weight_layout == "TILE" else T((1, 1, w // 32, 32), layout="RM")
    stats = T((batch, 1, seq, 256), kind="sums")  # all_gather_async of the interleaved pre's sums, DRAM
    return [
        call("pre", x, compute_kernel_config=ck, dtype="bf16", program_config=pc, use_2d_core_grid=use_2d),
        call(
            "post",
            x,
            stats=stats,
            weight=weight,
            epsilon=eps,
            compute_kernel_config=ck,
            program_config=pc,
            use_2d_core_grid=use_2d,
        ),
    ]


DISTRIBUTIONS = ("standard_normal", "high_variance", "shifted_mean", "with_outliers")
WELFORD = (
    "RMS norm with use_welford=True: the helper's pytest.skip calls it an INVALID TEST CONFIGURATION "
    "(RMS norm only supports use_welford=False); its use_welford default is True"
)
NEW = DPC(welford=False, legacy_reduction=False)

SRC = FUSED + "test_distributed_layernorm_exhaustive.py"
for p in product(
    batch_size=(1, 2), seq_len=(512, 1024, 2048), hidden_dim=(2048, 4096, 8192), eps=(1e-5, 1e-6), dist=DISTRIBUTIONS
):
    calls = utils_chain(p["batch_size"], p["seq_len"], p["hidden_dim"], p["eps"], pc=NEW)
    entry(SRC, "test_distributed_norm_allclose", {**p, "norm": "rms_norm_new_reduction"}, "t3k", calls)
entry(SRC, "test_smoke", {"norm": "rms_norm_no_welford"}, "t3k", utils_chain(1, 1024, 4096, 1e-6, pc=NEW))
for layout in ("RM", "TILE"):
    calls = utils_chain(1, 1024, 4096, 1e-6, pc=NEW, weight_layout=layout)
    entry(SRC, "test_distributed_rmsnorm_memory_layouts", {"weight": layout, "welford": False}, "t3k", calls)
for test, seq, eps, why in (
    (
        "test_distributed_rmsnorm_2d_core_grid",
        128,
        1e-5,
        "marked skip('Accuracy issue that needs to be investigated'): use_2d_core_grid=True gives bad output (#35435)",
    ),
    (
        "test_distributed_rmsnorm_2d_core_grid_multi_row",
        1024,
        1e-5,
        "regression test for #56908 (the 2-D grid corrupts rows when a core owns several row tiles): 0.81.1 has it",
    ),
):
    calls = utils_chain(1, seq, 2048, eps, pc=NEW, use_2d=True)
    entry(SRC, test, {"batch_size": 1, "seq_len": seq, "hidden_dim": 2048}, "t3k", calls, "wrong", why)

SRC = FUSED + "test_distributed_layernorm_allclose.py"
for p in product(
    batch_size=(1, 2),
    seq_len=(512, 1024, 2048),
    hidden_dim=(2048, 4096, 8192),
    eps=(1e-5, 1e-6),
    dist=DISTRIBUTIONS,
    reduction=("new_reduction", "legacy_reduction"),
):
    legacy = p["reduction"] == "legacy_reduction"
    # use_legacy builds DefaultProgramConfig(legacy_reduction=True, legacy_rsqrt=True, use_welford=False); otherwise
    # the helper's use_welford default (True) goes into the config
    pc = DPC(welford=False, legacy_reduction=True) if legacy else DPC(welford=True, legacy_reduction=False)
    calls = utils_chain(p["batch_size"], p["seq_len"], p["hidden_dim"], p["eps"], pc=pc)
    entry(
        SRC,
        "test_distributed_norm_allclose",
        {**p, "norm": "rms_norm"},
        "t3k",
        calls,
        *(() if legacy else ("raises", WELFORD)),
    )
for test, batch, seq, ck in (
    ("test_distributed_norm_allclose_smoke", 1, 1024, HIGH),
    ("test_distributed_norm_large_batch", 4, 2048, HIGH),
    ("test_distributed_norm_low_precision", 1, 1024, LOW),
):
    calls = utils_chain(batch, seq, 4096, 1e-6, ck=ck, pc=DPC(welford=True))
    entry(SRC, test, {"norm": "rms_norm"}, "t3k", calls, "raises", WELFORD)
for p in product(weight=("RM", "TILE"), welford=(True, False)):
    calls = utils_chain(1, 1024, 4096, 1e-6, pc=DPC(welford=p["welford"]), weight_layout=p["weight"])
    entry(
        SRC, "test_distributed_rmsnorm_memory_layouts", p, "t3k", calls, *(("raises", WELFORD) if p["welford"] else ())
    )

# --- test_distributed_layernorm_ulp.py: written for a ttnn with LayerNormDistributedDefaultProgramConfig --------------
SRC = FUSED + "test_distributed_layernorm_ulp.py"
DIST_PC = "LayerNormDistributedDefaultProgramConfig(legacy_reduction=False, legacy_rsqrt=False)"
for case_id in ("case1", "case2", "case3", "case4"):
    x = T((1, 1, 1024, 512))
    calls = [
        call("pre", x, compute_kernel_config=HIGH, dtype="bf16", distributed_program_config=DIST_PC),
        call(
            "post",
            x,
            stats=T((1, 1, 1024, 256), kind="sums"),
            weight=T((1, 1, 16, 32), layout="RM"),
            epsilon=1e-6,
            compute_kernel_config=HIGH,
            distributed_program_config=DIST_PC,
        ),
    ]
    why = "ttnn 0.81.1 has no LayerNormDistributedDefaultProgramConfig and no distributed_program_config keyword"
    entry(
        SRC,
        "test_distributed_norm_comparison",
        {"dist": case_id, "norm": "rms_norm"},
        "t3k",
        calls,
        "runs",
        why,
        ("newer_api",),
    )

# --- test_rmsnorm_2d_core_grid_single_device.py: the #35435 reproducer (4 chunks of 8192 on one device) ---------------
SRC = FUSED + "test_rmsnorm_2d_core_grid_single_device.py"
for use_2d in (False, True):
    x = T((1, 1, 128, 2048))
    ck = CK(fp32=True, fidelity="HiFi4", approx=False)
    calls = [
        call("pre", x, compute_kernel_config=ck, dtype="bf16", use_2d_core_grid=use_2d),
        call(
            "post",
            x,
            stats=T((1, 1, 128, 128), kind="sums"),  # ttnn.concat of the four chunks' stats
            weight=T((1, 1, 1, 2048)),
            epsilon=1e-5,
            compute_kernel_config=ck,
            use_2d_core_grid=use_2d,
        ),
    ]
    intent = ("wrong", "xfail: bad PCC with use_2d_core_grid=True (#35435)") if use_2d else ("runs",)
    entry(SRC, "test_rmsnorm_2d_core_grid_single_device", {"use_2d_core_grid": use_2d}, "n150", calls, *intent)

# --- test_pre_allgather_wide.py: widths past the pre's L1 budget, for the chunked pre of a newer ttnn -----------------
SRC = FUSED + "test_pre_allgather_wide.py"
WIDE = "written for the chunked pre of a newer ttnn (#53094); 0.81.1 keeps the whole row in one core's L1"
FP32_CK = CK(fp32=True, fidelity="HiFi4", approx=False)
for p in product(w=(1024, 4096, 4128), h=(32, 128), stats=("bf16", "fp32"), residual=(False, True)):
    x = T((1, 1, p["h"], p["w"]))
    pre = call("pre", x, residual=x if p["residual"] else None, compute_kernel_config=FP32_CK, dtype=p["stats"])
    entry(SRC, "test_pre_all_gather_wide_bf16", {"norm": "rmsnorm", **p}, "n150", [pre], "runs", WIDE, ("newer_ttnn",))
for w in (1024, 4096):
    pre = call("pre", T((1, 1, 32, w), "fp32"), compute_kernel_config=FP32_CK, dtype="bf16")
    entry(
        SRC, "test_pre_all_gather_wide_fp32", {"norm": "rmsnorm", "w": w}, "n150", [pre], "runs", WIDE, ("newer_ttnn",)
    )
pre = call("pre", T((1, 1, 32, 1024)), compute_kernel_config=CK(fp32=False, approx=False), dtype="bf16")
entry(SRC, "test_pre_all_gather_no_fp32_acc", {"norm": "rmsnorm"}, "n150", [pre])

# --- test_rms_norm.py: single-device rms_norm, interleaved ------------------------------------------------------------
SRC = FUSED + "test_rms_norm.py"
for p in product(batch_size=(1, 8), h=(32, 384), w=(64, 1024)):
    rms = call("rms_norm", T((p["batch_size"], p["h"], p["w"])), weight=T((p["w"],)))
    entry(SRC, "test_rms_norm", p, "n150", [rms], notes=("rank1_weight",))
for p in product(
    w=(32, 4096),
    math_fidelity=("HiFi4", "HiFi2"),
    math_approx_mode=(True, False),
    fp32=(True, False),
    packer=(True, False),
):
    ck = CK(fp32=p["fp32"], fidelity=p["math_fidelity"], approx=p["math_approx_mode"], packer_l1_acc=p["packer"])
    rms = call("rms_norm", T((1, 128, p["w"])), weight=T((p["w"] // 32, 32), layout="RM"), compute_kernel_config=ck)
    entry(SRC, "test_rms_norm_row_major", p, "n150", [rms])
for dtype in ("bf16", "fp32"):
    x = T((1, 2048, 4022), dtype)
    rms = call("rms_norm", x, residual=T((1, 2048, 4022), dtype), weight=T((4022,), dtype))
    entry(SRC, "test_rms_norm_with_weight_and_residual", {"dtype": dtype}, "n150", [rms], notes=("rank1_weight",))

# --- test_rms_norm_sharded.py (sharded_test_utils: program config grid = the device grid 8x8) -------------------------
SRC = FUSED + "test_rms_norm_sharded.py"


def sharded_rms(h, w, nch, ncw, bh, bw, sb, two_stage, dtype, residual=False, weight=None, bias=None, gb_layout="TILE"):
    if two_stage:
        mem = S("WIDTH", grid_range((ncw, nch)), (h, w // (ncw * nch)))
    else:
        mem = S("BLOCK", grid_range((ncw, nch)), (h // nch, w // ncw))
    x = T((h, w), dtype, mem=mem)
    gb = {k: T((w,), dtype, layout=gb_layout) for k, v in (("weight", weight), ("bias", bias)) if v}
    return call(
        "rms_norm", x, residual=x if residual else None, **gb, memory_config=mem, program_config=PC((8, 8), sb, bh, bw)
    )


SINGLE_STAGE = (  # sharded_test_utils.single_stage_param_sets(): (h, w, cores_h, cores_w, block_ht, block_wt, subblock)
    (256, 512, 4, 4, 2, 4, 1),
    (256, 512, 4, 4, 2, 4, 2),
    (256, 512, 4, 8, 2, 2, 1),
    (256, 512, 4, 8, 2, 2, 2),
    (256, 512, 8, 4, 1, 4, 1),
    (256, 512, 8, 4, 1, 4, 2),
    (256, 512, 8, 8, 1, 2, 1),
    (256, 512, 8, 8, 1, 2, 2),
)
TWO_STAGE = ((64, 128, 2, 2, 2, 1, 1), (128, 256, 4, 2, 4, 1, 1), (256, 512, 2, 4, 8, 2, 1))
SIMPLE = {False: (256, 320, 2, 5, 4, 2, 1), True: (256, 320, 2, 5, 8, 1, 1)}  # simple_size_params(two_stage)
DTYPES = ("bf16", "fp32")
for sizes, tensor_type, dtype in itertools.product(SINGLE_STAGE, ("ascending_values_repeated_rows", "random"), DTYPES):
    params = {"sizes": "-".join(map(str, sizes)), "two_stage": False, "tensor_type": tensor_type, "dtype": dtype}
    entry(SRC, "test_rms_norm_sharded_single_stage", params, "n150", [sharded_rms(*sizes, False, dtype)])
for sizes, tensor_type, dtype in itertools.product(TWO_STAGE, ("ascending_values_repeated_rows", "random"), DTYPES):
    params = {"sizes": "-".join(map(str, sizes)), "two_stage": True, "tensor_type": tensor_type, "dtype": dtype}
    entry(SRC, "test_rms_norm_sharded_two_stage", params, "n150", [sharded_rms(*sizes, True, dtype)])
for test, operands, notes in (
    ("test_rms_norm_sharded_with_residual", {"residual": True}, ()),
    ("test_rms_norm_sharded_with_bias_only", {"bias": True}, ("rank1_weight",)),
    ("test_rms_norm_sharded_with_weight_and_bias", {"weight": True}, ("rank1_weight",)),  # passes only the weight
    ("test_rms_norm_sharded_with_weight_and_bias_and_residual", {"weight": True, "residual": True}, ("rank1_weight",)),
):
    for p in product(two_stage=(True, False), tensor_type=("ascending_values_repeated_rows", "random"), dtype=DTYPES):
        rms = sharded_rms(*SIMPLE[p["two_stage"]], p["two_stage"], p["dtype"], **operands)
        entry(SRC, test, p, "n150", [rms], notes=notes)
for p in product(two_stage=(False,), tensor_type=("ascending_values_repeated_rows", "random_normal"), dtype=DTYPES):
    rms = sharded_rms(64, 32, 2, 1, 1, 1, 1, False, p["dtype"], weight=True, gb_layout="RM")
    entry(SRC, "test_rms_norm_sharded_with_weight_and_bias_row_major", p, "n150", [rms])
padded = S("BLOCK", grid_range((8, 1)), (32, 32))
rms = call("rms_norm", T((32, 256), mem=padded), memory_config=padded, program_config=PC((8, 8), 1, 1, 1))
entry(SRC, "test_rms_norm_sharded_padded", {"h": 32, "w": 256}, "n150", [rms])
rms = call("rms_norm", T((32, 2048), mem=S("WIDTH", grid_range((8, 8)), (32, 32))), weight=T((2048,)))
entry(SRC, "test_rms_norm_sharded_width_default_config", {"h": 32, "w": 2048}, "n150", [rms], notes=("rank1_weight",))

# --- test_rms_norm_bad_user_repro.py: 576 rows width-sharded over 8x8 cores, no program config ------------------------
SRC = FUSED + "test_rms_norm_bad_user_repro.py"
bad = S("WIDTH", grid_range((8, 8)), (576, 32))
rms = call(
    "rms_norm",
    T((576, 2048), mem=bad),
    weight=T((2048,)),
    epsilon=9.999999747378752e-06,
    memory_config=bad,
    compute_kernel_config=CK(fp32=True, fidelity="HiFi4", approx=False, packer_l1_acc=True),
)
why = "the test asserts that some of the 32 users' rows diverge (PCC < 0.94 against user 0): known-wrong output"
entry(SRC, "test_rms_norm_reproduces_llama_bad_user_pattern", {}, "n150", [rms], "wrong", why, ("rank1_weight",))
