"""One small adapter per backend the parity runner pushes the cases through.

Each adapter answers:
- `available() -> (bool, reason)`: can it run on this machine at all (the reason is printed when it cannot);
- `supports(case) -> (bool, reason)`: does it take this case here (e.g. the Triton interpreter only runs small ones);
- `inputs(case) -> (x, weight)`: the float64 values the backend really computes on (its inputs after its own rounding,
  weight_offset folded in), from which the runner computes the float64 golden it is judged against;
- `run(case) -> (output, label)`: the output tensor and a label saying what ran it (e.g. "triton-interpreter");
- `limit(case) -> Limit | None`: a documented limit of the hardware or library the backend stands for (not of this
  project's code): the rows where it cannot agree with the float64 golden, and what it returns there. The runner
  reports a backend that is right on every other row and returns exactly that on those rows as `limit`, not FAIL.
`dtype` is the result dtype whose tolerance (tt_rmsnorm.accuracy) judges it. An adapter with `numeric = False`
(the ttnn mock dry run) returns an acceptance record instead of numbers, and is never compared.

Only torch is imported here; ttnn, triton and the NKI driver are imported by the adapters that use them, so the runner
works on machines that lack any of them (they are then skipped with the reason).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from programs.parity.cases import Case, tensors
from programs.parity.log import logger
from tt_rmsnorm import reference
from tt_rmsnorm.hardware import tt_hardware_present
from tt_rmsnorm.tiles import one_tile_row

# The Triton interpreter runs each program in Python: ~0.7 s for 256K elements on one CPU core.
TRITON_INTERPRETER_MAX_ELEMENTS = 256 * 1024
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "bfloat8_b": "bf8b"}


# The rows the fp32-accumulating backends cannot normalise: x^2 or its sum past the fp32 maximum (3.4e38) is Inf, the
# rsqrt of it 0, and the row comes out as x * 0. The golden (float64) is finite there.
TT_OVERFLOW = (
    "TT hardware limit: x^2 or the sum of squares overflows fp32 in ttnn's kernels (|x| > 1.8e19 or sum > 3.4e38), "
    "the stats are Inf and the row comes out as 0 (tt_rmsnorm.reference.overflow_rows)"
)
TORCH_OVERFLOW = (
    "torch limit: torch.nn.functional.rms_norm sums x^2 in fp32; past 3.4e38 the sum is Inf and the row comes out as 0"
)


@dataclass(frozen=True)
class Limit:
    """A documented limit on one case: `rows` (bool, one per row of the case), `predicted` (float64 [rows, H]: what the
    backend returns on those rows) and `what` (the limit, in words)."""

    rows: torch.Tensor
    predicted: torch.Tensor
    what: str


def _f64(t) -> torch.Tensor:
    return torch.as_tensor(t).detach().to("cpu", torch.float64)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    return torch.cuda.is_available()


class Backend:
    name = "backend"  # column name in the tables
    dtype = "bfloat16"  # result dtype: selects the tolerance
    numeric = True

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, case: Case) -> tuple[bool, str]:
        return True, ""

    def inputs(self, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
        t = tensors(case)
        dt = TORCH_DTYPES[self.dtype]
        return _f64(t.x.to(dt)), _f64(t.effective_weight().to(dt))

    def expected(self, case: Case) -> torch.Tensor:
        """The float64 answer for this backend's own inputs: the one it is judged against."""
        x, w = self.inputs(case)
        return reference.golden_rms_norm(x, w, epsilon=case.epsilon)

    def run(self, case: Case):
        raise NotImplementedError

    def limit(self, case: Case) -> Limit | None:
        return None

    def close(self) -> None:
        """Release devices or worker processes (called once at the end of a run)."""


class Golden(Backend):
    """tt_rmsnorm.reference.golden_rms_norm on the float32 case inputs, cross-checked against an independent NumPy
    float64 evaluation (the reference must itself be finite and right on the hard rows)."""

    name = "golden-f64"
    dtype = "float32"  # the tightest policy the project has

    def inputs(self, case):
        t = tensors(case)
        return _f64(t.x), _f64(t.weight) + t.weight_offset

    def run(self, case):
        x, w = self.inputs(case)
        return reference.golden_rms_norm(x, w, epsilon=case.epsilon), "float64-golden (vs NumPy float64)"

    def expected(self, case):
        x, w = (a.numpy() for a in self.inputs(case))
        return torch.from_numpy(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + case.epsilon) * w)


class Torch(Backend):
    """torch.nn.functional.rms_norm in float32 or bfloat16, on the GPU when there is one."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.name = f"torch-{SHORT[dtype]}"

    def available(self):
        if not hasattr(torch.nn.functional, "rms_norm"):
            return False, f"torch {torch.__version__} has no torch.nn.functional.rms_norm (added in 2.4)"
        return True, ""

    def run(self, case):
        t = tensors(case)
        dev = "cuda" if cuda_available() else "cpu"
        dt = TORCH_DTYPES[self.dtype]
        x, w = t.x.to(dev, dt), t.effective_weight().to(dev, dt)
        y = torch.nn.functional.rms_norm(x, (case.hidden,), weight=w, eps=case.epsilon)
        return y.cpu(), f"torch-{SHORT[self.dtype]}-{dev}"

    def limit(self, case):
        x, _ = self.inputs(case)
        x = x.reshape(-1, case.hidden)
        rows = x.pow(2).sum(-1).to(torch.float32).isinf() & x.isfinite().all(-1)
        return Limit(rows, x[rows] * 0.0, TORCH_OVERFLOW) if bool(rows.any()) else None


def tt_sharded(shape):
    """The `sharded=` the runner passes for an activation of `shape`: True for one tile row (the rows decide)."""
    return True if tt_layout(shape) == "sharded" else None


def tt_layout(per_device_shape) -> str:
    """The TT layout the runner asks the package for, for this per-device shape (tt_rmsnorm.planning.layouts'
    choose_layout rule, importable where ttnn is missing): sharded only for one tile row, as decode keeps it in L1."""
    return "sharded" if one_tile_row(per_device_shape) else "interleaved"


class TTReference(Backend):
    """The reference model of ttnn's pre -> all_gather -> post over `num_devices` hidden slices (tt_rmsnorm.reference),
    in bfloat16 or bfloat8_b (ttnn's own host packing, which needs the ttnn wheel)."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.name = f"tt-ref-{SHORT[dtype]}"

    def available(self):
        if self.dtype == "bfloat8_b":
            if not _has_module("ttnn"):
                return False, "bfloat8_b packing uses ttnn's host conversion and ttnn is not installed here"
            try:
                reference.quantize(torch.ones(32, 32), "bfloat8_b")
            except Exception as e:  # noqa: BLE001 - any failure of the conversion means the backend cannot run
                return False, f"ttnn's bfloat8_b host conversion failed here: {type(e).__name__}: {e}"
        return True, ""

    def inputs(self, case):
        t = tensors(case)
        w = t.effective_weight().to(torch.bfloat16)  # gamma is bf16 on the device
        return _f64(reference.quantize(t.x, self.dtype)), _f64(w)

    def run(self, case):
        t = tensors(case)
        layout = tt_layout(case.per_device_shape)
        y, _ = reference.distributed_rms_norm(
            t.x,
            t.effective_weight(),
            num_devices=case.num_devices,
            epsilon=case.epsilon,
            layout=layout,
            dtype=self.dtype,
        )
        return y, f"tt-reference-{SHORT[self.dtype]} ({layout}, {case.num_devices}-device emulation)"

    def limit(self, case):
        """The model's rows whose stats overflow, and the model's output there (what the TT kernels return)."""
        t = tensors(case)
        layout = tt_layout(case.per_device_shape)
        kw = dict(num_devices=case.num_devices, layout=layout, dtype=self.dtype)
        rows = reference.overflow_rows(t.x, **kw).reshape(-1)
        if not bool(rows.any()):
            return None
        y, _ = reference.distributed_rms_norm(t.x, t.effective_weight(), epsilon=case.epsilon, **kw)
        return Limit(rows, _f64(y).reshape(-1, case.hidden)[rows], TT_OVERFLOW)


class Triton(Backend):
    """programs.triton's two-phase distributed RMSNorm on one process: pre_stats on every hidden slice, the stats
    stacked in rank order (what the all_gather returns), post on every slice. bf16 in and out, weight_offset native."""

    name = "triton-bf16"
    dtype = "bfloat16"

    def available(self):
        if not _has_module("triton"):
            return False, "triton is not installed"
        if not cuda_available() and os.environ.get("TRITON_INTERPRET") != "1":
            return False, "no CUDA device and TRITON_INTERPRET=1 was not set before triton was imported"
        return True, ""

    def supports(self, case):
        if not cuda_available() and case.elements > TRITON_INTERPRETER_MAX_ELEMENTS:
            return False, (
                f"Triton interpreter (no CUDA): only cases with M*N <= {TRITON_INTERPRETER_MAX_ELEMENTS} run on CPU; "
                f"this one has {case.elements}"
            )
        return True, ""

    def inputs(self, case):
        t = tensors(case)
        return _f64(t.x.to(torch.bfloat16)), _f64(t.weight.to(torch.bfloat16)) + t.weight_offset

    def run(self, case):
        from programs.triton.distributed import post, pre_stats

        t = tensors(case)
        dev = "cuda" if cuda_available() else "cpu"
        x = t.x.to(dev, torch.bfloat16).reshape(case.rows, case.hidden)
        w = t.weight.to(dev, torch.bfloat16)
        local = case.hidden // case.num_devices
        xs, ws = x.split(local, dim=-1), w.split(local)
        with warnings.catch_warnings():
            # The interpreter computes with NumPy, which warns where a square overflows fp32 (the huge rows); the
            # kernels' second pass over such rows is what the comparison judges.
            warnings.simplefilter("ignore", RuntimeWarning)
            stats = torch.stack([pre_stats(s) for s in xs])  # [N, M] float64: the gathered per-device sums
            ys = [
                post(s, stats, wl, epsilon=case.epsilon, hidden_size=case.hidden, weight_offset=t.weight_offset)
                for s, wl in zip(xs, ws, strict=True)
            ]
        y = torch.cat(ys, dim=-1).reshape(case.shape).cpu()
        return y, f"triton-{'cuda' if dev == 'cuda' else 'interpreter'} ({case.num_devices} slices)"


class NKI(Backend):
    """programs.nki.driver.run_rms_norm: the NKI kernels on Trainium, the Neuron simulator or the NumPy emulator."""

    name = "nki-bf16"
    dtype = "bfloat16"

    def available(self):
        try:
            import programs.nki.driver  # noqa: F401
        except ImportError as e:
            return False, f"the NKI driver cannot be imported here: {e}"
        return True, ""

    def inputs(self, case):
        t = tensors(case)
        return _f64(t.x.to(torch.bfloat16)), _f64(t.effective_weight().to(torch.bfloat16))

    def run(self, case):
        from programs.nki.driver import run_rms_norm

        t = tensors(case)
        return run_rms_norm(
            t.x, t.effective_weight(), epsilon=case.epsilon, num_devices=case.num_devices, dtype="bfloat16"
        )


# ---------------------------------------------------------------------------------------------------------------------
# ttnn: real hardware when present, else the mock dry run (acceptance only).

# The mock system each device count runs on, by architecture (tt_rmsnorm.testing.mock_cluster); a Galaxy as 1x32.
MOCK_SYSTEMS = {
    "wormhole_b0": {1: ("n150", None), 2: ("n300", None), 8: ("t3k", None), 32: ("galaxy", (1, 32))},
    "blackhole": {1: ("p150", None), 2: ("p300", None), 32: ("bh-galaxy", (1, 32))},
}
MOCK_LABEL = "ttnn-mock (acceptance only, values not computed)"


class TTNNHardware(Backend):
    """tt_rmsnorm.distributed_rms_norm on a 1xN mesh of real Tenstorrent devices (bf16)."""

    name = "ttnn"
    dtype = "bfloat16"

    def __init__(self):
        self._mesh, self._n = None, None

    def available(self):
        if not _has_module("ttnn"):
            return False, "ttnn is not installed"
        return True, ""

    def supports(self, case):
        import ttnn

        have = ttnn.get_num_devices()
        if case.num_devices > have:
            return False, f"needs {case.num_devices} devices for a 1x{case.num_devices} mesh; this host has {have}"
        return True, ""

    def inputs(self, case):
        t = tensors(case)
        return _f64(t.x.to(torch.bfloat16)), _f64(t.effective_weight().to(torch.bfloat16))

    def _mesh_for(self, n):
        if self._n != n:
            self.close()
            from tt_rmsnorm.devices import open_mesh

            self._mesh, self._n = open_mesh((1, n)), n
        return self._mesh

    def run(self, case):
        import tt_rmsnorm

        t = tensors(case)
        mesh = self._mesh_for(case.num_devices)
        tx = tt_rmsnorm.shard_activation(t.x.to(torch.bfloat16), mesh)
        tw = tt_rmsnorm.prepare_weight(t.effective_weight().to(torch.bfloat16), mesh)
        # one tile row asks for the sharded layout (decode activations live in L1), as tt_layout says
        sharded = tt_sharded(case.per_device_shape)
        y = tt_rmsnorm.distributed_rms_norm(tx, tw, mesh, epsilon=case.epsilon, sharded=sharded)
        out = tt_rmsnorm.gather_output(y, mesh)
        return out, f"ttnn-hardware (1x{case.num_devices} mesh, {tt_layout(case.per_device_shape)})"

    def limit(self, case):
        """The device must return what the reference model says on the overflowing rows (zeros)."""
        return TTReference("bfloat16").limit(case)

    def close(self):
        if self._mesh is not None:
            from tt_rmsnorm.devices import close_mesh

            close_mesh(self._mesh)
            self._mesh, self._n = None, None


def mock_acceptance(mesh, shape, epsilon) -> dict:
    """Runs in a mock-cluster worker: the case's activation through tt_rmsnorm.distributed_rms_norm on real ttnn.
    Mock devices compute nothing (every value is zero), so only what ttnn accepted and returned is reported."""
    import ttnn

    from tt_rmsnorm import devices, distributed

    x = torch.zeros(shape, dtype=torch.bfloat16)
    w = torch.ones(shape[-1], dtype=torch.bfloat16)
    tx = devices.shard_activation(x, mesh)
    tw = devices.prepare_weight(w, mesh)
    y = distributed.distributed_rms_norm(tx, tw, mesh, epsilon=epsilon, sharded=tt_sharded(shape))
    outs = ttnn.get_device_tensors(y)
    return {
        "devices": len(outs),
        "output_shapes": sorted({tuple(o.shape) for o in outs}),
        "dtype": str(outs[0].dtype).rsplit(".", 1)[-1],
    }


class TTNNMock(Backend):
    """Real ttnn on a mock cluster of architecture `arch` with as many devices as the case's hidden split (Wormhole:
    N150, N300, T3000, Galaxy as 1x32; Blackhole: P150, P300, Blackhole Galaxy as 1x32): checks that ttnn accepts the
    per-device shapes and returns them. No numbers."""

    dtype = "bfloat16"
    numeric = False

    def __init__(self, arch: str = "wormhole_b0"):
        self.arch, self.systems = arch, MOCK_SYSTEMS[arch]
        self.name = "ttnn" if arch == "wormhole_b0" else f"ttnn-{arch}"

    def available(self):
        if not _has_module("ttnn"):
            return False, "ttnn is not installed (the mock dry run needs the ttnn wheel)"
        return True, ""

    def supports(self, case):
        if case.num_devices not in self.systems:
            return False, f"no {self.arch} mock system with {case.num_devices} devices; have {sorted(self.systems)}"
        return True, ""

    def run(self, case):
        from tt_rmsnorm.testing import mock_cluster, workers

        system, mesh_shape = self.systems[case.num_devices]

        def call():
            return workers.run_isolated(system, mock_acceptance, case.shape, case.epsilon, mesh_shape=mesh_shape)

        retried = ""
        try:
            got = call()
        except (workers.IsolatedError, workers.WorkerCrashed, workers.WorkerTimeout) as e:
            if getattr(e, "kind", "") in ("RuleError", "ValueError"):
                raise  # the package refused the case: that answer does not change on a second try
            # Seen once on a loaded machine: a TT_THROW from tt-metal's JIT build (jit_build/build.cpp) that did not
            # repeat. One more try tells a harness hiccup from a rejection; the label keeps the first failure visible.
            logger.warning(f"ttnn mock {system} on {case.name}: {e}; trying once more")
            retried = f" (accepted on the 2nd try; 1st: {str(e).splitlines()[0][:120]})"
            got = call()
        expected = [case.per_device_shape]
        if got["devices"] != case.num_devices or got["output_shapes"] != expected:
            raise AssertionError(
                f"ttnn returned {got['devices']} device tensors of shapes {got['output_shapes']}; expected "
                f"{case.num_devices} of {expected}"
            )
        mesh = "x".join(map(str, mesh_shape or mock_cluster.MESH_SHAPES[system]))
        layout = tt_layout(case.per_device_shape)
        return got, (
            f"{MOCK_LABEL}: mock {system} {mesh}, {layout}, {got['devices']} x {list(expected[0])} "
            f"{got['dtype']}{retried}"
        )

    def close(self):
        from tt_rmsnorm.testing import workers

        workers.shutdown_workers()


def ttnn_backend(tt_arch: str = "wormhole_b0") -> Backend:
    """ttnn on the hardware here, else its mock judge on the mock systems of `tt_arch`."""
    return TTNNHardware() if tt_hardware_present() else TTNNMock(tt_arch)


def all_backends(tt_arch: str = "wormhole_b0") -> list[Backend]:
    """Every backend, in table order; without Tenstorrent hardware ttnn's mock judge runs on `tt_arch`'s mocks."""
    return [
        Golden(),
        Torch("float32"),
        Torch("bfloat16"),
        TTReference("bfloat16"),
        TTReference("bfloat8_b"),
        ttnn_backend(tt_arch),
        Triton(),
        NKI(),
    ]
