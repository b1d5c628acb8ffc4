"""Device side of the fused all-reduce + residual + RMSNorm + FP8 (programs/triton/allreduce_rmsnorm.py is the API)."""
