"""The NKI hardware limits the emulator enforces, each with the documentation page it comes from.

Values are those of NeuronCore-v2 (Trainium / Inferentia2, the `neuronxcc.nki` generation), the smallest target the
kernels must fit. LIMITS.md explains each rule and what stays unverified without the real toolchain.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

PROGRAMMING_MODEL = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/programming_model.html"
ARCH_GUIDE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/arch/trainium_inferentia2_arch.html"
API_COMMON = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.api.shared.html"
TILE_SIZE = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/generated/nki.language.tile_size.html"
)
NL_SUM = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.sum.html"
TENSOR_REDUCE = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.tensor_reduce.html"
TENSOR_SCALAR = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/generated/nki.isa.tensor_scalar.html"
)
NL_LOAD = "https://awsdocs-neuron.readthedocs-hosted.com/general/nki/api/generated/nki.language.load.html"
NL_STORE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.store.html"
RMSNORM_TUTORIAL = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/rmsnorm.html"
_API = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/"
NL_ADD = _API + "nki.language.add.html"
BROADCAST_TO = _API + "nki.language.broadcast_to.html"
PROGRAM_ID = _API + "nki.language.num_programs.html"
TENSOR_TENSOR = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/generated/nki.isa.tensor_tensor.html"
)
NC_MATMUL = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html"
NL_MATMUL = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.matmul.html"
BN_STATS = _API + "nki.isa.bn_stats.html"
BN_AGGR = _API + "nki.isa.bn_aggr.html"
NKI_TENSOR = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/deep-dives/nki-aps.html"
NKI_RELEASE_NOTES = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/nki_rn.html"

NUM_PARTITIONS = 128
PMAX = 128  # [TC#1] nki.language.tile_size.pmax
PSUM_FMAX = 512  # [TC#2] free size of a PSUM tile, in fp32 elements (one 2 KiB bank)
PSUM_BANK_BYTES = PSUM_FMAX * 4
GEMM_STATIONARY_FMAX = 128  # [TC#3]
GEMM_MOVING_FMAX = 512  # [TC#3]
MAX_FREE_AXES = 4  # an on-chip access pattern covers up to four free dimensions (NKI access patterns)
BN_STATS_FMAX = 512  # nki.language.tile_size.bn_stats_fmax (the page names it; 512 on NeuronCore-v2)
SBUF_BYTES_PER_PARTITION = 192 * 1024  # 24 MiB SBUF / 128 partitions (NeuronCore-v2)
PSUM_BYTES_PER_PARTITION = 16 * 1024  # 2 MiB PSUM / 128 partitions (NeuronCore-v2)

# The NKI data types (API common fields, "Supported Data Types"). float64 is not among them.
SUPPORTED_DTYPES: dict[str, np.dtype] = {
    "uint8": np.dtype(np.uint8),
    "int8": np.dtype(np.int8),
    "uint16": np.dtype(np.uint16),
    "int16": np.dtype(np.int16),
    "uint32": np.dtype(np.uint32),
    "int32": np.dtype(np.int32),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "bool": np.dtype(np.bool_),
}
SUPPORTED_DTYPE_SET = frozenset(SUPPORTED_DTYPES.values())
FLOAT_DTYPES = frozenset(SUPPORTED_DTYPES[n] for n in ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32"))
