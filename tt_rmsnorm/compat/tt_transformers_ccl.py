"""tt_transformers' distributed norm functions (models/tt_transformers/tt/ccl.py), keyword for keyword, run through the
package: `tt_distributed_rmsnorm` (pre -> stats gather over the mesh columns -> post, prefill) and
`tt_sharded_distributed_rmsnorm` (the input moved onto a width-sharded decode grid, then the same with the sharded
program config). A model file imports them from here:

    from tt_rmsnorm.compat.tt_transformers_ccl import tt_distributed_rmsnorm, tt_sharded_distributed_rmsnorm

Both take every signature tt-metal's model families have given them: without a CCL object (the stats gathered by
`ttnn.all_gather`), with the model's CCL object before the configs, and with `num_links`. A call is planned and checked
once per signature (`tt_rmsnorm.signature`), every op it issues (the move included) before the first runs, then makes
only its ttnn calls, as tt-metal's functions issue them.
"""

from __future__ import annotations

from dataclasses import replace

import ttnn

from tt_rmsnorm import ccl, distributed
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.plan_cache import PLANS
from tt_rmsnorm.planned_module import BoundCall
from tt_rmsnorm.rules import sharding
from tt_rmsnorm.signature import Held, Signature, signature
from tt_rmsnorm.tensors import describe

_AXIS = 1  # both functions gather the stats over the mesh columns
_SHARDED = "tt_sharded_distributed_rmsnorm"


def _resources(tt_ccl, mesh_device, num_links):
    """The CCL resources of the stats gather: the model's CCL object adopted on the columns with the Linear topology
    tt-metal's functions gather with (its cycled handles; its links unless `num_links` is given); None without one
    (the stats go through ttnn.all_gather)."""
    if tt_ccl is None:
        if num_links is not None:
            raise RuleError(
                "compat.num_links",
                "num_links sets the links of the model CCL object's gather; without tt_ccl the stats go through "
                "ttnn.all_gather, which picks its own",
                f"num_links={num_links}, tt_ccl=None",
                "pass the model's tt_ccl, or drop num_links",
            )
        return None
    return ccl.resources_for(tt_ccl, mesh_device, _AXIS, topology=ttnn.Topology.Linear, num_links=num_links)


def tt_distributed_rmsnorm(inp, epsilon, gamma, mesh_device, tt_ccl=None, compute_kernel_config=None, num_links=None):
    """RMSNorm of `inp` [1, 1, S, H/n] fractured over the mesh columns, as tt_transformers' function computes it.

    inp: the activation, each device's slice of the hidden dim.
    epsilon: added to the mean of squares.
    gamma: the weight, each device's slice (ROW_MAJOR [1, 1, H/n/32, 32], as RMSNorm.weight_distributed).
    mesh_device: the mesh.
    tt_ccl: the model's CCL object, whose cycled semaphores and links serve the stats gather (all_gather_async over
        the columns, trace-safe); None, or the older signature `(inp, epsilon, gamma, mesh_device,
        compute_kernel_config)`: the stats go through ttnn.all_gather.
    compute_kernel_config: the pre's and post's.
    num_links: the gather's links (None: the CCL object's for the columns).
    Returns the output, each device's slice.
    """
    if isinstance(tt_ccl, ttnn.WormholeComputeKernelConfig) and compute_kernel_config is None:
        tt_ccl, compute_kernel_config = None, tt_ccl  # the older signature: the config fifth, no CCL object
    resources = _resources(tt_ccl, mesh_device, num_links)
    return distributed.planned_call(
        inp,
        gamma,
        mesh_device,
        epsilon=epsilon,
        cluster_axis=_AXIS,
        compute_kernel_config=compute_kernel_config,
        sharded=False,
        path="classic" if resources is None else "async",
        ccl=resources,
    ).run(inp, gamma, None)


def tt_sharded_distributed_rmsnorm(
    inp,
    epsilon,
    gamma,
    mesh_device,
    tt_ccl=None,
    ln_sharded_input_memcfg=None,
    ln_sharded_progcfg=None,
    ln_sharded_stats_memcfg=None,
    num_links=None,
):
    """RMSNorm of a decode input fractured over the mesh columns on a width-sharded grid, as tt_transformers'
    function computes it: the input moved onto the grid, the sharded pre, the stats gathered over the columns into
    `ln_sharded_stats_memcfg`, the sharded post.

    inp: the activation, each device's slice of the hidden dim, one tile row high.
    epsilon: added to the mean of squares.
    gamma: the weight, each device's slice (ROW_MAJOR).
    mesh_device: the mesh.
    tt_ccl: the model's CCL object (all_gather_async with its cycled handles); None, or the older signature `(inp,
        epsilon, gamma, mesh_device, ln_sharded_input_memcfg, ln_sharded_progcfg, ln_sharded_stats_memcfg)`:
        ttnn.all_gather.
    ln_sharded_input_memcfg: the width-sharded L1 config the input is moved into.
    ln_sharded_progcfg: the LayerNormShardedMultiCoreProgramConfig of that grid.
    ln_sharded_stats_memcfg: where the stats are gathered (one core's L1).
    num_links: the gather's links (None: the CCL object's for the columns).
    Returns the output, on the input's grid.
    """
    if isinstance(tt_ccl, ttnn.MemoryConfig):  # the older signature: no CCL object, the configs from the fifth on
        tt_ccl, ln_sharded_input_memcfg, ln_sharded_progcfg, ln_sharded_stats_memcfg = (
            None,
            tt_ccl,
            ln_sharded_input_memcfg,
            ln_sharded_progcfg,
        )
    called, held = signature(
        mesh_device=mesh_device,
        entry=_SHARDED,
        x=inp,
        weight=gamma,
        epsilon=epsilon,
        program_config=ln_sharded_progcfg,
        ccl=_resources(tt_ccl, mesh_device, num_links),
        input_memory_config=ln_sharded_input_memcfg,
        stats_memory_config=ln_sharded_stats_memcfg,
    )
    call = PLANS.planned(called, held, _plan_sharded, inp, None)
    return call.run(inp, gamma, None)


def _plan_sharded(called: Signature, held: Held, x, residual) -> BoundCall:
    """The move onto the decode grid and the sharded pre -> gather -> post, every rule checked before any runs."""
    distributed.check_tensors(x, held.weight)
    input_mc = called.input_memory_config
    if input_mc is None or held.program_config is None:
        raise RuleError(
            "compat.sharded_configs",
            "tt_sharded_distributed_rmsnorm runs on the width-sharded grid its configs name",
            f"ln_sharded_input_memcfg={input_mc}, ln_sharded_progcfg={held.program_config}",
            "pass the decode input's sharded memory config and its LayerNormShardedMultiCoreProgramConfig",
        )
    x = describe(x)
    move = x.memory_config != input_mc
    if move:
        sharding.check_move(x, input_mc)
        x = replace(x, memory_config=input_mc)
    plan = distributed.plan_described(
        held.mesh_device,
        x,
        describe(held.weight),
        None,
        epsilon=called.epsilon,
        cluster_axis=_AXIS,
        program_config=held.program_config,
        path="classic" if held.ccl is None else "async",
        ccl=held.ccl,
        stats_memory_config=called.stats_memory_config,
    )
    if not move:
        return BoundCall(plan.run, held.weight, plan, plan.output_desc(x))
    run = plan.run

    def moved(x, w, residual):
        return run(route()(ttnn.to_memory_config)(x, input_mc), w, None)

    return BoundCall(moved, held.weight, plan, plan.output_desc(x))
