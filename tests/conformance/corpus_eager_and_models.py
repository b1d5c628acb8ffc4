"""tt-metal's RMSNorm tests under tests/tt_eager/ (distributed pre and post, sharded rms_norm sweeps, TG Llama decode
post) and DeepSeek-V3's model unit test as conformance-corpus entries. The entry format is in corpus_format."""

from __future__ import annotations

import functools
import itertools
import math

# corpus_format puts tests/mock (the agreement battery's spec language) on the path
from tests.conformance.corpus_format import DEEPSEEK, EAGER, add_entry, call, grid_range, product, stats_one_core
from tests.mock.mock_cases import CK, DPC, PC, S, T

ENTRIES: list[dict] = []
entry = functools.partial(add_entry, ENTRIES)

# --- tests/tt_eager/.../test_distributed_layernorm_pre_allgather.py (chunks of a hidden dim on one device) ------------
SRC = EAGER + "test_distributed_layernorm_pre_allgather.py"
EAGER_PRE_CK = CK(fp32=False, fidelity="HiFi4", approx=False, packer_l1_acc=True)
PRE_SHAPES = (
    (1, 1, 32, 8192),
    (1, 1, 128, 8192),
    (1, 1, 2048, 8192),
    (1, 1, 8192, 8192),
    (2, 1, 128, 8192),
    (1, 1, 128, 2048),
)
for p in product(input_dtype=("bf16", "bf8"), output_dtype=("bf16", "bf8"), inp_shape=PRE_SHAPES, n_devices=(4, 8)):
    s = p["inp_shape"]
    pre = call(
        "pre",
        T(s[:-1] + (s[-1] // p["n_devices"],), p["input_dtype"]),
        compute_kernel_config=EAGER_PRE_CK,
        dtype=p["output_dtype"],
    )
    entry(SRC, "test_layernorm_part_1_with_program_cache", p, "n150", [pre])
pre = call("pre", T((1, 1, 2048, 1024)), compute_kernel_config=EAGER_PRE_CK, dtype="bf16")
entry(
    SRC, "test_layernorm_part_1_with_program_cache2", {"inp_shape": (1, 1, 2048, 8192), "n_devices": 8}, "n150", [pre]
)

# --- tests/tt_eager/.../test_distributed_layernorm_post_allgather.py (host-built sums, per device) --------------------
SRC = EAGER + "test_distributed_layernorm_post_allgather.py"


def eager_post(shape, n, input_dtype, output_dtype, fp32):
    local = shape[:-1] + (shape[-1] // n,)
    return call(
        "post",
        T(local, input_dtype),
        stats=T(shape[:-1] + (32 * n,), kind="sums"),  # sum(x^2) per chunk at column 32 * device
        weight=T((1, 1, local[-1] // 32, 32), layout="RM"),
        epsilon=1e-5,
        compute_kernel_config=CK(fp32=fp32, fidelity="HiFi4", approx=False),
        dtype=output_dtype,
    )


for p in product(
    dtypes=(("bf16", "bf16"), ("bf8", "bf8"), ("bf16", "bf8")),
    inp_shape=((1, 1, 2048, 8192), (1, 1, 128, 256), (2, 1, 128, 8192)),
    n_devices=(4, 8),
    fp32_enabled=(True, False),
):
    post = eager_post(p["inp_shape"], p["n_devices"], *p["dtypes"], p["fp32_enabled"])
    entry(SRC, "test_layernorm_part_2_with_program_cache", {**p, "dtypes": "_".join(p["dtypes"])}, "n150", [post])
post = eager_post((1, 1, 2048, 8192), 8, "bf16", "bf16", False)
entry(
    SRC, "test_layernorm_part_2_with_program_cache2", {"inp_shape": (1, 1, 2048, 8192), "n_devices": 8}, "n150", [post]
)

# --- tests/tt_eager/.../test_layernorm_sharded.py: the RMSN test ids of its two sharded rms_norm sweeps ---------------
SRC = EAGER + "test_layernorm_sharded.py"
RMS_IDS = {3: "add_RMSN", 4: "add_RMSN_G", 5: "add_RMSN_GB", 9: "RMSN", 10: "RMSN_G", 11: "RMSN_GB"}


def eager_sharded(test_id, x, width, pc, ck, out):
    gamma = T((1, 1, width // 32, 32), layout="RM")  # ttnn.Tensor(...ROW_MAJOR).to(device, DRAM), bfloat16
    return call(
        "rms_norm",
        x,
        residual=x if test_id <= 5 else None,
        weight=gamma if test_id % 3 else None,
        bias=gamma if test_id % 3 == 2 else None,
        epsilon=1e-2,
        memory_config=out,
        program_config=pc,
        compute_kernel_config=ck,
    )


for test_id, in_dtype, padding in itertools.product(RMS_IDS, ("fp32", "bf16", "bf8"), (False, True)):
    width = 128 * 7 + 96 if padding else 1024
    x = T((8, 1, 256, width), in_dtype, mem=S("BLOCK", grid_range((8, 8)), (256, 128), "COL"))
    pc = PC((8, 8), 4, 8, 4, inplace=True)
    rms = eager_sharded(
        test_id, x, width, pc, CK(fp32=True, fidelity="HiFi4", approx=True), ("sharded_no_spec", "BLOCK")
    )
    params = {"test_id": RMS_IDS[test_id], "in_dtype": in_dtype, "padding": padding}
    entry(SRC, "test_layernorm_sharded_mix_precision_rm", params, "n150", [rms])
for test_id, (m, k, sb), in_dtype, orient in itertools.product(
    RMS_IDS, ((64, 8192, 4), (64, 8192, 4), (512, 2048, 1)), ("fp32", "bf16", "bf8"), ("ROW", "COL")
):
    shard_w = math.ceil(k / 64 / 32) * 32
    x = T((1, 1, m, k), in_dtype, mem=S("WIDTH", grid_range((8, 8)), (m, shard_w), orient))
    pc = PC((8, 8), sb, m // 32, shard_w // 32, inplace=True)
    rms = eager_sharded(test_id, x, k, pc, CK(fp32=False, fidelity="HiFi2", approx=True), ("sharded_no_spec", "WIDTH"))
    params = {"test_id": RMS_IDS[test_id], "M": m, "K": k, "subblock_w": sb, "in_dtype": in_dtype, "orient": orient}
    entry(SRC, "test_layernorm_1d_sharded_mix_precision_rm", params, "n150", [rms])

# --- models/demos/deepseek_v3/tests/unit/test_rmsnorm.py (896 per device on 4x7 cores) --------------------------------
DS_MEM = S("WIDTH", grid_range((4, 7)), (32, 32))
DS_X = T((1, 1, 32, 896), mem=DS_MEM)
DS_PC = PC((4, 7), 1, 1, 1)  # create_sharded_norm_config(grid 4x7, dim 896, rows 32)
DS_CK = CK(fp32=False, fidelity="HiFi4", approx=True)
DS_PRE = call("pre", DS_X, compute_kernel_config=DS_CK, program_config=DS_PC, dtype="bf16")


def ds_post(kind):
    return call(
        "post",
        DS_X,
        stats=T((1, 1, 32, 256), mem=stats_one_core(256), kind=kind),
        weight=T((1, 1, 28, 32), layout="RM"),
        epsilon=1e-6,
        compute_kernel_config=DS_CK,
        program_config=DS_PC,
        dtype="bf16",
    )


entry(DEEPSEEK, "test_rmsnorm_pre_all_gather_single_device", {}, "n150", [dict(DS_PRE)])
for trace in (False, True):
    entry(DEEPSEEK, "test_rmsnorm_pre_all_gather_mesh_device", {"enable_trace": trace}, "galaxy", [dict(DS_PRE)])
entry(
    DEEPSEEK,
    "test_rmsnorm_post_all_gather",
    {},
    "n150",
    [ds_post("sums")],
    "wrong",
    "stats hold per-device sum(x^2) (host-built) but the sharded post averages means: the output is scaled by "
    "1/sqrt(896); the test's PCC check (0.99) cannot see a constant scale",
)
for trace in (False, True):  # pre -> all_gather(cluster_axis=1, one-core stats) -> post: the sharded pre's means
    entry(
        DEEPSEEK,
        "test_rmsnorm_distributed_mesh_device",
        {"enable_trace": trace},
        "galaxy",
        [dict(DS_PRE), ds_post("means")],
    )
for (shape, weight), trace in itertools.product(
    (((1, 1, 32, 1536), (1, 1, 48, 32)), ((1, 1, 32, 512), (1, 1, 16, 32))), (None, False, True)
):
    rms = call(
        "rms_norm",
        T(shape),
        weight=T(weight, layout="RM"),
        epsilon=1e-6,
        compute_kernel_config=CK(fp32=False, fidelity="LoFi", approx=False, packer_l1_acc=True),
        program_config=DPC(),
        memory_config="DRAM",
    )
    if trace is None:
        entry(DEEPSEEK, "test_rmsnorm_single_device", {"shape": f"32x{shape[-1]}"}, "n150", [rms])
    else:
        entry(DEEPSEEK, "test_rmsnorm_mesh_device", {"shape": f"32x{shape[-1]}", "enable_trace": trace}, "t3k", [rms])

# --- tests/tt_eager/.../test_layernorm_tg_llama.py: TG Llama decode post, 2048 per device on 2x8 cores ----------------
PREFETCHER_NOC1_GRID = (
    (2, 9), (6, 6), (6, 7), (6, 9), (6, 0), (6, 1), (6, 2), (6, 4), (6, 5), (5, 5), (5, 6), (5, 7),
    (5, 9), (5, 0), (5, 1), (5, 2), (5, 4), (1, 4), (1, 5), (1, 9), (1, 0), (2, 0), (2, 4), (2, 5),
)  # fmt: skip
post = call(
    "post",
    T((1, 1, 32, 2048), mem=S("WIDTH", grid_range((2, 8)), (32, 128))),
    stats=T((1, 1, 32, 128), mem=stats_one_core(128), kind="means"),  # torch E[x^2] of 4 devices
    weight=T((1, 1, 64, 32), layout="RM"),
    epsilon=1e-5,
    program_config=PC((2, 8), 1, 1, 4),
    memory_config=S("WIDTH", PREFETCHER_NOC1_GRID, (32, 96)),  # ceil(2048 / 24 / 32) * 32
)
entry(
    EAGER + "test_layernorm_tg_llama.py",
    "test_layernorm_perf",
    {"input_dim": 8192, "input_core_grid": "2x8", "output_core_grid": "PREFETCHER_NOC1_GRID"},
    "galaxy",
    [post],
    notes=("not_on_mock",),  # dispatch_core_axis=COL gives a 7x10 grid (cores up to y=9); the mock Galaxy has 8x9
    grid=(7, 10),
)
