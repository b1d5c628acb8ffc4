"""The four ways a distributed RMSNorm reaches ttnn, each a small plan that describes, checks and runs itself.

| path    | ttnn calls                                                        | used for                               |
|---------|-------------------------------------------------------------------|----------------------------------------|
| classic | rms_norm_pre_all_gather -> all_gather -> rms_norm_post_all_gather | eager calls with no CCL resources      |
| async   | pre -> experimental.all_gather_async (cycled semaphores) -> post  | prefill; any call that may be traced   |
| fused   | fused_rms_minimal (pre + stats gather + post + residual, one op)  | decode (one tile row), CCL resources   |
| local   | rms_norm                                                          | one device on the gather axis          |

With a residual every path writes x + residual into the residual tensor, in place, normalizes that sum and returns
(output, residual); x is never written. The fused op and the sharded pre add in place themselves (the sharded pre
over its input's shards, so the residual goes in as its input); the interleaved paths add with `ttnn.add` into the
residual; where a path moves the tensors to L1 first, the sum is copied back into the caller's residual.

A plan is built once per call signature (`tt_rmsnorm.signature`): `check` runs every rule of every op it will call on
device-free descriptions of the tensors those ops will see, before any device work; `run` then makes only the ttnn
calls, with their arguments bound at planning time, each through the function ttnn's op wrapper calls where the
wrapper would do nothing else (`tt_rmsnorm.direct_calls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import ttnn

from tt_rmsnorm import ccl, op_outputs
from tt_rmsnorm.direct_calls import route
from tt_rmsnorm.errors import RuleError
from tt_rmsnorm.planning.layouts import NormPlan
from tt_rmsnorm.rules import ccl_checks, op_checks, operands, sharding
from tt_rmsnorm.tensors import TensorDesc
from tt_rmsnorm.tiles import one_tile_row


def add_into(x, residual, via):
    """x + residual written over `residual`: the residual contract of every path (the sum is the residual stream)."""
    return via(ttnn.add)(x, residual, output_tensor=residual)


PATHS = ("classic", "async", "fused", "local")


@dataclass(frozen=True)
class Call:
    """What a call fixes besides its tensors: the arguments every path passes on."""

    epsilon: float
    dtype: object = None  # output dtype (None: the input's)
    memory_config: object = None  # output memory config (None: the input's)
    cluster_axis: int | None = None
    num_devices: int = 1
    mesh_shape: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class PathPlan:
    """A path with everything bound: `norm` holds the program, memory and compute configs of the layout."""

    name: str
    reason: str
    norm: NormPlan
    call: Call
    mesh_device: object = field(repr=False, compare=False)
    compute_grid: tuple[int, int] = (8, 8)
    ccl: object = field(default=None, repr=False, compare=False)
    x_memory_config: object = None  # x's own memory config: the returned residual stream goes back there
    written_memory_config: object = None  # where a sharded op writes its output
    move_output: object = None  # where the output is moved after the norm (None: it stays where the op wrote it)
    gathered: object = field(default=None, repr=False, compare=False)  # persistent all_gather_async output
    fused_stats: object = field(default=None, repr=False, compare=False)  # stats buffer of fused_rms_minimal

    def __post_init__(self):
        # the keyword arguments of every ttnn call, bound once: a planned call only looks them up
        object.__setattr__(self, "kw", self.bind())

    def bind(self) -> dict:
        """The per-call keyword arguments of each ttnn call of the path, by call."""
        return {}

    @property
    def _num_links(self) -> int:
        return self.ccl.links.num_links if self.ccl is not None else 1

    @property
    def sharded(self) -> bool:
        return self.norm.layout == "sharded"

    def describe(self) -> str:
        where = f"{self.call.num_devices} device(s) on axis {self.call.cluster_axis}"
        return f"{self.name} ({self.reason}); {where}; {self.norm.describe()}"

    # -- what the ops will see -------------------------------------------------------------------------------------

    def input_desc(self, x: TensorDesc) -> TensorDesc:
        """x as the first op receives it (moved to the plan's L1 shards where the plan says so)."""
        if self.norm.input_memory_config is None:
            return x
        return replace(x, memory_config=self.norm.input_memory_config)

    def local_stats_desc(self, x: TensorDesc) -> TensorDesc:
        """One device's stats as the pre writes them: sums in DRAM (interleaved), means on one core (sharded)."""
        return op_outputs.pre_stats_desc(self.input_desc(x))

    def stats_desc(self, x: TensorDesc) -> TensorDesc:
        """The gathered stats the post receives: one 32-wide tile per device on the gather axis."""
        return op_outputs.gathered_desc(
            self.local_stats_desc(x), 3, self.call.num_devices, self.norm.stats_memory_config
        )

    def output_desc(self, x: TensorDesc) -> TensorDesc:
        """The output as the caller receives it: x's shape in the output dtype, where the path leaves it."""
        where = (self.move_output, self.written_memory_config, self.call.memory_config, x.memory_config)
        memory_config = next(mc for mc in where if mc is not None)
        return replace(x, dtype=self.call.dtype or x.dtype, memory_config=memory_config, stats_kind=None)

    def semaphores(self):
        """(gather, barrier, fused) semaphore descriptions: the resources' own, or as `CCLResources` creates them."""
        return ccl.semaphore_descs(self.ccl, self.compute_grid)

    def check(self, x: TensorDesc, w: TensorDesc | None, residual: TensorDesc | None) -> None:
        raise NotImplementedError

    def run(self, x, w, residual):
        raise NotImplementedError

    # -- shared pieces of the pre -> gather -> post paths ------------------------------------------------------------

    def _check_pre_post(self, x, w, residual, grid) -> None:
        # The tensors each op receives (`run`): with a residual the sum lands in the residual, so the residual is the
        # pre's and the post's input, and the sharded pre adds x to it.
        if residual is not None:
            operands.check_residual(x, residual)
        h = self.input_desc(x if residual is None else residual)
        pre_residual = self.input_desc(x) if residual is not None and self.sharded else None
        pc, ck = self.norm.program_config, self.norm.compute_kernel_config
        op_checks.check_pre_all_gather(
            h,
            dtype=ttnn.bfloat16,
            residual_input_tensor=pre_residual,
            compute_kernel_config=ck,
            program_config=pc,
            compute_grid=grid,
        )
        op_checks.check_post_all_gather(
            h,
            self.stats_desc(x),
            epsilon=self.call.epsilon,
            weight=w,
            compute_kernel_config=ck,
            program_config=pc,
            dtype=self.call.dtype,
            memory_config=None if self.sharded else self.call.memory_config,
            compute_grid=grid,
        )
        target = self.call.memory_config
        if target is not None and self.sharded and target.is_sharded():
            sharding.check_output_memory_config(h, target)


class GatherPath(PathPlan):
    """pre -> a stats gather -> post; the subclasses differ in the gather."""

    def check(self, x, w, residual):
        self._check_pre_post(x, w, residual, self.compute_grid)
        self._check_gather(self.local_stats_desc(x))

    def bind(self) -> dict:
        norm, call = self.norm, self.call
        configs = {"compute_kernel_config": norm.compute_kernel_config, "program_config": norm.program_config}
        post = {"epsilon": call.epsilon, **configs}
        if call.dtype is not None:
            post["dtype"] = call.dtype
        if not self.sharded and call.memory_config is not None:
            post["memory_config"] = call.memory_config
        to_l1 = norm.input_memory_config if self.sharded else None
        return {"pre": {"dtype": ttnn.bfloat16, **configs}, "post": post, "gather": self.gather_kw(), "to_l1": to_l1}

    def run(self, x, w, residual):
        kw = self.kw
        to_l1 = kw["to_l1"]
        via = route()
        if not self.sharded:  # the interleaved post normalizes its input: it must be given x + residual itself
            h = x if residual is None else add_into(x, residual, via)
            stats = via(ttnn.rms_norm_pre_all_gather)(h, **kw["pre"])
        elif residual is None:
            h = x if to_l1 is None else via(ttnn.to_memory_config)(x, to_l1)
            stats = via(ttnn.rms_norm_pre_all_gather)(h, **kw["pre"])
        else:  # the sharded pre writes input + residual_input over its input's shards: the residual's, so x is kept
            h = residual if to_l1 is None else via(ttnn.to_memory_config)(residual, to_l1)
            xs = x if to_l1 is None else via(ttnn.to_memory_config)(x, to_l1)
            stats = via(ttnn.rms_norm_pre_all_gather)(h, residual_input_tensor=xs, **kw["pre"])
        stats = self.gather(stats, via)
        if w is None:
            out = via(ttnn.rms_norm_post_all_gather)(h, stats, **kw["post"])
        else:
            out = via(ttnn.rms_norm_post_all_gather)(h, stats, weight=w, **kw["post"])
        if self.move_output is not None:
            out = via(ttnn.to_memory_config)(out, self.move_output)
        if residual is None:
            return out
        if self.sharded and to_l1 is not None:  # the sum was written over the moved copy: into the caller's residual
            via(ttnn.copy)(via(ttnn.to_memory_config)(h, self.x_memory_config), residual)
        return out, residual


@dataclass(frozen=True)
class ClassicPath(GatherPath):
    """pre -> ttnn.all_gather -> post. Not trace-safe on T3000 (tt-metal #48469): the all_gather barrier is set up at
    capture only."""

    def _check_gather(self, stats):
        op_checks.check_all_gather(
            stats,
            3,
            cluster_axis=self.call.cluster_axis,
            mesh_shape=self.call.mesh_shape,
            memory_config=self.norm.stats_memory_config,
        )

    def gather_kw(self) -> dict:
        return {"cluster_axis": self.call.cluster_axis, "memory_config": self.norm.stats_memory_config}

    def gather(self, stats, via):
        return via(ttnn.all_gather)(stats, 3, **self.kw["gather"])


@dataclass(frozen=True)
class AsyncPath(GatherPath):
    """pre -> ttnn.experimental.all_gather_async into a persistent buffer, with the CCL resources' cycled semaphores
    and barrier -> post: what tt-metal models run under trace."""

    def _check_gather(self, stats):
        gather, barrier, _ = self.semaphores()
        ccl_checks.check_all_gather_async(
            stats,
            3,
            multi_device_global_semaphore=gather,
            barrier_semaphore=barrier,
            cluster_axis=self.call.cluster_axis,
            mesh_shape=self.call.mesh_shape,
            memory_config=self.norm.stats_memory_config,
            persistent_output_buffer=self.gathered,
            num_links=self._num_links,
            compute_grid=self.compute_grid,
        )

    def gather_kw(self) -> dict:
        return {
            "dim": 3,
            "cluster_axis": self.call.cluster_axis,
            "mesh_device": self.mesh_device,
            "topology": self.ccl.links.topology if self.ccl is not None else None,
            "num_links": self._num_links,
            "memory_config": self.norm.stats_memory_config,
            "persistent_output_tensor": self.gathered,
        }

    def gather(self, stats, via):
        semaphores, barrier = self.ccl.next_gather()
        return via(ttnn.experimental.all_gather_async)(
            stats, multi_device_global_semaphore=semaphores, barrier_semaphore=barrier, **self.kw["gather"]
        )


@dataclass(frozen=True)
class LocalPath(PathPlan):
    """ttnn.rms_norm: one device on the gather axis, so there is nothing to gather (traced on a Blackhole submesh,
    tt-metal PR #54530 measured 67 us against 183 us for the pre/post pair). With a residual, x + residual is added
    first so that the sum can be returned as the next residual stream."""

    def check(self, x, w, residual):
        if residual is not None:
            operands.check_residual(x, residual)
        op_checks.check_rms_norm(
            x,
            epsilon=self.call.epsilon,
            weight=w,
            memory_config=self.call.memory_config,
            program_config=self.norm.program_config,
            compute_kernel_config=self.norm.compute_kernel_config,
            compute_grid=self.compute_grid,
        )

    def bind(self) -> dict:
        kw = {
            "epsilon": self.call.epsilon,
            "program_config": self.norm.program_config,
            "compute_kernel_config": self.norm.compute_kernel_config,
        }
        if self.call.memory_config is not None:
            kw["memory_config"] = self.call.memory_config
        return kw

    def run(self, x, w, residual):
        via = route()
        if residual is not None:
            x = add_into(x, residual, via)
        rms_norm = via(ttnn.rms_norm)
        out = rms_norm(x, **self.kw) if w is None else rms_norm(x, weight=w, **self.kw)
        return out if residual is None else (out, residual)


@dataclass(frozen=True)
class FusedPath(PathPlan):
    """ttnn.fused_rms_minimal: pre, the stats gather and post (and the residual add, written back over the residual)
    in one program on the width-sharded decode input, as tt-metal's Galaxy decode runs it."""

    def check(self, x, w, residual):
        h = self.input_desc(x)
        res = None if residual is None else self.input_desc(residual)
        if residual is not None:
            operands.check_residual(x, residual)
        ccl_checks.check_fused_rms_minimal(
            h,
            self.norm.program_config,
            self.call.cluster_axis,
            self.call.mesh_shape,
            self.semaphores()[2],
            weight=w,
            stats=self.fused_stats,
            residual_input_tensor=res,
            memory_config=self.written_memory_config,
            dtype=self.call.dtype,
            compute_kernel_config=self.norm.compute_kernel_config,
            num_links=self._num_links,
        )

    def bind(self) -> dict:
        kw = {
            "num_links": self._num_links,
            "topology": self.ccl.links.topology if self.ccl is not None else None,
            "compute_kernel_config": self.norm.compute_kernel_config,
            "memory_config": self.written_memory_config,
            "epsilon": self.call.epsilon,
            "stats": self.fused_stats,
        }
        if self.call.dtype is not None:
            kw["dtype"] = self.call.dtype
        return kw

    def run(self, x, w, residual):
        norm = self.norm
        to_l1 = norm.input_memory_config
        via = route()
        h = x if to_l1 is None else via(ttnn.to_memory_config)(x, to_l1)
        moved = residual if residual is None or to_l1 is None else via(ttnn.to_memory_config)(residual, to_l1)
        # no residual keyword at all without a residual: ttnn spends microseconds on an explicit None
        extra = {} if moved is None else {"residual_input_tensor": moved}
        out = via(ttnn.fused_rms_minimal)(
            h,
            norm.program_config,
            self.call.cluster_axis,
            self.mesh_device,
            self.ccl.next_fused(),
            weight=w,
            **extra,
            **self.kw,
        )
        if self.move_output is not None:
            out = via(ttnn.to_memory_config)(out, self.move_output)
        if residual is None:
            return out
        if to_l1 is not None:  # the sum was written over the moved copy: into the caller's residual
            via(ttnn.copy)(via(ttnn.to_memory_config)(moved, self.x_memory_config), residual)
        return out, residual


@dataclass(frozen=True)
class RankView:
    """A rank-3 activation [B, S, H/n] on a path whose ops take rank 4 (the pre and post index dim 3, the fused op
    takes (1, 1, M, N)): the path runs on the view [1, B, S, H/n] and the output is viewed back. `ttnn.reshape` of the
    leading dims of a tiled tensor is a view of the same buffer, so the residual stream the path writes is the
    caller's own."""

    plan: PathPlan
    shape: tuple[int, ...]  # the caller's rank-3 shape

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def norm(self) -> NormPlan:
        return self.plan.norm

    @property
    def call(self) -> Call:
        return self.plan.call

    def describe(self) -> str:
        return f"{self.plan.describe()}; rank-3 input {list(self.shape)} viewed as rank 4"

    def output_desc(self, x: TensorDesc) -> TensorDesc:
        return replace(self.plan.output_desc(rank4(x)), shape=x.shape, padded_shape=x.padded_shape)

    def run(self, x, w, residual):
        reshape = route()(ttnn.reshape)
        four = (1, *self.shape)
        out = self.plan.run(reshape(x, four), w, None if residual is None else reshape(residual, four))
        if residual is None:
            return reshape(out, self.shape)
        return reshape(out[0], self.shape), residual


def rank4(t: TensorDesc | None) -> TensorDesc | None:
    """A rank-3 description viewed as rank 4 (a leading 1); any other as it is."""
    if t is None or t.rank != 3:
        return t
    return replace(t, shape=(1, *t.shape), padded_shape=(1, *t.padded_shape))


def choose(
    local_shape, num_devices: int, *, ccl, has_weight: bool, path: str = "auto", in_l1: bool = True
) -> tuple[str, str]:
    """(path, why) for a per-device activation shape. `path` other than "auto" is taken as given (the rules then say
    whether it can run). `in_l1`: the input is (or is asked to be) width-sharded in L1, where the fused op runs it;
    a decode input kept in DRAM takes the async path on the interleaved layout instead of a reshard there and back."""
    if path not in ("auto", *PATHS):
        raise RuleError("path.name", "unknown path", path, f"one of {('auto', *PATHS)}")
    if path != "auto":
        return path, "asked for"
    if num_devices == 1:
        return "local", "one device on the gather axis: plain rms_norm, no stats gather"
    if ccl is None:
        return "classic", "no CCL resources given: async and fused need semaphores created before the call"
    if one_tile_row(local_shape) and has_weight:  # one tile row: padded height 32 and batch 1
        if in_l1:
            return "fused", "decode (one tile row): pre, gather and post in one program"
        return "async", "decode input in DRAM: the interleaved layout runs it where it is (fused takes L1 shards)"
    return "async", "trace-safe stats gather with persistent semaphores"
