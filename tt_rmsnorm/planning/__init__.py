"""From a call to the ttnn ops it runs, decided without a device.

- `planner`: `plan_call`, the plan a call signature gets (layout, path, configs, persistent buffers), checked in full;
- `paths`: the execution paths (`classic`, `async`, `fused`, `local`), one plan class each, and how a call picks one;
- `layouts`: the interleaved and sharded layouts: program, memory and compute-kernel configs from shape and grid.
"""
