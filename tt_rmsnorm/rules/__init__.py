"""The rules of ttnn's distributed RMSNorm ops, checked on tensor descriptions before any device work.

Every violation raises `tt_rmsnorm.errors.RuleError` naming the rule id, the value seen and the fix. By concern:

- `table`: every rule id (`RULES`) and the guards ttnn lacks (`PACKAGE_ONLY_RULES`);
- `op_checks`: one entry point per op (`check_pre_all_gather`, `check_post_all_gather`, `check_rms_norm`,
  `check_all_gather`), each running the steps below in ttnn's order;
- `ccl_checks`: `all_gather_async` and `fused_rms_minimal` (the tensors they produce: `tt_rmsnorm.op_outputs`);
- `common`: the checks every op shares (device, layout, rank, dtype, width, epsilon, compute kernel config);
- `sharding`: sharded inputs, program and output memory configs, the sharded factory's stats reduce;
- `operands`: the residual, the gathered stats, the weight and the bias;
- `l1_budget`: the L1 models of the norm factories and the `*.l1_budget` rules;
- `ccl_l1`: the L1 of the CCL ops.
"""
