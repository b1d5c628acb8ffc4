"""The agreement battery: the package's rules and real ttnn (on a mock device) see the same inputs and must give the
same verdict, accept or reject, in both directions. The only exceptions are the package-only guards
(tt_rmsnorm.rules.table.PACKAGE_ONLY_RULES): there ttnn accepts (or crashes) and the package rejects on purpose.

A reject agrees only for the same reason: ttnn's message must be the one of the rule the package names
(`TTNN_MESSAGES`), so a rule that fires for the wrong reason, or a ttnn error the case did not mean, is a failure."""

import re

import pytest

from tests.mock import mock_battery, mock_cases, mock_worker
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES
from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

OPS = ("pre", "post", "rms_norm", "all_gather")

_L1 = r"Statically allocated dataflow buffers .* (beyond max L1 size|clash with L1 buffers)"
# What ttnn 0.81.1 says (its TT_FATAL / TT_THROW text) when it refuses a call for the reason each rule names. Some
# refusals are ttnn failing on the way rather than a message of its own ("bad optional access", "std::get: wrong
# index", "ShapeBase[] index out of range", the fabric context of a 1-device mesh): those are listed as seen.
TTNN_MESSAGES = {
    "all_gather.cluster_axis": r"requires cluster_axis to be set|ShapeBase\[\] index out of range",
    "all_gather.empty": r"output_chunks_per_stripe must be > 0",
    "all_gather.composite_dtype": r"Only TILE layout is supported for BFLOAT8_B dtype",
    "all_gather.l1_budget": r"clash with L1 buffers|Out of Memory: Not enough space to allocate",
    "all_gather.dim": r"Invalid gather dim",
    "all_gather.num_devices": r"only work for num_devices > 1|un-initialized fabric context",
    "all_gather.sharded_needs_memory_config": r"Number of shards along width \d+ must not exceed number of cores",
    "bias.row_major_shape": r"Beta tensor dimensions",
    "bias.same_layout": r"Gamma and beta must have the same layout",
    "distributed.rank": r"Stats and input dim2 must match|ShapeBase\[\] index out of range",
    "input.height_sharded": r"Height sharded inputs are not supported|Number of shards along height",
    "input.layout": r"must have TILE layout|Only tilized inputs supported|does not support ROW_MAJOR input",
    "memory_config.interleaved_output": r"Output memory config must be interleaved",
    "memory_config.shard_fits": (
        r"Shard height \d+ must match physical height|Number of shards along width|bad optional access"
        r"|shard_grid_fit_error|shard_align_error"
    ),
    "rms_norm.output_shard_holds_block": r"DFB 'out' .* is larger than the per-bank allocation of its borrowed",
    "memory_config.sharded_output": r"bad optional access|output_mem_config\.is_sharded\(\)",
    "post.fp32_needs_fp32_acc": r"FLOAT32 input/stats require fp32_dest_acc_en",
    "post.l1_budget": _L1,
    "pre.l1_budget": _L1,
    "sharded.l1_budget": _L1,
    "sharded.reduce_workers": r"Start core must be within grid size",
    "post.stats_dims": r"Stats and input (batch sizes|dim\d) must match",
    "post.welford": r"not compatible with Welford",
    "pre.fp32_needs_fp32_acc": r"Float32 input requires fp32_dest_acc",
    "pre.welford": r"Welford's algorithm not supported in pre_all_gather",
    "program_config.block_h_shard": r"block_[hw] \(\d+\) must equal",
    "program_config.block_w_shard": r"block_w \(\d+\) must equal",
    "program_config.grid_fits_shards": r"does not fit within program_config grid",
    "program_config.subblock_w_divides": r"block_w must be divisible by subblock_w",
    "program_config.subblock_w_limit": r"subblock width must less than \d+ tiles",
    "program_config.welford": r"Welford's algorithm is not supported for RMSNorm",
    "rms_norm.welford": r"Welford's algorithm is not supported for RMSNorm",
    "rms_norm.l1_budget": rf"{_L1}|LayerNorm streaming circular buffers require \d+ bytes",
    "residual.interleaved": r"Residual tensor must be interleaved",
    "residual.layout": r"Residual tensor must have TILE layout",
    "residual.on_device": r"Operands to layernorm need to be on device",
    "residual.same_sharding": r"should be sharded if input a is sharded|should have the same shard spec",
    "residual.shape": r"Input and residual logical and padded shapes must match",
    "rms_norm.sharded_config_interleaved": r"bad optional access",
    "sharded.height_32": r"Only activations with batch size = 32 are supported",
    "sharded.program_config": r"std::get: wrong index for variant",
    "stats.bf16_sharded": r"Only bfloat16 is supported for stats",
    "stats.layout": r"Stats tensor must have TILE layout",
    "stats.on_device": r"Device Operations expect device tensors",
    "stats.one_core": r"Stats must be sharded with num_cores = 1",
    "stats.sharded": r"Stats must be sharded",
    "weight.dtype": r"Gamma tensor must be BFLOAT16 or FLOAT32",
    "weight.on_device": r"Device Operations expect device tensors",
    "weight.row_major_shape": r"Gamma's last padded dim|Gamma tensor dimensions",
    "weight.tile_height": r"Gamma tensor height must equal tile height",
    "weight.tile_width": r"Input and gamma (last logical|padded widths)",
}


def ttnn_side(case: dict) -> dict:
    try:
        return workers.run_isolated(case["system"], mock_worker.run_case, case, timeout=120)
    except workers.WorkerCrashed as e:
        return {"verdict": "crash", "message": str(e).splitlines()[0], "package_on_real": None}


def _both(pkg: dict, got: dict) -> str:
    return f"\n  package: {pkg['verdict']} {pkg['message']}\n  ttnn:    {got['verdict']} {got['message'][:600]}"


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c["id"], marks=() if mock_battery.in_make_test(c) else pytest.mark.full_battery)
        for c in mock_battery.CASES
    ],
)
def test_package_and_ttnn_agree(case, request):
    if case["id"] in mock_battery.KNOWN_DISAGREEMENTS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=mock_battery.KNOWN_DISAGREEMENTS[case["id"]]))
    pkg = mock_cases.package_side(case)
    got = ttnn_side(case)
    expect = case["expect"]
    if expect.startswith("pkg:"):
        rule = expect[len("pkg:") :]
        assert rule in PACKAGE_ONLY_RULES, f"{rule} is not a documented package-only guard"
        assert got["verdict"] in ("accept", "crash"), f"ttnn rejects a case listed as package-only ({rule}):" + _both(
            pkg, got
        )
        assert pkg["verdict"] == "reject" and pkg["rule"] == rule, (
            f"the package-only guard {rule} did not fire:" + _both(pkg, got)
        )
    else:
        ttnn_verdict = "reject" if got["verdict"] == "crash" else got["verdict"]
        assert pkg["verdict"] == ttnn_verdict, "package and ttnn disagree:" + _both(pkg, got)
        assert got["verdict"] == expect, f"ttnn no longer behaves as the table says ({expect}):" + _both(pkg, got)
        if expect == "reject":
            assert pkg["rule"] in TTNN_MESSAGES, (
                f"rule {pkg['rule']} has no ttnn message in TTNN_MESSAGES: add what ttnn says" + _both(pkg, got)
            )
            assert re.search(TTNN_MESSAGES[pkg["rule"]], got["message"]), (
                f"both reject, for different reasons ({pkg['rule']}: /{TTNN_MESSAGES[pkg['rule']]}/):" + _both(pkg, got)
            )
    if case["kw"].get("use_2d_core_grid") and pkg["verdict"] == "accept":  # accepted, but with the #35435 warning
        assert "AccuracyWarning" in pkg["warnings"], pkg
    real = got.get("package_on_real")
    if real is not None:  # the same rules fed real tensors (TensorDesc.from_tensor) must say the same
        assert (real["verdict"], real["rule"]) == (pkg["verdict"], pkg["rule"]), (
            f"TensorDesc vs real tensor: {real} vs {pkg}"
        )


@pytest.mark.parametrize("make_test", [False, True], ids=["battery", "make-test-share"])
@pytest.mark.parametrize("arch", ["wormhole_b0", "blackhole"])
def test_battery_covers_every_op_and_guard(arch, make_test):
    """On each architecture: every op, interleaved and sharded inputs, and every package-only guard of the four ops;
    in the whole battery and in the share `make test` runs."""
    cases = [
        c
        for c in mock_battery.CASES
        if mock_battery.architecture_of(c) == arch and (mock_battery.in_make_test(c) or not make_test)
    ]
    by_op = {op: sum(c["op"] == op for c in cases) for op in OPS}
    assert len(cases) >= (50 if make_test else 200) and all(n >= (5 if make_test else 20) for n in by_op.values()), (
        by_op
    )
    layouts = {(c["op"], c["x"]["mem"] not in ("DRAM", "L1")) for c in cases}
    assert {(op, sharded) for op in ("pre", "post", "rms_norm") for sharded in (False, True)} <= layouts
    exercised = {c["expect"][4:] for c in cases if c["expect"].startswith("pkg:")}
    guards = {r for r in PACKAGE_ONLY_RULES if not r.startswith(("fused.", "all_gather_async."))}  # CCL: own battery
    assert exercised == guards, f"guards without a case: {guards - exercised}"
