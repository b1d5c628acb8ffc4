"""The agreement battery on Blackhole: every case of the Wormhole tables (mock_cases_norm, mock_cases_gather) again on
the Blackhole system of the same shape (N150 -> P150, N300 -> P300, Galaxy -> Blackhole Galaxy; the T3000's 1x8 has no
Blackhole counterpart here), with what real ttnn does on the Blackhole mock, and the cases at Blackhole's own L1
edges (its core holds 73,728 B more L1 above an allocator base 5,920 B higher).

Where ttnn's verdict on Blackhole differs from Wormhole's, `BLACKHOLE_VERDICTS` says so, with why."""

from tests.mock import mock_cases_gather, mock_cases_norm
from tests.mock.mock_cases import CK, A, R, S, T, collector, in_sample

COUNTERPART = {"n150": "p150", "n300": "p300", "galaxy": "bh-galaxy"}

# Wormhole case id -> ttnn's verdict on its Blackhole counterpart, where the two differ, and why.
BLACKHOLE_VERDICTS: dict[str, tuple[str, str]] = {
    "pre-n150-bf8-L1-31-rows": (A, "the bfloat16 refill copies end inside Blackhole's larger L1"),
    "pre-n150-x2-double-into-L1-tensors": (A, "the double-buffered x^2 ends below the L1 tensors on Blackhole"),
    "pre-n300-width7200-L1-input": (A, "a 7200-wide row beside its L1 input fits Blackhole's L1"),
    "rms_norm-n150-sharded-bad-user-repro": (
        A,
        "three fp32 stats tiles (12 KiB) a reduce worker fit one Blackhole NOC burst (16 KiB): no guard fires",
    ),
    "all_gather-galaxy-composite-L1-input-beyond-bound": (
        A,
        "within the package's bound on Blackhole: more L1 a bank and 120 banks (12x10) against Galaxy's 72",
    ),
}


def _clone(case: dict) -> dict:
    system = COUNTERPART[case["system"]]
    expect = BLACKHOLE_VERDICTS.get(case["id"], (case["expect"], ""))[0]
    clone = {**case, "id": f"{case['op']}-{system}-{case['id'].split('-', 2)[2]}", "system": system, "expect": expect}
    return {**clone, "clone_of": case["id"]}


def in_make_test(case: dict) -> bool:
    """`make test` runs Blackhole's own cases, every clone whose verdict differs from Wormhole's or that is a
    package-only guard, and a stable share of the other clones (mock_cases.in_sample); `make battery` runs them all."""
    if "clone_of" not in case or case["clone_of"] in BLACKHOLE_VERDICTS or case["expect"].startswith("pkg:"):
        return True
    return in_sample(case["id"])


CASES: list[dict] = [_clone(c) for c in mock_cases_norm.CASES + mock_cases_gather.CASES if c["system"] in COUNTERPART]
case = collector(CASES)

# --- Blackhole's own L1 edges (byte-exact on mock P150: allocator base 111,744 B, L1 end 1,572,864 B) ---------------
FP32 = CK(fp32=True)
for rows in (32, 128):
    for ck, name in ((None, "default"), (FP32, "fp32acc")):
        # the row with a ROW_MAJOR weight: 1,514,848 B at 5120 wide ends inside Blackhole's L1 (not Wormhole's)
        kw = {} if ck is None else {"compute_kernel_config": ck}
        case(
            f"rm-weight-5120-rows{rows}-{name}",
            "rms_norm",
            T((1, 1, rows, 5120)),
            A,
            system="p150",
            weight=T((1, 1, 160, 32), layout="RM"),
            **kw,
        )
case(
    "rm-weight-6144-fp32acc",
    "rms_norm",
    T((1, 1, 32, 6144)),
    R,
    system="p150",
    weight=T((1, 1, 192, 32), layout="RM"),
    compute_kernel_config=FP32,
)
case("rm-weight-8192", "rms_norm", T((1, 1, 32, 8192)), R, system="p150", weight=T((1, 1, 256, 32), layout="RM"))
for w, e in [(6144, A), (7168, A), (8192, R)]:
    case(f"bf16-width{w}-edge", "pre", T((1, 1, 32, w)), e, system="p150")
for w, e in [(5120, A), (6144, R)]:
    case(f"bf16-fp32acc-width{w}-edge", "pre", T((1, 1, 32, w)), e, system="p150", compute_kernel_config=FP32)
for w, e in [(5120, A), (6144, R)]:
    case(
        f"rm-weight-width{w}-edge",
        "post",
        T((1, 1, 32, w)),
        e,
        system="p150",
        stats=T((1, 1, 32, 32), kind="sums"),
        weight=T((1, 1, w // 32, 32), layout="RM"),
    )

# the package-only guards at Blackhole's own bounds
case(
    "sharded-burst-beyond-blackhole",
    "rms_norm",
    T((576, 2048), mem=S("WIDTH", (0, 0, 3, 7), (576, 64))),
    "pkg:sharded.stats_gather_burst",
    system="p150",
    compute_kernel_config=FP32,
)  # five fp32 stats tiles a reduce worker (20 KiB), beyond one 16 KiB burst
case(
    "composite-L1-input-beyond-blackhole-bound",
    "all_gather",
    T((1, 1, 400, 6144), "fp32", mem="L1"),
    "pkg:all_gather.composite_l1_bound",
    system="bh-galaxy",
    dim=2,
    cluster_axis=1,
)
# the gather into L1 at the edge of a P300 bank (110 banks, 1,461,120 B above the allocator base): 707 bf16 tiles a bank
# fit beside the gather's circular buffer and semaphores, 708 do not
for pages, expect in ((707, A), (708, R)):
    case(
        f"out-L1-edge-{pages}-tiles-a-bank",
        "all_gather",
        T((1, 1, pages * 110 // 2 * 32, 32)),
        expect,
        system="p300",
        dim=3,
        cluster_axis=1,
        memory_config="L1",
    )
