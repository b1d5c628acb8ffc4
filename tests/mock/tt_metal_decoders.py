"""tt-metal's decoder norms, scenario by scenario, as data: what tt-metal's own module gives back and the ttnn ops it
issues, written from reading its code (models/common/rmsnorm.py `RMSNorm`, models/tt_transformers/tt/
distributed_norm.py `DistributedNorm` with tt_transformers' ccl.py `tt_distributed_rmsnorm` /
`tt_sharded_distributed_rmsnorm`, models/demos/llama3_70b_galaxy/tt/distributed_norm.py with its llama_ccl.py), next
to the ops `tt_rmsnorm.compat` issues for the same call and, where they differ, why the result is the same.

Llama-70B: dim 8192. T3000 (1x8) runs tt_transformers with the norm distributed in prefill only (decode gathers the
fractured input, then a replicated sharded rms_norm); the Galaxy (8x4, TG) keeps both modes distributed over the
mesh columns; N150 (1x1) runs the replicated norm. Tensor methods (`t.deallocate(True)`) are not ops and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

DIM = 8192

PRE, POST, GATHER = "rms_norm_pre_all_gather", "rms_norm_post_all_gather", "all_gather_async"
MOVE, FUSED, NORM = "to_memory_config", "fused_rms_minimal", "rms_norm"

# Why our ops are other ops with the same result; each scenario that differs names one.
FUSED_IS_PRE_GATHER_POST = (
    "fused_rms_minimal runs pre, the stats gather and post in one program, on the same input sharding and program "
    "config; the reference model's fused layout and tt-metal's sharded pre/post agree within the bf16 policy"
)
NO_OP_MOVE = "x already sits in DRAM, where the norm reads it: tt-metal's to_memory_config to the same config is a copy"
STATS_AS_GATHERED = (
    "the stats are already [1, 1, T, 32] in DRAM, and the gather writes them into a persistent DRAM buffer: tt-metal's "
    "reshape and move to DRAM do not change them"
)
TILE_WEIGHT = (
    "tt-metal's ROW_MAJOR weight at 8192 needs 1,772,896 B of a core's L1 in rms_norm (ttnn refuses it); the module "
    "keeps a TILE copy for interleaved inputs, the same values"
)


@dataclass(frozen=True)
class Scenario:
    id: str
    system: str  # "t3k" | "galaxy" | "n150"
    module: str  # "tt_transformers" (compat.DistributedNorm) | "llama_galaxy" (compat.llama_galaxy.DistributedNorm)
    mode: str
    # what tt-metal's module gives back, per device
    width: int  # DIM: replicated; DIM / 4: fractured over the Galaxy's columns
    memory_layout: str
    buffer: str
    tt_metal_ops: tuple | None  # None: tt-metal's module cannot run the call (`tt_metal_fails` says why)
    ops: tuple  # what tt_rmsnorm.compat issues
    why: str = ""  # where `ops` differ from `tt_metal_ops`
    residual: bool = False
    activation_dtype: str = "bfloat16"
    weight_dtype: str = "bfloat16"
    tt_metal_fails: str = ""

    @property
    def tokens(self) -> int:
        return 32 if self.mode == "decode" else 128

    @property
    def dtype(self) -> str:
        return self.activation_dtype.upper()


SCENARIOS = (
    # tt_transformers on T3000: decode gathers x to full width, then the replicated sharded rms_norm
    Scenario(
        "t3k-decode", "t3k", "tt_transformers", "decode", DIM, "WIDTH_SHARDED", "L1", (GATHER, NORM), (GATHER, NORM)
    ),
    # prefill distributed: pre -> gather (DRAM) -> post, then the fractured output gathered to full width
    Scenario(
        "t3k-prefill",
        "t3k",
        "tt_transformers",
        "prefill",
        DIM,
        "INTERLEAVED",
        "DRAM",
        (MOVE, PRE, GATHER, POST, GATHER),
        (PRE, GATHER, POST, GATHER),
        NO_OP_MOVE,
    ),
    # TG decode: tt_sharded_distributed_rmsnorm (the input moved to the TG grid, sharded pre -> gather -> post)
    Scenario(
        "galaxy-decode",
        "galaxy",
        "tt_transformers",
        "decode",
        DIM // 4,
        "WIDTH_SHARDED",
        "L1",
        (MOVE, PRE, GATHER, POST),
        (MOVE, FUSED),
        FUSED_IS_PRE_GATHER_POST,
    ),
    # TG prefill: tt_distributed_rmsnorm (pre, the stats reshaped and moved to DRAM, gathered over axis 1, post)
    Scenario(
        "galaxy-prefill",
        "galaxy",
        "tt_transformers",
        "prefill",
        DIM // 4,
        "INTERLEAVED",
        "DRAM",
        (PRE, "reshape", MOVE, GATHER, POST),
        (PRE, GATHER, POST),
        STATS_AS_GATHERED,
    ),
    # N150: not multichip, the input moved where the norm reads it, then the replicated rms_norm
    Scenario(
        "n150-decode", "n150", "tt_transformers", "decode", DIM, "WIDTH_SHARDED", "L1", (MOVE, NORM), (MOVE, NORM)
    ),
    Scenario(
        "n150-prefill",
        "n150",
        "tt_transformers",
        "prefill",
        DIM,
        "INTERLEAVED",
        "DRAM",
        None,
        (NORM,),
        f"{NO_OP_MOVE}; {TILE_WEIGHT}",
        tt_metal_fails="rms_norm with the ROW_MAJOR weight at 8192 does not fit a core's L1 (TT_FATAL)",
    ),
    # a bfloat8_b weight: tt-metal's ROW_MAJOR load fails inside ttnn; the replicated norm takes it TILE
    Scenario(
        "n150-decode-bf8-weight",
        "n150",
        "tt_transformers",
        "decode",
        DIM,
        "WIDTH_SHARDED",
        "L1",
        None,
        (MOVE, NORM),
        "the weight loads TILE, the layout bfloat8_b exists in",
        weight_dtype="bfloat8_b",
        tt_metal_fails="ttnn.as_tensor of a bfloat8_b weight in ROW_MAJOR (TT_FATAL at construction)",
    ),
    # the Galaxy decoder's own norm, forward(x, res, mode): decode as the fused op with the residual
    Scenario(
        "galaxy-llama-decode-residual",
        "galaxy",
        "llama_galaxy",
        "decode",
        DIM // 4,
        "WIDTH_SHARDED",
        "L1",
        (FUSED,),
        (FUSED,),
        residual=True,
    ),
    Scenario(
        "galaxy-llama-decode", "galaxy", "llama_galaxy", "decode", DIM // 4, "WIDTH_SHARDED", "L1", (FUSED,), (FUSED,)
    ),
    Scenario(
        "galaxy-llama-prefill",
        "galaxy",
        "llama_galaxy",
        "prefill",
        DIM // 4,
        "INTERLEAVED",
        "DRAM",
        (PRE, GATHER, POST),
        (PRE, GATHER, POST),
    ),
)

# bfloat8_b activations, as the previous matmul writes them: the same ops, the output in the activation's dtype
SCENARIOS += tuple(
    replace(s, id=f"{s.id}-bf8", activation_dtype="bfloat8_b")
    for s in SCENARIOS
    if s.id in ("t3k-decode", "t3k-prefill", "galaxy-decode")
)


@dataclass(frozen=True)
class FunctionScenario:
    """A call of tt_transformers' ccl.py functions, by one of the signatures model files call them with, as data:
    the ops tt-metal's function issues and the ops `tt_rmsnorm.compat` issues for the same call."""

    id: str
    system: str  # "t3k" | "galaxy"
    function: str  # "tt_distributed_rmsnorm" | "tt_sharded_distributed_rmsnorm"
    signature: str  # "current" (tt_ccl, num_links), "with_ccl" (tt_ccl, no num_links), "without_ccl", "keywords"
    mode: str
    width: int  # per device
    memory_layout: str
    tt_metal_ops: tuple
    ops: tuple
    why: str = ""

    @property
    def tokens(self) -> int:
        return 32 if self.mode == "decode" else 128


ALL_GATHER = "all_gather"
# tt_transformers' tt_all_gather moves its input to DRAM first; tt_distributed_rmsnorm reshapes the stats before it
TT_METAL_PREFILL = (PRE, "reshape", MOVE, GATHER, POST)

FUNCTION_SCENARIOS = (
    *(
        FunctionScenario(
            f"{system}-tt_distributed_rmsnorm-{sig}",
            system,
            "tt_distributed_rmsnorm",
            sig,
            "prefill",
            DIM // n,
            "INTERLEAVED",
            TT_METAL_PREFILL,
            (PRE, GATHER, POST),
            STATS_AS_GATHERED,
        )
        for system, n in (("t3k", 8), ("galaxy", 4))
        for sig in ("current", "with_ccl", "keywords")
    ),
    # the signature before the CCL object: the stats through ttnn.all_gather
    FunctionScenario(
        "t3k-tt_distributed_rmsnorm-without_ccl",
        "t3k",
        "tt_distributed_rmsnorm",
        "without_ccl",
        "prefill",
        DIM // 8,
        "INTERLEAVED",
        (PRE, ALL_GATHER, POST),
        (PRE, ALL_GATHER, POST),
    ),
    *(
        FunctionScenario(
            f"galaxy-tt_sharded_distributed_rmsnorm-{sig}",
            "galaxy",
            "tt_sharded_distributed_rmsnorm",
            sig,
            "decode",
            DIM // 4,
            "WIDTH_SHARDED",
            (MOVE, PRE, GATHER, POST),
            (MOVE, PRE, GATHER, POST),
        )
        for sig in ("current", "with_ccl", "keywords")
    ),
    FunctionScenario(
        "galaxy-tt_sharded_distributed_rmsnorm-without_ccl",
        "galaxy",
        "tt_sharded_distributed_rmsnorm",
        "without_ccl",
        "decode",
        DIM // 4,
        "WIDTH_SHARDED",
        (MOVE, PRE, ALL_GATHER, POST),
        (MOVE, PRE, ALL_GATHER, POST),
    ),
)
