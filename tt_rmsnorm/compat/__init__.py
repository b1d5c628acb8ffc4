"""tt-metal's norm modules and functions, keyword for keyword: `RMSNorm` and `SimpleRMSNorm` (models/common/rmsnorm.py),
`DistributedNorm` (models/tt_transformers/tt/distributed_norm.py), `tt_distributed_rmsnorm` and
`tt_sharded_distributed_rmsnorm` (models/tt_transformers/tt/ccl.py), and the Galaxy decoder's `DistributedNorm`
(`tt_rmsnorm.compat.llama_galaxy`). A model file changes its import line and keeps every call:

    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

Behind the same signatures the calls go through the package: every rule checked before device work, the model's
CCL object (tt-metal's TT_CCL) adopted so that gathers use its cycled semaphores and persistent stats buffers, the
distributed norm taking sharded inputs too, and a TILE copy of the weight where ttnn's interleaved `rms_norm` cannot
hold a ROW_MAJOR one in a core's L1 (8192 wide on one device). docs/migrating-from-tt-metal.md maps every argument.
"""

from tt_rmsnorm.compat.rmsnorm import RMSNorm, SimpleRMSNorm
from tt_rmsnorm.compat.tt_transformers import DistributedNorm
from tt_rmsnorm.compat.tt_transformers_ccl import tt_distributed_rmsnorm, tt_sharded_distributed_rmsnorm

__all__ = ["DistributedNorm", "RMSNorm", "SimpleRMSNorm", "tt_distributed_rmsnorm", "tt_sharded_distributed_rmsnorm"]
