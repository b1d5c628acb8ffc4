"""Llama-70B RMSNorm (hidden 8192) distributed over a T3000 (1x8) and a Galaxy (8x4, hidden over the 4 columns).

With Tenstorrent hardware present, every case runs through ttnn on the mesh (`tt_rmsnorm.distributed_rms_norm`).
Without it, the numbers come from the reference model's N-device emulation (`tt_rmsnorm.reference`), labeled so, and a
dry run pushes the same calls through real ttnn on mock T3000 / Galaxy clusters to show what ttnn accepts.

    make demo            # or: .venv/bin/python demos/distributed_rmsnorm.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# tt-metal's C++ logger prints cluster open/close chatter at info level; the report is what this program is for.
os.environ.setdefault("TT_LOGGER_LEVEL", "error")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from loguru import logger  # noqa: E402
from tqdm import tqdm  # noqa: E402

from tt_rmsnorm import accuracy, configs, reference  # noqa: E402
from tt_rmsnorm.hardware import tt_hardware_present  # noqa: E402

HIDDEN = 8192
EPSILON = 1e-5
MESHES = [
    # (name, mesh shape, cluster_axis, devices the hidden dim is split over, compute grid per chip)
    ("T3000", (1, 8), 1, 8, (8, 7)),
    ("Galaxy", (8, 4), 1, 4, (8, 9)),
]
CASES = [
    # (case, tokens, dtype)
    ("prefill", 128, "bfloat16"),
    ("prefill", 512, "bfloat16"),
    ("prefill", 2048, "bfloat16"),
    ("prefill", 2048, "bfloat8_b"),
    ("decode", 32, "bfloat16"),
]


def _inputs(tokens: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, tokens, HIDDEN, generator=g) * 2.0
    w = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g)  # Llama norm weights sit around 1
    return x, w


def _emulate(x, w, n, path, dtype):
    """Reference model of pre -> all_gather -> post over n devices, and of single-device ttnn.rms_norm."""
    out, stats = reference.distributed_rms_norm(x, w, num_devices=n, epsilon=EPSILON, path=path, dtype=dtype)
    single = reference.single_device_rms_norm(x, w, epsilon=EPSILON, dtype=dtype)
    return out, single, tuple(stats.shape)


def _on_hardware(x, w, mesh_shape, cluster_axis, dtype, mesh_device):
    import ttnn

    import tt_rmsnorm

    tt_dtype = {"bfloat16": ttnn.bfloat16, "bfloat8_b": ttnn.bfloat8_b}[dtype]
    tx = tt_rmsnorm.shard_activation(x, mesh_device, cluster_axis=cluster_axis, dtype=tt_dtype)
    tw = tt_rmsnorm.prepare_weight(w, mesh_device, cluster_axis=cluster_axis)
    y = tt_rmsnorm.distributed_rms_norm(tx, tw, mesh_device, epsilon=EPSILON, cluster_axis=cluster_axis)
    out = tt_rmsnorm.gather_output(y, mesh_device, cluster_axis=cluster_axis)
    single = reference.single_device_rms_norm(x, w, epsilon=EPSILON, dtype=dtype)
    return out, single, None


def run_cases(hardware: bool, quick: bool) -> list[dict]:
    rows = []
    meshes = MESHES
    mesh_device = None
    if hardware:
        import ttnn

        from tt_rmsnorm.mesh import open_mesh

        n_chips = ttnn.get_num_devices()
        meshes = [m for m in MESHES if m[1][0] * m[1][1] == n_chips]
        if not meshes:
            logger.warning(f"{n_chips} chips found: neither a T3000 (8) nor a Galaxy (32); emulating instead")
            hardware = False
            meshes = MESHES
        else:
            mesh_device = open_mesh(meshes[0][1])
    cases = CASES[:1] + CASES[-1:] if quick else CASES
    work = [(m, c) for m in meshes for c in cases]
    for (mname, mshape, axis, n, grid), (case, tokens, dtype) in tqdm(work, desc="cases", unit="case", file=sys.stdout):
        x, w = _inputs(tokens, seed=tokens)
        local = (1, 1, tokens, HIDDEN // n)
        plan = configs.plan(local, n, compute_grid=grid, dtype=_ttnn_dtype(dtype))
        t0 = time.perf_counter()
        if hardware:
            out, single, stats_shape = _on_hardware(x, w, mshape, axis, dtype, mesh_device)
        else:
            out, single, stats_shape = _emulate(x, w, n, plan.path, dtype)
        wall = time.perf_counter() - t0
        golden = reference.golden_rms_norm(
            reference.quantize(x, dtype), reference.quantize(w, "bfloat16"), epsilon=EPSILON
        )
        vs_golden = accuracy.compare(out, golden, dtype)
        vs_single = accuracy.compare(out, single.double(), dtype)
        rows.append(
            dict(
                mesh=f"{mname} {mshape[0]}x{mshape[1]}",
                case=f"{case} {tokens}",
                dtype=dtype,
                n=n,
                shape=f"[1,1,{tokens},{HIDDEN}] -> {n} x {list(local)}",
                stats=stats_shape,
                plan=plan,
                golden=vs_golden,
                single=vs_single,
                wall=wall,
            )
        )
    if mesh_device is not None:
        from tt_rmsnorm.mesh import close_mesh

        close_mesh(mesh_device)
    return rows


def _ttnn_dtype(name):
    import ttnn

    return {"bfloat16": ttnn.bfloat16, "bfloat8_b": ttnn.bfloat8_b, "float32": ttnn.float32}[name]


def print_report(rows, backend):
    print()
    print("=" * 118)
    print(f"tt_rmsnorm demo: Llama-70B RMSNorm, hidden {HIDDEN}, epsilon {EPSILON}")
    print(f"backend: {backend}")
    print("=" * 118)
    for r in rows:
        print(f"\n{r['mesh']} | {r['case']} tokens | {r['dtype']} | {r['shape']}")
        if r["stats"]:
            print(f"  gathered stats per device: {list(r['stats'])} (one 32-wide tile per device on the gather axis)")
        print(f"  config: {r['plan'].describe()}")
        print(f"  vs float64 golden:        {r['golden'].summary()}")
        print(f"  vs single-device rms_norm: {r['single'].summary()}")
        print(f"  wall time: {r['wall'] * 1e3:.1f} ms")
    print()
    hdr = (
        f"{'mesh':<14}{'case':<15}{'dtype':<11}{'path':<13}{'PCC':>10}{'max abs':>10}{'max error':>11}"
        f"{'vs 1-dev PCC':>14}{'ms':>8}  verdict"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ok = r["golden"].passed and r["single"].passed
        print(
            f"{r['mesh']:<14}{r['case']:<15}{r['dtype']:<11}{r['plan'].path:<13}{r['golden'].pcc:>10.6f}{r['golden'].max_abs:>10.4f}"
            f"{r['golden'].headline():>11}{r['single'].pcc:>14.7f}{r['wall'] * 1e3:>8.1f}  {'PASS' if ok else 'FAIL'}"
        )
    tol = {d: accuracy.tolerance_for(d) for d in sorted({r["dtype"] for r in rows})}
    for d, t in tol.items():
        print(
            f"  tolerance {d}: PCC >= {t.pcc_min}"
            + (f", max ULP <= {t.max_ulp}" if t.max_ulp is not None else "")
            + (f", max abs <= {t.max_abs_rel:g} x max|y|" if t.max_abs_rel is not None else "")
        )
    return all(r["golden"].passed and r["single"].passed for r in rows)


def dry_run_section(quick: bool):
    """What real ttnn accepts on mock T3000 / Galaxy meshes (no kernel runs; shapes, dtypes and memory configs only)."""
    from tt_rmsnorm import mock_cluster

    print(
        "\nDry run through real ttnn 0.81.1 on mock clusters (validation + program factories; no kernels run, values are zeros)"
    )
    systems = [s for s in ("t3k", "galaxy") if s in mock_cluster.DESCRIPTORS]
    for system in tqdm(systems, desc="mock systems", unit="mesh", file=sys.stdout):
        try:
            rows = mock_cluster.dry_run(system)
        except Exception as e:  # report and go on: the dry run is evidence, not the demo's numbers
            tqdm.write(f"  {system}: dry run failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        seen = {}
        for r in rows:
            seen.setdefault(r["case"], []).append(r)
        for case, rs in seen.items():
            r0 = rs[0]
            same = all(
                (r["output_shape"], r["dtype"], r["memory_config"])
                == (r0["output_shape"], r0["dtype"], r0["memory_config"])
                for r in rs
            )
            tqdm.write(
                f"  mock {system} mesh {r0['mesh']}: {case}: input {list(r0['input_shape'])} -> {len(rs)} devices x "
                f"{list(r0['output_shape'])} {r0['dtype']} {r0['layout']} {r0['memory_config']}"
                + ("" if same else "  (devices differ!)")
                + "  ACCEPTED"
            )
    mock_cluster.shutdown_workers()


def parity_section():
    try:
        from programs.parity import summary
    except ImportError:
        return
    print()
    summary.print_demo_summary()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one prefill and one decode case per mesh")
    ap.add_argument("--no-dry-run", action="store_true", help="skip the mock-cluster dry run")
    args = ap.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    hardware = tt_hardware_present()
    backend = (
        "ttnn on Tenstorrent hardware"
        if hardware
        else "reference-model emulation of N devices (no Tenstorrent hardware found): numbers from tt_rmsnorm.reference"
    )
    print(f"tt_rmsnorm demo - {backend}")
    rows = run_cases(hardware, args.quick)
    ok = print_report(rows, backend)
    if not hardware and not args.no_dry_run:
        dry_run_section(args.quick)
    parity_section()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
