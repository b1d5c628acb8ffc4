"""The signature of a call: everything its plan depends on, so that two calls with one signature run one plan and a
call that changes anything its plan reads is planned and checked again.

A plan (the path, its configs, the checked rules, the ttnn arguments bound once and the persistent buffers) is made
from a call's arguments and, for a module, from the module's own attributes. `Signature` holds all of them:

- the mesh, the CCL object and the weight, by identity (the signature holds them, so no other object can take their
  identity while it lives); the modules whose attributes a module's plan binds, by identity (setting an attribute of
  one forgets its plans: `tt_rmsnorm.plan_cache`);
- x and the residual by spec and storage (a spec compares by content and hashes by identity, so it is compared and
  not hashed; reading it costs a fraction of a microsecond, a shape several);
- every other keyword by value, a ttnn config by the fields the rules read (configs are mutable and hash by identity).

A Signature is made by one function, `signature`, from the call's own parameters: each entry point passes its
parameters under the field of the same name (`PARAMETER_FIELDS` maps the few that a caller names otherwise), so that
a test can hold every entry point's parameters to the fields (`NOT_IN_SIGNATURE` lists, with the reason, those that
cannot change a plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ttnn

# How a field is compared: the object itself (`is`), a tensor by (spec, storage), a ttnn config by its fields; any
# other field by value.
IDENTITY = "identity"
TENSOR = "tensor"
CONFIG = "config"
VALUE = "value"


def _field(compare: str = VALUE, default=None):
    return field(default=default, metadata={"compare": compare})


# Parameter names of the entry points that differ from the field they fill: `w` (the function's weight), tt-metal's
# `res` (the Galaxy decoder's residual), and a module's `self` (its modules).
PARAMETER_FIELDS = {"w": "weight", "res": "residual", "self": "modules"}

# Entry-point parameters that are not part of any plan, with the reason.
NOT_IN_SIGNATURE: dict[str, str] = {}


def config_key(cfg):
    """The fields of a ttnn config that the rules read, as a hashable tuple (the configs hash by identity and are
    mutable); a config of another type by its identity (the signature holds it)."""
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


@dataclass(init=False, eq=False, slots=True)
class Signature:
    """Everything a plan depends on. Equal signatures run one plan; `hash` reads every field but the tensor specs."""

    mesh_device: object = _field(IDENTITY)
    modules: tuple = _field(IDENTITY, ())  # each by identity: the modules whose attributes the plan binds
    mode: object = _field()
    distributed: object = _field()  # a module's `is_distributed(mode)`, asked every call
    in_sharded: object = _field()
    out_sharded: object = _field()
    x: tuple = _field(TENSOR)
    weight: object = _field(IDENTITY)
    residual: tuple | None = _field(TENSOR)
    epsilon: object = _field()
    cluster_axis: object = _field()
    memory_config: object = _field()
    compute_kernel_config: object = _field(CONFIG)
    program_config: object = _field(CONFIG)
    dtype: object = _field()
    sharded: object = _field()
    path: object = _field()
    ccl: object = _field(IDENTITY)
    _key: tuple = field(default=(), repr=False, metadata={"compare": None})
    _hash: int | None = field(default=None, repr=False, metadata={"compare": None})

    def __eq__(self, other):
        return type(other) is Signature and self._key == other._key

    def __hash__(self):
        """The hash of every field but the tensor specs (they hash by identity). Raises TypeError where a value field
        does not hash: such a call is planned every time (`tt_rmsnorm.plan_cache`)."""
        if self._hash is None:
            self._hash = hash(self._key[:-2])
        return self._hash

    def holds(self, obj) -> bool:
        """Whether the signature names `obj` by identity (its mesh, CCL object, weight or one of its modules)."""
        return obj is self.mesh_device or obj is self.ccl or obj is self.weight or any(m is obj for m in self.modules)


_new = object.__new__


def signature(
    *,
    mesh_device,
    x,
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
) -> Signature:
    """The signature of a call of these arguments (x and the residual are the call's tensors): the one function that
    makes a `Signature`, called by every entry point with its own parameters under the fields' names. A function, not
    the class's constructor: Python binds keywords to a function without building a dict of them."""
    made = _new(Signature)
    made.mesh_device = mesh_device
    made.modules = modules
    made.mode = mode
    made.distributed = distributed
    made.in_sharded = in_sharded
    made.out_sharded = out_sharded
    made.x = x_signature = tensor_signature(x) or (None, None)
    made.weight = weight
    made.residual = r_signature = None if residual is None else tensor_signature(residual)
    made.epsilon = epsilon
    made.cluster_axis = cluster_axis
    made.memory_config = memory_config
    made.compute_kernel_config = compute_kernel_config
    made.program_config = program_config
    made.dtype = dtype
    made.sharded = sharded
    made.path = path
    made.ccl = ccl
    # the specs come last: they are compared, and left out of the hash
    made._key = (
        id(mesh_device),
        tuple(map(id, modules)) if modules else (),
        mode,
        distributed,
        in_sharded,
        out_sharded,
        x_signature[1],
        id(weight),
        None if r_signature is None else r_signature[1],
        epsilon,
        cluster_axis,
        memory_config,
        None if compute_kernel_config is None else config_key(compute_kernel_config),
        None if program_config is None else config_key(program_config),
        dtype,
        sharded,
        path,
        id(ccl),
        x_signature[0],
        None if r_signature is None else r_signature[0],
    )
    made._hash = None
    return made
