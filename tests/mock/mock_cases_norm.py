"""The agreement battery's table of the norm ops: `rms_norm_pre_all_gather`, `rms_norm_post_all_gather` and `rms_norm`
on one chip (and, each device running them, on multi-chip meshes), interleaved and sharded, with what real ttnn does
with each case (the spec format of mock_cases)."""

from tests.mock.mock_cases import CK, DPC, PC, A, R, S, T, collector

CASES: list[dict] = []
case = collector(CASES)

X = (1, 1, 32, 1024)  # one decode tile row, T3K's local width for Llama-70B
W8 = S("WIDTH", (0, 0, 3, 1), (32, 128))  # X width-sharded on 4x2 cores
PC8 = PC((4, 2), 4, 1, 4)
W2 = S("WIDTH", (0, 0, 1, 0), (32, 512))  # X on 2 cores: block_w 16, for the subblock limits
W2PC = PC((2, 1), 8, 1, 16)
STATS1 = S("WIDTH", (0, 0, 0, 0), (32, 256))  # gathered stats of 8 devices on one core
FP32 = CK(fp32=True)

# --- rms_norm_pre_all_gather, interleaved -----------------------------------------------------------------------------
case("bf16", "pre", T(X), A)
case("bf16-L1-input", "pre", T(X, mem="L1"), A)
case("bf8", "pre", T(X, "bf8"), A)
case("fp32-no-acc", "pre", T(X, "fp32"), R)
case("fp32-acc", "pre", T(X, "fp32"), A, compute_kernel_config=FP32)
case("row-major", "pre", T(X, layout="RM"), R)
case("row-major-fp32", "pre", T(X, "fp32", "RM"), R, compute_kernel_config=FP32)
for w, e in [
    (32, A),
    (64, A),
    (96, A),
    (100, A),
    (256, A),
    (2048, A),
    (4096, A),
    (6144, A),
    (7168, A),
    (8192, R),
    (16384, R),
]:
    case(f"bf16-width{w}", "pre", T((1, 1, 32, w)), e)
for w, e in [(4096, A), (8192, A), (10240, A), (12288, R), (16384, R)]:
    case(f"bf8-width{w}", "pre", T((1, 1, 32, w), "bf8"), e)
for w, e in [(2048, A), (3072, A), (4096, R)]:
    case(f"fp32-acc-width{w}", "pre", T((1, 1, 32, w), "fp32"), e, compute_kernel_config=FP32)
for w, e in [(4096, A), (5120, A), (6144, R), (7168, R)]:
    case(f"bf16-fp32acc-width{w}", "pre", T((1, 1, 32, w)), e, compute_kernel_config=FP32)
for s in (7, 64, 128, 2048):
    case(f"seq{s}", "pre", T((1, 1, s, 1024)), A)
case("batch2", "pre", T((2, 1, 128, 1024)), A)
case("rank2", "pre", T((32, 1024)), R)
case("rank3", "pre", T((1, 32, 1024)), R)
case("rank5", "pre", T((1, 1, 1, 32, 1024)), "pkg:distributed.rank")
for d in ("bf16", "bf8", "fp32"):
    case(f"stats-dtype-{d}", "pre", T(X), A, dtype=d)
case("out-L1", "pre", T(X), A, memory_config="L1")
case("out-DRAM", "pre", T(X, mem="L1"), A, memory_config="DRAM")
case("out-sharded", "pre", T(X), R, memory_config=STATS1)
case("default-pc", "pre", T(X), A, program_config=DPC())
case("default-pc-legacy", "pre", T(X), A, program_config=DPC(legacy_reduction=True))
case("welford", "pre", T(X), R, program_config=DPC(welford=True))
case("sharded-pc-on-interleaved", "pre", T(X), "pkg:program_config.ignored", program_config=PC8)
case("2d-grid", "pre", T((1, 1, 128, 8192), "bf8"), R, use_2d_core_grid=True)  # the 2-D factory needs 1,736,032 B of L1
case("2d-grid-bf16", "pre", T((1, 1, 256, 1024)), A, use_2d_core_grid=True)
case("2d-grid-welford", "pre", T(X), R, use_2d_core_grid=True, program_config=DPC(welford=True))
case("no-2d-grid", "pre", T(X), A, use_2d_core_grid=False)
for fid in ("LoFi", "HiFi2", "HiFi3"):
    case(f"fidelity-{fid}", "pre", T(X), A, compute_kernel_config=CK(fidelity=fid))
case("exact-math", "pre", T(X), A, compute_kernel_config=CK(approx=False))
case("residual", "pre", T(X), A, residual=T(X))
case("residual-bf8", "pre", T(X), A, residual=T(X, "bf8"))
case("residual-shape", "pre", T(X), R, residual=T((1, 1, 64, 1024)))
case("residual-width", "pre", T(X), R, residual=T((1, 1, 32, 512)))
case("residual-row-major", "pre", T(X), R, residual=T(X, layout="RM"))
case("residual-sharded", "pre", T(X), R, residual=T(X, mem=W8))
case("residual-host", "pre", T(X), R, residual=T(X, host=True))
case("residual-L1", "pre", T(X), A, residual=T(X, mem="L1"))
case("residual-ragged", "pre", T((1, 1, 7, 100)), A, residual=T((1, 1, 7, 100)))
case("host-input", "pre", T(X, host=True), "pkg:input.on_device")

# --- rms_norm_pre_all_gather, sharded (decode) ------------------------------------------------------------------------
case("sharded", "pre", T(X, mem=W8), A, program_config=PC8)
case("sharded-32cores", "pre", T(X, mem=S("WIDTH", (0, 0, 7, 3), (32, 32))), A, program_config=PC((8, 4), 1, 1, 1))
case("sharded-1core", "pre", T(X, mem=S("WIDTH", (0, 0, 0, 0), (32, 1024))), A, program_config=PC((1, 1), 8, 1, 32))
case("sharded-no-pc", "pre", T(X, mem=W8), R)
case("sharded-default-pc", "pre", T(X, mem=W8), R, program_config=DPC())
case("sharded-block_w", "pre", T(X, mem=W8), R, program_config=PC((4, 2), 2, 1, 2))
case("sharded-block_w-big", "pre", T(X, mem=W8), R, program_config=PC((4, 2), 4, 1, 8))
case("sharded-subblock-divides", "pre", T(X, mem=W8), R, program_config=PC((4, 2), 3, 1, 4))
case("sharded-block_h", "pre", T(X, mem=W8), R, program_config=PC((4, 2), 4, 2, 4))
case("sharded-pc-grid-small", "pre", T(X, mem=W8), R, program_config=PC((2, 2), 4, 1, 4))
case("sharded-pc-grid-large", "pre", T(X, mem=W8), A, program_config=PC((8, 8), 4, 1, 4))
case("sharded-welford", "pre", T(X, mem=W8), R, program_config=PC((4, 2), 4, 1, 4, welford=True))
case(
    "sharded-offset-grid",
    "pre",
    T((1, 1, 32, 2048), mem=S("WIDTH", (1, 0, 2, 7), (32, 128))),
    A,
    program_config=PC((2, 8), 4, 1, 4),
)
for sub, ck, e in [
    (16, None, R),
    (8, None, A),
    (8, FP32, R),
    (4, FP32, A),
    (16, CK(dst_sync=True), A),
    (16, CK(fp32=True, dst_sync=True), R),
    (8, CK(fp32=True, dst_sync=True), A),
]:
    kw = {"compute_kernel_config": ck} if ck else {}
    tag = "none" if ck is None else f"fp32{int(ck[1])}-sync{int(ck[4])}"
    case(f"subblock{sub}-{tag}", "pre", T(X, mem=W2), e, program_config=PC((2, 1), sub, 1, 16), **kw)
case(
    "sharded-height",
    "pre",
    T((1, 1, 64, 1024), mem=S("HEIGHT", (0, 0, 1, 0), (32, 1024))),
    R,
    program_config=PC((2, 1), 8, 1, 32),
)
case(
    "sharded-64rows",
    "pre",
    T((1, 1, 64, 1024), mem=S("WIDTH", (0, 0, 3, 1), (64, 128))),
    R,
    program_config=PC((4, 2), 4, 2, 4),
)
case(
    "sharded-batch2",
    "pre",
    T((2, 1, 32, 2048), mem=S("WIDTH", (0, 0, 7, 0), (64, 256))),
    A,
    program_config=PC((8, 1), 8, 2, 8),
)
case("sharded-block", "pre", T(X, mem=S("BLOCK", (0, 0, 3, 0), (32, 256))), A, program_config=PC((4, 1), 8, 1, 8))
case("sharded-bf8", "pre", T(X, "bf8", mem=W8), A, program_config=PC8)
case("sharded-fp32-no-acc", "pre", T(X, "fp32", mem=W8), A, program_config=PC8)
case("sharded-row-major", "pre", T(X, layout="RM", mem=S("WIDTH", (0, 0, 3, 1), (32, 128))), R, program_config=PC8)
case("sharded-dtype-bf8", "pre", T(X, mem=W8), "pkg:sharded_pre.dtype_ignored", program_config=PC8, dtype="bf8")
case("sharded-out-interleaved", "pre", T(X, mem=W8), R, program_config=PC8, memory_config="L1")
case("sharded-out-width", "pre", T(X, mem=W8), A, program_config=PC8, memory_config=W8)
case("sharded-2d-grid", "pre", T(X, mem=W8), "pkg:use_2d_core_grid.ignored", program_config=PC8, use_2d_core_grid=True)
case("sharded-residual", "pre", T(X, mem=W8), A, program_config=PC8, residual=T(X, mem=W8))
case("sharded-residual-interleaved", "pre", T(X, mem=W8), R, program_config=PC8, residual=T(X))
case(
    "sharded-residual-other-grid",
    "pre",
    T(X, mem=W8),
    R,
    program_config=PC8,
    residual=T(X, mem=S("WIDTH", (0, 0, 7, 0), (32, 128))),
)
case("sharded-fp32acc", "pre", T(X, mem=W8), A, program_config=PC8, compute_kernel_config=FP32)

# --- rms_norm_post_all_gather, interleaved (prefill) ------------------------------------------------------------------
ST = T((1, 1, 32, 256))  # gathered sums of 8 devices
case("bf16", "post", T(X), A, stats=ST)
for n in (1, 2, 4, 32):
    case(f"stats-{n}dev", "post", T(X), A, stats=T((1, 1, 32, 32 * n)))
case("stats-logical48", "post", T(X), A, stats=T((1, 1, 32, 48)))
case("stats-row-major", "post", T(X), R, stats=T((1, 1, 32, 256), layout="RM"))
case("stats-bf8", "post", T(X), A, stats=T((1, 1, 32, 256), "bf8"))
case("stats-fp32-no-acc", "post", T(X), R, stats=T((1, 1, 32, 256), "fp32"))
case("stats-fp32-acc", "post", T(X), A, stats=T((1, 1, 32, 256), "fp32"), compute_kernel_config=FP32)
case("stats-rows", "post", T(X), R, stats=T((1, 1, 64, 256)))
case("stats-batch", "post", T(X), R, stats=T((2, 1, 32, 256)))
case("stats-host", "post", T(X), R, stats=T((1, 1, 32, 256), host=True))
case("stats-L1", "post", T(X), A, stats=T((1, 1, 32, 256), mem="L1"))
case("stats-sharded-1core", "post", T(X), A, stats=T((1, 1, 32, 256), mem=STATS1))
case("stats-sharded-8cores", "post", T(X), A, stats=T((1, 1, 32, 256), mem=S("WIDTH", (0, 0, 7, 0), (32, 32))))
case("stats-means", "post", T(X), "pkg:stats.kind_mismatch", stats=T((1, 1, 32, 256), kind="means"))
case("stats-sums", "post", T(X), A, stats=T((1, 1, 32, 256), kind="sums"))
case("out-sharded-no-spec", "post", T(X), R, stats=ST, memory_config=("sharded_no_spec", "WIDTH"))
case("input-bf8", "post", T(X, "bf8"), A, stats=ST)
case("input-fp32-no-acc", "post", T(X, "fp32"), R, stats=ST)
case("input-fp32-acc", "post", T(X, "fp32"), A, stats=ST, compute_kernel_config=FP32)
case("input-row-major", "post", T(X, layout="RM"), R, stats=ST)
case("input-L1", "post", T(X, mem="L1"), A, stats=ST)
for s in (7, 128, 2048):
    case(f"seq{s}", "post", T((1, 1, s, 1024)), A, stats=T((1, 1, s, 256)))
case("batch2", "post", T((2, 1, 128, 1024)), A, stats=T((2, 1, 128, 256)))
case("width100", "post", T((1, 1, 32, 100)), "pkg:distributed.width_multiple_of_32", stats=ST)
for w, e in [(4096, A), (8192, A), (10240, A), (12288, R), (14336, R), (16384, R), (20480, R), (24576, A)]:
    case(f"width{w}", "post", T((1, 1, 32, w)), e, stats=ST)
case("rank5", "post", T((1, 1, 1, 32, 1024)), "pkg:distributed.rank", stats=T((1, 1, 1, 32, 256)))
case("rank3", "post", T((1, 32, 1024)), R, stats=T((1, 32, 256)))
GRM = T((1, 1, 32, 32), layout="RM")  # gamma [1, 1, W/32, 32] for W = 1024
case("weight-rm", "post", T(X), A, stats=ST, weight=GRM)
case("weight-rm-fp32", "post", T(X), A, stats=ST, weight=T((1, 1, 32, 32), "fp32", "RM"))
case("weight-rm-short", "post", T(X), R, stats=ST, weight=T((1, 1, 16, 32), layout="RM"))
case("weight-rm-wide", "post", T(X), R, stats=ST, weight=T((1, 1, 16, 64), layout="RM"))
case(
    "weight-rm-4d-volume",
    "post",
    T((1, 1, 32, 100)),
    "pkg:distributed.width_multiple_of_32",
    stats=ST,
    weight=T((1, 1, 4, 32), layout="RM"),
)
case("weight-tile", "post", T(X), A, stats=ST, weight=T((1, 1, 1, 1024)))
case("weight-tile-fp32", "post", T(X), A, stats=ST, weight=T((1, 1, 1, 1024), "fp32"))
case("weight-tile-bf8", "post", T(X), R, stats=ST, weight=T((1, 1, 1, 1024), "bf8"))
case("weight-tile-width", "post", T(X), R, stats=ST, weight=T((1, 1, 1, 512)))
case("weight-tile-tall", "post", T(X), R, stats=ST, weight=T((1, 1, 64, 1024)))
case("weight-host", "post", T(X), R, stats=ST, weight=T((1, 1, 32, 32), layout="RM", host=True))
case("weight-bias-rm", "post", T(X), A, stats=ST, weight=GRM, bias=GRM)
case("weight-bias-tile", "post", T(X), A, stats=ST, weight=T((1, 1, 1, 1024)), bias=T((1, 1, 1, 1024)))
case("weight-tile-bias-rm", "post", T(X), A, stats=ST, weight=T((1, 1, 1, 1024)), bias=GRM)
case("weight-bf16-bias-fp32", "post", T(X), A, stats=ST, weight=GRM, bias=T((1, 1, 32, 32), "fp32", "RM"))
case("bias-only", "post", T(X), "pkg:bias.needs_weight", stats=ST, bias=GRM)
case("bias-short", "post", T(X), R, stats=ST, weight=GRM, bias=T((1, 1, 16, 32), layout="RM"))
case("out-L1", "post", T(X), A, stats=ST, memory_config="L1")
case("out-sharded", "post", T(X), A, stats=ST, memory_config=W8)  # ttnn returns a width-sharded output
case("out-bf8", "post", T(X), A, stats=ST, dtype="bf8")
case("out-fp32", "post", T(X), A, stats=ST, dtype="fp32")
case("default-pc", "post", T(X), A, stats=ST, program_config=DPC())
case("welford", "post", T(X), R, stats=ST, program_config=DPC(welford=True))
case("sharded-pc-on-interleaved", "post", T(X), "pkg:program_config.ignored", stats=ST, program_config=PC8)
case("2d-grid", "post", T((1, 1, 128, 1024)), A, stats=T((1, 1, 128, 256)), use_2d_core_grid=True)
case("epsilon0", "post", T(X), A, stats=ST, epsilon=0.0)
case("epsilon1e-5", "post", T(X), A, stats=ST, epsilon=1e-5)
case("fp32acc", "post", T(X), A, stats=ST, compute_kernel_config=FP32)
case("host-input", "post", T(X, host=True), "pkg:input.on_device", stats=ST)

# --- rms_norm_post_all_gather, sharded (decode) -----------------------------------------------------------------------
SS = T((1, 1, 32, 256), mem=STATS1)
case("sharded", "post", T(X, mem=W8), A, stats=SS, program_config=PC8)
case(
    "sharded-out-no-spec",
    "post",
    T(X, mem=W8),
    R,
    stats=SS,
    program_config=PC8,
    memory_config=("sharded_no_spec", "WIDTH"),
)
case("sharded-weight-rm", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, weight=GRM)
case("sharded-weight-tile", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, weight=T((1, 1, 1, 1024)))
case("sharded-weight-tile-bf8", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, weight=T((1, 1, 1, 1024), "bf8"))
case("sharded-weight-bias", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, weight=GRM, bias=GRM)
case(
    "sharded-weight-tile-bias-rm",
    "post",
    T(X, mem=W8),
    R,
    stats=SS,
    program_config=PC8,
    weight=T((1, 1, 1, 1024)),
    bias=GRM,
)
case("sharded-bias-only", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, bias=GRM)  # its kernel adds beta
case(
    "sharded-weight-short", "post", T(X, mem=W8), R, stats=SS, program_config=PC8, weight=T((1, 1, 16, 32), layout="RM")
)
case("sharded-stats-interleaved", "post", T(X, mem=W8), R, stats=ST, program_config=PC8)
case("sharded-stats-bf8", "post", T(X, mem=W8), R, stats=T((1, 1, 32, 256), "bf8", mem=STATS1), program_config=PC8)
case("sharded-stats-fp32", "post", T(X, mem=W8), R, stats=T((1, 1, 32, 256), "fp32", mem=STATS1), program_config=PC8)
case(
    "sharded-stats-2cores",
    "post",
    T(X, mem=W8),
    R,
    stats=T((1, 1, 32, 256), mem=S("WIDTH", (0, 0, 1, 0), (32, 128))),
    program_config=PC8,
)
case(
    "sharded-stats-rows",
    "post",
    T(X, mem=W8),
    "pkg:stats.rows_match",
    stats=T((1, 1, 64, 256), mem=S("WIDTH", (0, 0, 0, 0), (64, 256))),
    program_config=PC8,
)
case(
    "sharded-stats-sums",
    "post",
    T(X, mem=W8),
    "pkg:stats.kind_mismatch",
    stats=T((1, 1, 32, 256), mem=STATS1, kind="sums"),
    program_config=PC8,
)
case(
    "sharded-stats-means",
    "post",
    T(X, mem=W8),
    A,
    stats=T((1, 1, 32, 256), mem=STATS1, kind="means"),
    program_config=PC8,
)
case("sharded-no-pc", "post", T(X, mem=W8), R, stats=SS)
case("sharded-block_w", "post", T(X, mem=W8), R, stats=SS, program_config=PC((4, 2), 2, 1, 2))
case("sharded-subblock16", "post", T(X, mem=W2), R, stats=SS, program_config=PC((2, 1), 16, 1, 16))
case("sharded-subblock8", "post", T(X, mem=W2), A, stats=SS, program_config=PC((2, 1), 8, 1, 16))
case("sharded-out-interleaved", "post", T(X, mem=W8), R, stats=SS, program_config=PC8, memory_config="L1")
case("sharded-out-same", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, memory_config=W8)
case("sharded-out-bf8", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, dtype="bf8")
case(
    "sharded-height",
    "post",
    T((1, 1, 64, 1024), mem=S("HEIGHT", (0, 0, 1, 0), (32, 1024))),
    R,
    stats=T((1, 1, 64, 256), mem=S("WIDTH", (0, 0, 0, 0), (64, 256))),
    program_config=PC((2, 1), 8, 1, 32),
)
case("sharded-fp32-no-acc", "post", T(X, "fp32", mem=W8), A, stats=SS, program_config=PC8)
case("sharded-bf8", "post", T(X, "bf8", mem=W8), A, stats=SS, program_config=PC8)
case(
    "sharded-2d-grid",
    "post",
    T(X, mem=W8),
    "pkg:use_2d_core_grid.ignored",
    stats=SS,
    program_config=PC8,
    use_2d_core_grid=True,
)

# --- rms_norm (single device) -----------------------------------------------------------------------------------------
case("bf16", "rms_norm", T(X), A)
case("out-sharded-no-spec", "rms_norm", T(X), R, memory_config=("sharded_no_spec", "WIDTH"))
for shard in ((0, 256), (16, 256), (32, 250)):
    case(f"out-shard{shard[0]}x{shard[1]}", "rms_norm", T(X), R, memory_config=S("WIDTH", (0, 0, 3, 0), shard))
case("sharded-out-no-spec", "rms_norm", T(X, mem=W8), A, program_config=PC8, memory_config=("sharded_no_spec", "WIDTH"))
case("bf8", "rms_norm", T(X, "bf8"), A)
case("fp32", "rms_norm", T(X, "fp32"), A)
case("row-major", "rms_norm", T(X, layout="RM"), R)
case("L1", "rms_norm", T(X, mem="L1"), A)
for w in (100, 8192, 16384, 65536):
    case(f"width{w}", "rms_norm", T((1, 1, 32, w)), A)
case("rank2", "rms_norm", T((32, 1024)), A)
case("rank3", "rms_norm", T((1, 32, 1024)), A)
case("rank5", "rms_norm", T((1, 1, 1, 32, 1024)), A)
case("seq2048", "rms_norm", T((1, 1, 2048, 1024)), A)
case("weight-tile", "rms_norm", T(X), A, weight=T((1, 1, 1, 1024)))
case("weight-tile-bf8", "rms_norm", T(X), A, weight=T((1, 1, 1, 1024), "bf8"))
case("weight-rm", "rms_norm", T(X), A, weight=GRM)
case("weight-rm-short", "rms_norm", T(X), R, weight=T((1, 1, 16, 32), layout="RM"))
case("weight-tile-logical-wider", "rms_norm", T((1, 1, 32, 100)), A, weight=T((1, 1, 1, 128)))
case("weight-tile-narrow", "rms_norm", T(X), R, weight=T((1, 1, 1, 512)))
case("weight-bias", "rms_norm", T(X), A, weight=T((1, 1, 1, 1024)), bias=T((1, 1, 1, 1024)))
case("weight-tile-bias-rm", "rms_norm", T(X), R, weight=T((1, 1, 1, 1024)), bias=GRM)
case("bias-only", "rms_norm", T(X), A, bias=T((1, 1, 1, 1024)))  # layernorm.cpp adds beta without gamma
case("sharded-bias-only", "rms_norm", T(X, mem=W8), A, program_config=PC8, bias=GRM)
# tt-metal's test_rms_norm_bad_user_repro: ttnn accepts it and returns wrong rows; the block-sharded fix it names runs
BAD_USER = T((576, 2048), mem=S("WIDTH", (0, 0, 7, 7), (576, 32)))
case("sharded-bad-user-repro", "rms_norm", BAD_USER, "pkg:sharded.stats_gather_burst", compute_kernel_config=FP32)
case(
    "sharded-bad-user-fix",
    "rms_norm",
    T((576, 2048), mem=S("BLOCK", (0, 0, 7, 5), (96, 256))),
    A,
    program_config=PC((8, 6), 4, 3, 8),
    compute_kernel_config=FP32,
)
case("residual", "rms_norm", T(X), A, residual=T(X))
case("residual-shape", "rms_norm", T(X), R, residual=T((1, 1, 64, 1024)))
case("out-L1", "rms_norm", T(X), A, memory_config="L1")
case("epsilon1e-6", "rms_norm", T(X), A, epsilon=1e-6)
case("fp32acc", "rms_norm", T(X), A, compute_kernel_config=FP32)
case("sharded", "rms_norm", T(X, mem=W8), A, program_config=PC8)
case("sharded-no-pc", "rms_norm", T(X, mem=W8), A)
case("sharded-weight", "rms_norm", T(X, mem=W8), A, program_config=PC8, weight=GRM)
case("sharded-block_w", "rms_norm", T(X, mem=W8), R, program_config=PC((4, 2), 2, 1, 2))
case("sharded-subblock16", "rms_norm", T(X, mem=W2), R, program_config=PC((2, 1), 16, 1, 16))
case("sharded-pc-on-interleaved", "rms_norm", T(X), R, program_config=PC8)
case("sharded-height", "rms_norm", T((1, 1, 64, 1024), mem=S("HEIGHT", (0, 0, 1, 0), (32, 1024))), R)
case(
    "sharded-block-2d",
    "rms_norm",
    T((1, 1, 128, 1024), mem=S("BLOCK", (0, 0, 3, 3), (32, 256))),
    A,
    program_config=PC((4, 4), 4, 1, 8),
)
case(
    "sharded-block-2d-block_h",
    "rms_norm",
    T((1, 1, 128, 1024), mem=S("BLOCK", (0, 0, 3, 3), (32, 256))),
    R,
    program_config=PC((4, 4), 4, 2, 8),
)
case(
    "sharded-64rows",
    "rms_norm",
    T((1, 1, 64, 1024), mem=S("WIDTH", (0, 0, 3, 1), (64, 128))),
    A,
    program_config=PC((4, 2), 4, 2, 4),
)
case("sharded-out-interleaved", "rms_norm", T(X, mem=W8), R, program_config=PC8, memory_config="L1")
case("host-input", "rms_norm", T(X, host=True), "pkg:input.on_device")

# --- the same ops on multi-chip meshes (each device runs them; grids 8x7 on n300/T3K, 8x9 on Galaxy) ----------------
for system in ("n300", "t3k", "galaxy"):
    case("prefill", "pre", T((1, 1, 2048, 1024)), A, system=system)
    case("prefill", "post", T((1, 1, 2048, 1024)), A, system=system, stats=T((1, 1, 2048, 256)), weight=GRM)
    case("decode", "pre", T(X, mem=W8), A, system=system, program_config=PC8)
    case("decode", "post", T(X, mem=W8), A, system=system, stats=SS, program_config=PC8, weight=GRM)
    case("prefill", "rms_norm", T((1, 1, 2048, 1024)), A, system=system)

# --- classes found by differential fuzzing (tools/differential.py); one case per side of each boundary ---------------
case("welford-interleaved", "rms_norm", T(X), R, program_config=DPC(welford=True))
case("sharded-default-pc", "rms_norm", T(X, mem=W8), R, program_config=DPC())
case("residual-sharded", "rms_norm", T(X), A, residual=T(X, mem=W8))  # the pre refuses this one
# a residual shard on one core: below a 224-row shard the whole-row buffers fit 95% of L1, below a 256-row one ttnn
# streams the row, below a 320-row one the streaming buffers do not fit either
for rows, verdict, name in ((224, A, "whole-row"), (256, A, "streams"), (320, R, "streaming-misfit")):
    case(
        f"residual-sharded-1core-{name}",
        "rms_norm",
        T((1, 1, rows, 2048)),
        verdict,
        residual=T((1, 1, rows, 2048), mem=S("WIDTH", (0, 0, 0, 0), (rows, 2048))),
        epsilon=1e-6,
    )
case("epsilon-negative", "post", T(X), "pkg:epsilon.non_negative", stats=ST, epsilon=-1e-5)
case("epsilon-negative", "rms_norm", T(X), "pkg:epsilon.non_negative", epsilon=-1e-5)
case("weight-tile-rank1", "post", T(X), A, stats=ST, weight=T((1024,)))
case("weight-tile-rank1-bf8", "post", T(X), R, stats=ST, weight=T((1024,), "bf8"))
case("weight-rm-rank1", "post", T(X), R, stats=ST, weight=T((1024,), layout="RM"))
case("sharded-weight-tile-rank1", "post", T(X, mem=W8), A, stats=SS, program_config=PC8, weight=T((1024,)))
case("weight-tile-rank1", "rms_norm", T(X), A, weight=T((1024,)))
case("weight-rm-rank1", "rms_norm", T(X), R, weight=T((1024,), layout="RM"))
# sharded L1: the static buffers must end below the input and output shards (tests/tt/data/l1_verdicts_sharded.txt)
W8192_1 = S("WIDTH", (0, 0, 0, 0), (32, 8192))
case("sharded-1core-width8192", "rms_norm", T((1, 1, 32, 8192), mem=W8192_1), R, program_config=PC((1, 1), 8, 1, 256))
case("sharded-1core-width8192-no-pc", "rms_norm", T((1, 1, 32, 8192), mem=W8192_1), R)
case(
    "sharded-8cores-width8192",
    "rms_norm",
    T((1, 1, 32, 8192), mem=S("WIDTH", (0, 0, 7, 0), (32, 1024))),
    A,
    program_config=PC((8, 1), 8, 1, 32),
)
case(
    "sharded-1core-width8192-fp32acc",
    "pre",
    T((1, 1, 32, 8192), mem=W8192_1),
    R,
    program_config=PC((1, 1), 4, 1, 256),
    compute_kernel_config=FP32,
)
case("sharded-1core-width8192", "pre", T((1, 1, 32, 8192), mem=W8192_1), A, program_config=PC((1, 1), 8, 1, 256))
case(
    "sharded-1core-width8192",
    "post",
    T((1, 1, 32, 8192), mem=W8192_1),
    R,
    stats=SS,
    program_config=PC((1, 1), 8, 1, 256),
)
# where tt-metal's work split places the reduce workers: from core (0, 0) of the shard grid, in its orientation
case("sharded-col-1row", "pre", T(X, mem=S("WIDTH", (0, 0, 1, 0), (32, 512), "COL")), R, program_config=W2PC)
case(
    "sharded-row-1col-offset",
    "pre",
    T(X, mem=S("WIDTH", (2, 0, 2, 3), (32, 256))),
    R,
    program_config=PC((1, 4), 8, 1, 8),
)
case("sharded-row-1col", "pre", T(X, mem=S("WIDTH", (0, 0, 0, 3), (32, 256))), A, program_config=PC((1, 4), 8, 1, 8))
# sharded memory configs must fit the tensor they describe
# (the sharded pre builds its own one-core stats spec and takes any sharded memory_config)
case(
    "sharded-out-misfit", "pre", T(X, mem=W8), A, program_config=PC8, memory_config=S("WIDTH", (0, 0, 3, 1), (64, 128))
)
case("out-sharded", "rms_norm", T(X), A, memory_config=W8)  # an interleaved input, any sharded output that fits
case("out-block-sharded", "rms_norm", T(X), A, memory_config=S("BLOCK", (0, 0, 3, 0), (32, 256)))
case("out-sharded-misfit", "rms_norm", T(X), R, memory_config=S("WIDTH", (0, 0, 3, 1), (64, 128)))
case("out-sharded-misfit", "post", T((1, 1, 128, 1024)), R, stats=T((1, 1, 128, 256)), memory_config=W8)
# interleaved rms_norm: a ROW_MAJOR weight keeps the whole row in L1, a TILE one streams it
case(
    "width8192-fp32-rm-weight",
    "rms_norm",
    T((1, 1, 32, 8192), "fp32"),
    R,
    weight=T((1, 1, 256, 32), layout="RM"),
    compute_kernel_config=FP32,
)
case(
    "width8192-fp32-tile-weight",
    "rms_norm",
    T((1, 1, 32, 8192), "fp32"),
    A,
    weight=T((1, 1, 1, 8192)),
    compute_kernel_config=FP32,
)
# an L1-interleaved input takes the top of every core's L1 (56 banks on N300)
case("width7200", "pre", T((1, 1, 32, 7200)), A, system="n300", compute_kernel_config=CK(dst_sync=True))
case(
    "width7200-L1-input",
    "pre",
    T((1, 1, 32, 7200), mem="L1"),
    R,
    system="n300",
    compute_kernel_config=CK(dst_sync=True),
)

case(
    "2d-grid-residual",
    "pre",
    T((2, 1, 128, 2048), "fp32"),
    R,
    residual=T((2, 1, 128, 2048), "fp32"),
    compute_kernel_config=FP32,
    use_2d_core_grid=True,
)
case("2d-grid-residual-fits", "pre", T((1, 1, 128, 1024)), A, residual=T((1, 1, 128, 1024)), use_2d_core_grid=True)
# the sharded rms_norm writes each core's block into the output's shard on that core, resharded or not
SHARD_2 = S("WIDTH", (0, 0, 1, 0), (32, 256))
case(
    "out-shard-below-block",
    "rms_norm",
    T((1, 1, 1, 512), mem=SHARD_2),
    R,
    memory_config=S("WIDTH", (0, 0, 3, 1), (32, 128)),
)
case(
    "out-shard-holds-block",
    "rms_norm",
    T((1, 1, 1, 512), mem=SHARD_2),
    A,
    memory_config=S("WIDTH", (0, 0, 0, 0), (32, 512)),
)
# the interleaved pre refills the tile padding of an off-grid bfloat8_b L1 input through a bfloat16 copy in L1
case("bf8-L1-31-rows", "pre", T((1, 1, 31, 10432), "bf8", mem="L1"), R)
case("bf8-L1-31-rows-fits", "pre", T((1, 1, 31, 10304), "bf8", mem="L1"), A)
case("bf8-L1-32-rows", "pre", T((1, 1, 32, 10432), "bf8", mem="L1"), A)
# the interleaved pre double-buffers x^2 where that still ends inside L1, blind to the L1 tensors below the end
case("x2-double-into-L1-tensors", "pre", T((1, 1, 64, 3072), mem="L1"), R, residual=T((1, 1, 64, 3072), mem="L1"))
case("x2-single-fits", "pre", T((1, 1, 64, 3104), mem="L1"), A, residual=T((1, 1, 64, 3104), mem="L1"))
# a sharded program config with inplace=True writes the post's and rms_norm's output over the input's shards: the
# output takes no L1 shard of its own, so the same buffers fit where a separate output shard would not
ONE_CORE_768 = S("WIDTH", (0, 1, 0, 1), (128, 768))
for inplace, expect in ((False, R), (True, A)):
    case(
        f"sharded-inplace-{inplace}-fp32-768",
        "rms_norm",
        T((1, 1, 128, 768), "fp32", mem=ONE_CORE_768),
        expect,
        weight=T((1, 1, 1, 768)),
        residual=T((1, 1, 128, 768), "fp32", mem=ONE_CORE_768),
        compute_kernel_config=CK(fidelity="HiFi2"),
        program_config=PC((1, 1), 4, 4, 24, inplace=inplace),
        epsilon=1e-6,
    )
    case(
        f"sharded-inplace-{inplace}-6144",
        "post",
        T((1, 1, 32, 6144), mem=S("WIDTH", (0, 0, 0, 0), (32, 6144))),
        expect,
        stats=T((1, 1, 32, 256), mem=STATS1, kind="means"),
        program_config=PC((1, 1), 4, 1, 192, inplace=inplace),
        epsilon=1e-6,
    )
