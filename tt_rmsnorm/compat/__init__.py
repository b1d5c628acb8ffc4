"""tt-metal's norm modules, keyword for keyword: `RMSNorm` (models/common/rmsnorm.py) and `DistributedNorm`
(models/tt_transformers/tt/distributed_norm.py). A model file changes its import line and keeps every call:

    from tt_rmsnorm.compat import DistributedNorm, RMSNorm

Behind the same signatures the calls go through the package: every rule checked before device work, the model's
CCL object (tt-metal's TT_CCL) adopted so that gathers use its cycled semaphores and persistent stats buffers, the
distributed norm taking sharded inputs too, and a TILE copy of the weight where ttnn's interleaved `rms_norm` cannot
hold a ROW_MAJOR one in a core's L1 (8192 wide on one device). docs/migrating-from-tt-metal.md maps every argument.
"""

from tt_rmsnorm.compat.rmsnorm import RMSNorm
from tt_rmsnorm.compat.tt_transformers import DistributedNorm

__all__ = ["DistributedNorm", "RMSNorm"]
