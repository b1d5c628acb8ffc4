"""The fused all-reduce + residual + RMSNorm + FP8: the API in api.py (AllReduceRMSNormFP8, the reference and NCCL
paths), the device side in the other modules (kernels.py says which holds what)."""
