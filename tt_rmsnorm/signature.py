"""The signature of a call: everything its plan depends on, so that two calls with one signature run one plan and a
call that changes anything its plan reads is planned and checked again.

A plan (the path, its configs, the checked rules, the ttnn arguments bound once and the persistent buffers) is made
from a call's arguments and, for a module, from the module's own attributes. `Signature` holds all of them:

- the mesh, the CCL object and the weight by identity, and the modules whose attributes a module's plan binds
  (setting an attribute of one forgets its plans: `tt_rmsnorm.plan_cache`): the signature holds their `id`s, and the
  objects themselves go with it (`Held`) into the cache, so that no other object takes one of those ids while the
  plan lives;
- x and the residual by (spec, storage): a spec compares by content and hashes by identity, so these two fields are
  compared and left out of the hash; reading a spec costs a fraction of a microsecond, a shape several;
- every other keyword by value, a ttnn config by the fields the rules read (configs are mutable and hash by identity).

A Signature is a tuple: comparing two, the check a repeated call makes, runs in C. It is made by one function,
`signature`, from the call's own parameters: each entry point passes its parameters under the field of the same name
(`PARAMETER_FIELDS` maps the few that a caller names otherwise), so that a test can hold every entry point's
parameters to the fields (`NOT_IN_SIGNATURE` lists, with the reason, those that cannot change a plan).
"""

from __future__ import annotations

from typing import NamedTuple

import ttnn

# How a field is compared: the object's identity, a tensor by (spec, storage), a ttnn config by its fields; any other
# field by value.
IDENTITY = "identity"
TENSOR = "tensor"
CONFIG = "config"
VALUE = "value"

# Parameter names of the entry points that differ from the field they fill: `w` (the function's weight), a module's
# `self` (its modules), and tt-metal's names (`res`, and tt_transformers' ccl.py functions' `inp`, `gamma`, `tt_ccl` and
# configs).
PARAMETER_FIELDS = {
    "w": "weight",
    "self": "modules",
    "res": "residual",
    "inp": "x",
    "gamma": "weight",
    "tt_ccl": "ccl",
    "ln_sharded_progcfg": "program_config",
    "ln_sharded_input_memcfg": "input_memory_config",
    "ln_sharded_stats_memcfg": "stats_memory_config",
}

# Entry-point parameters that are not fields of a signature, with where the plan's dependence on them goes.
NOT_IN_SIGNATURE: dict[str, str] = {
    "num_links": "the links of the CCL resources adopted for the call: one resources object per CCL object, axis, "
    "topology and link count, by identity in the ccl field",
    "norm_config": "its sharded_program_config and sharded_output_config are the call's program config and output "
    "memory config, in those fields",
}


def config_key(cfg):
    """The fields of a ttnn config that the rules read, as a hashable tuple (the configs hash by identity and are
    mutable); a config of another type by its identity (the signature's `Held` keeps the object)."""
    if cfg is None:
        return None
    if isinstance(cfg, ttnn.LayerNormShardedMultiCoreProgramConfig):
        g = cfg.compute_with_storage_grid_size
        return ("sharded", g.x, g.y, cfg.subblock_w, cfg.block_h, cfg.block_w, cfg.inplace, cfg.use_welford)
    if isinstance(cfg, ttnn.LayerNormDefaultProgramConfig):
        return ("default", cfg.legacy_reduction, cfg.use_welford)
    if isinstance(cfg, ttnn.WormholeComputeKernelConfig):
        return (
            "compute",
            cfg.math_fidelity,
            cfg.math_approx_mode,
            cfg.fp32_dest_acc_en,
            cfg.packer_l1_acc,
            cfg.dst_full_sync_en,
        )
    return ("object", id(cfg))


def tensor_signature(t):
    """A tensor's (spec, storage); (None, None) for what is not a ttnn tensor (its plan refuses it), None for no
    tensor."""
    if t is None:
        return None
    spec = getattr(t, "spec", None)
    return (spec, None if spec is None else t.storage_type())


class Signature(NamedTuple):
    """Everything a plan depends on, `COMPARE` saying how each field is compared. Equal signatures run one plan."""

    mesh_device: int
    entry: object  # the entry point whose call it is, where it plans other ops than distributed_rms_norm's
    modules: tuple  # the modules whose attributes the plan binds
    mode: object
    distributed: object  # a module's `is_distributed(mode)`, asked every call
    in_sharded: object
    out_sharded: object
    weight: int
    epsilon: object
    cluster_axis: object
    memory_config: object
    compute_kernel_config: object
    program_config: object
    dtype: object
    sharded: object
    path: object
    ccl: int
    input_memory_config: object  # where the call moves x before the norm
    stats_memory_config: object  # where the call gathers the stats
    x: tuple  # the tensors come last: their specs are compared, and left out of the hash
    residual: tuple | None

    def __hash__(self):
        """The hash of every field but the tensors'. Raises TypeError where a value field does not hash: such a call
        is planned every time (`tt_rmsnorm.plan_cache`)."""
        return hash(self[:-2])


COMPARE = {
    "mesh_device": IDENTITY,
    "entry": VALUE,
    "modules": IDENTITY,
    "mode": VALUE,
    "distributed": VALUE,
    "in_sharded": VALUE,
    "out_sharded": VALUE,
    "weight": IDENTITY,
    "epsilon": VALUE,
    "cluster_axis": VALUE,
    "memory_config": VALUE,
    "compute_kernel_config": CONFIG,
    "program_config": CONFIG,
    "dtype": VALUE,
    "sharded": VALUE,
    "path": VALUE,
    "ccl": IDENTITY,
    "input_memory_config": VALUE,
    "stats_memory_config": VALUE,
    "x": TENSOR,
    "residual": TENSOR,
}


class Held(NamedTuple):
    """The objects a signature names by identity or by their fields (the configs), kept with its plan and handed to
    the function that makes it: the cache forgets a plan by the objects it binds."""

    mesh_device: object
    modules: tuple
    weight: object
    ccl: object
    compute_kernel_config: object
    program_config: object

    def __contains__(self, obj) -> bool:
        """Whether the plan binds `obj`: its mesh, weight, CCL object or a module whose attributes it read (the
        configs are read by their fields, which the signature compares)."""
        return obj is self.mesh_device or obj is self.weight or obj is self.ccl or any(m is obj for m in self.modules)


_make = tuple.__new__


def signature(
    *,
    mesh_device,
    x,
    entry=None,
    modules=(),
    mode=None,
    distributed=None,
    in_sharded=None,
    out_sharded=None,
    weight=None,
    residual=None,
    epsilon=None,
    cluster_axis=None,
    memory_config=None,
    compute_kernel_config=None,
    program_config=None,
    dtype=None,
    sharded=None,
    path=None,
    ccl=None,
    input_memory_config=None,
    stats_memory_config=None,
) -> tuple[Signature, Held]:
    """The signature of a call of these arguments (x and the residual are the call's tensors) and the objects it names
    by identity: the one function that makes a `Signature`, called by every entry point with its own parameters under
    the fields' names."""
    spec = getattr(x, "spec", None)  # tensor_signature(x), written out: every call makes a signature
    key = (
        id(mesh_device),
        entry,
        tuple(map(id, modules)) if modules else (),
        mode,
        distributed,
        in_sharded,
        out_sharded,
        id(weight),
        epsilon,
        cluster_axis,
        memory_config,
        None if compute_kernel_config is None else config_key(compute_kernel_config),
        None if program_config is None else config_key(program_config),
        dtype,
        sharded,
        path,
        id(ccl),
        input_memory_config,
        stats_memory_config,
        (spec, None if spec is None else x.storage_type()),
        None if residual is None else tensor_signature(residual),
    )
    held = (mesh_device, modules, weight, ccl, compute_kernel_config, program_config)
    return _make(Signature, key), _make(Held, held)
