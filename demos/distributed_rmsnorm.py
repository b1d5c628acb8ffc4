"""Llama-70B RMSNorm (hidden 8192) distributed over a T3000 (1x8) and a Galaxy (8x4, hidden over the 4 columns).

1. Which path `distributed_rms_norm(path="auto")` takes for decode and prefill, and why (planned without a device).
2. The numbers: with Tenstorrent hardware every case runs through ttnn on the mesh; without it they come from the
   reference model's N-device emulation of the path auto picks, labeled so.
3. The model's norms as a decoder builds them: two `DistributedRMSNorm` per layer (and the final norm) from a
   synthetic state_dict named like Meta's Llama checkpoint, one decode and one prefill step through all of them on
   mock T3000 and Galaxy meshes.
4. A dry run of every path through real ttnn on mock Wormhole N300, T3000 and Galaxy and Blackhole P300 and Galaxy
   (and the local path on one chip, N150 and P150).
5. One decoder layer of tt-metal's (tt_transformers' RMSNorm inside its DistributedNorm on T3000 and P300, the Galaxy
   decoder's DistributedNorm with its residual stream on the Wormhole and Blackhole Galaxies, the model's CCL object)
   ported by its import line to `tt_rmsnorm.compat`, decode and prefill on the mocks.
6. The cross-backend parity summary.

    make demo            # or: .venv/bin/python demos/distributed_rmsnorm.py [--quick] [--layers N]
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

from tt_rmsnorm import accuracy, reference  # noqa: E402
from tt_rmsnorm.hardware import tt_hardware_present  # noqa: E402

HIDDEN = 8192
EPSILON = 1e-5
LLAMA_70B_LAYERS = 80
MESHES = [
    # (name, mock system, mesh shape, cluster_axis, devices the hidden dim is split over, compute grid per chip)
    ("T3000", "t3k", (1, 8), None, 8, (8, 7)),
    ("Galaxy", "galaxy", (8, 4), 1, 4, (8, 9)),
]
CASES = [
    # (mode, tokens, dtype)
    ("prefill", 128, "bfloat16"),
    ("prefill", 512, "bfloat16"),
    ("prefill", 2048, "bfloat16"),
    ("prefill", 2048, "bfloat8_b"),
    ("decode", 32, "bfloat16"),
]
RULE = "-" * 118


def _progress(items, desc):
    """Progress on stderr, so that stdout reads as a report."""
    return tqdm(items, desc=desc, unit="step", file=sys.stderr, leave=False)


def _report(line: str):
    """A report line printed while a progress bar runs: tqdm lifts the bar off the terminal, prints, and redraws it."""
    tqdm.write(line, file=sys.stdout)


def _ttnn_dtype(name):
    import ttnn

    return {"bfloat16": ttnn.bfloat16, "bfloat8_b": ttnn.bfloat8_b, "float32": ttnn.float32}[name]


def _decode(local_shape):
    """Decode (one tile row) asks for the sharded layout: a decoder keeps its activations width-sharded in L1."""
    from tt_rmsnorm.tiles import one_tile_row

    return True if one_tile_row(local_shape) else None


def _plan(local_shape, mesh_shape, axis, grid, dtype="bfloat16", with_ccl=True):
    import tt_rmsnorm

    return tt_rmsnorm.plan_distributed_rms_norm(
        local_shape,
        mesh_shape,
        cluster_axis=axis,
        compute_grid=grid,
        dtype=_ttnn_dtype(dtype),
        ccl=with_ccl or None,
        sharded=_decode(local_shape),
    )


def path_section() -> None:
    """Which path auto takes on each system, with CCL resources (what a model passes) and without (an eager call)."""
    print("\n1. Which path distributed_rms_norm(path='auto') takes, and why (planned without a device)")
    print(f"{'system':<9}{'mode':<14}{'resources':<11}{'path':<9}why")
    for name, _, shape, axis, n, grid in MESHES:
        for mode, tokens in (("decode", 32), ("prefill", 128)):
            for with_ccl in (True, False):
                plan = _plan((1, 1, tokens, HIDDEN // n), shape, axis, grid, with_ccl=with_ccl)
                resources = "CCL" if with_ccl else "none"
                print(f"{name:<9}{mode + f' T={tokens}':<14}{resources:<11}{plan.name:<9}{plan.reason}")
    print("  one device on the gather axis (N150, or a 1-column submesh): local, plain rms_norm")


def _inputs(tokens: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, tokens, HIDDEN, generator=g) * 2.0
    w = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g)  # Llama norm weights sit around 1
    return x, w


def _reference_layout(plan) -> tuple[str, str]:
    """The reference model's layout and stats dtype for a plan: fused gathers in the accumulation format."""
    if plan.name == "fused":
        from tt_rmsnorm.rules.common import compute_flags

        return "fused", "float32" if compute_flags(plan.norm.compute_kernel_config).fp32_dest_acc_en else "bfloat16"
    return plan.norm.layout, "bfloat16"


def _emulate(x, w, n, plan, dtype):
    layout, stats_dtype = _reference_layout(plan)
    out, stats = reference.distributed_rms_norm(
        x, w, num_devices=n, epsilon=EPSILON, layout=layout, dtype=dtype, stats_dtype=stats_dtype
    )
    return out, tuple(stats.shape)


def _on_hardware(x, w, axis, dtype, mesh_device, ccl):
    import tt_rmsnorm

    tx = tt_rmsnorm.shard_activation(x, mesh_device, cluster_axis=axis, dtype=_ttnn_dtype(dtype))
    tw = tt_rmsnorm.prepare_weight(w, mesh_device, cluster_axis=axis)
    sharded = _decode(tuple(x.shape))  # one tile row or not: the rows decide, not the width
    y = tt_rmsnorm.distributed_rms_norm(
        tx, tw, mesh_device, epsilon=EPSILON, cluster_axis=axis, ccl=ccl, sharded=sharded
    )
    return tt_rmsnorm.gather_output(y, mesh_device, cluster_axis=axis), None


def run_cases(hardware: bool, quick: bool) -> list[dict]:
    meshes, mesh_device, ccl = MESHES, None, None
    if hardware:
        import ttnn

        import tt_rmsnorm
        from tt_rmsnorm.devices import open_mesh

        n_chips = ttnn.get_num_devices()
        meshes = [m for m in MESHES if m[2][0] * m[2][1] == n_chips]
        if not meshes:
            logger.warning(f"{n_chips} chips found: neither a T3000 (8) nor a Galaxy (32); emulating instead")
            hardware, meshes = False, MESHES
        else:
            mesh_device = open_mesh(meshes[0][2])
            ccl = tt_rmsnorm.CCLResources(mesh_device, cluster_axis=meshes[0][3])
    cases = CASES[:1] + CASES[-1:] if quick else CASES
    rows = []
    for (mname, _, mshape, axis, n, grid), (mode, tokens, dtype) in _progress(
        [(m, c) for m in meshes for c in cases], "cases"
    ):
        x, w = _inputs(tokens, seed=tokens)
        plan = _plan((1, 1, tokens, HIDDEN // n), mshape, axis, grid, dtype)
        t0 = time.perf_counter()
        if hardware:
            out, stats_shape = _on_hardware(x, w, axis, dtype, mesh_device, ccl)
        else:
            out, stats_shape = _emulate(x, w, n, plan, dtype)
        wall = time.perf_counter() - t0
        golden = reference.golden_rms_norm(
            reference.quantize(x, dtype), reference.quantize(w, "bfloat16"), epsilon=EPSILON
        )
        single = reference.single_device_rms_norm(x, w, epsilon=EPSILON, dtype=dtype)
        rows.append(
            dict(
                mesh=f"{mname} {mshape[0]}x{mshape[1]}",
                case=f"{mode} {tokens}",
                dtype=dtype,
                shape=f"[1,1,{tokens},{HIDDEN}] -> {n} x [1, 1, {tokens}, {HIDDEN // n}]",
                stats=stats_shape,
                plan=plan,
                golden=accuracy.compare(out, golden, dtype),
                single=accuracy.compare(out, single.double(), dtype),
                wall=wall,
            )
        )
    if mesh_device is not None:
        from tt_rmsnorm.devices import close_mesh

        close_mesh(mesh_device)
    return rows


def print_numbers(rows, backend) -> bool:
    print(f"\n2. The numbers: {backend}")
    for r in rows:
        print(f"  {r['mesh']:<12} {r['case']:<13} {r['dtype']:<10} {r['plan'].describe()}")
    hdr = (
        f"{'mesh':<14}{'case':<15}{'dtype':<11}{'path':<9}{'layout':<13}{'PCC':>10}{'max abs':>10}{'max error':>11}"
        f"{'vs 1-dev PCC':>14}{'ms':>8}  verdict"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        ok = r["golden"].passed and r["single"].passed
        print(
            f"{r['mesh']:<14}{r['case']:<15}{r['dtype']:<11}{r['plan'].name:<9}{r['plan'].norm.layout:<13}"
            f"{r['golden'].pcc:>10.6f}{r['golden'].max_abs:>10.4f}{r['golden'].headline():>11}"
            f"{r['single'].pcc:>14.7f}{r['wall'] * 1e3:>8.1f}  {'PASS' if ok else 'FAIL'}"
        )
    for r in rows:
        print(f"  {r['mesh']} {r['case']} {r['dtype']}: vs float64 {r['golden'].summary()}")
    for d in sorted({r["dtype"] for r in rows}):
        t = accuracy.tolerance_for(d)
        print(
            f"  tolerance {d}: PCC >= {t.pcc_min}"
            + (f", max ULP <= {t.max_ulp}" if t.max_ulp is not None else "")
            + (f", max abs <= {t.max_abs_rel:g} x max|y|" if t.max_abs_rel is not None else "")
        )
    return all(r["golden"].passed and r["single"].passed for r in rows)


def llama_state_dict(layers: int, hidden: int = HIDDEN, seed: int = 0) -> dict:
    """The norm weights of a Llama checkpoint in Meta's naming: layers.{i}.attention_norm / ffn_norm, and norm."""
    g = torch.Generator().manual_seed(seed)
    sd = {"norm.weight": 1 + 0.1 * torch.randn(hidden, generator=g)}
    for i in range(layers):
        sd[f"layers.{i}.attention_norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        sd[f"layers.{i}.ffn_norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    return sd


def model_norms_in_worker(mesh, axis, layers: int) -> dict:
    """Runs in a mock-cluster worker: the decoder's norms built as model code builds them, one decode step and one
    prefill step through every norm (each with the residual stream), and the host time per norm call."""
    import ttnn

    import tt_rmsnorm

    sd = llama_state_dict(layers)
    ccl = tt_rmsnorm.CCLResources(mesh, cluster_axis=axis)  # one per mesh and axis, shared by every norm
    t0 = time.perf_counter()
    norms = [
        tt_rmsnorm.DistributedRMSNorm(mesh, HIDDEN, sd, key, layer_num=i, eps=EPSILON, cluster_axis=axis, ccl=ccl)
        for i in range(layers)
        for key in ("attention_norm", "ffn_norm")
    ]
    norms.append(tt_rmsnorm.DistributedRMSNorm(mesh, HIDDEN, sd, "norm", eps=EPSILON, cluster_axis=axis, ccl=ccl))
    build_s = time.perf_counter() - t0
    steps = {}
    for mode, tokens in (("decode", 32), ("prefill", 128)):
        h = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
        x = tt_rmsnorm.shard_activation(torch.randn(1, 1, tokens, HIDDEN), mesh, cluster_axis=axis)
        for norm in norms:  # warm-up: plans once per signature
            norm(x, mode, residual=h)
        t0 = time.perf_counter()
        for norm in norms:
            y, h = norm(x, mode, residual=h)
        per_call = (time.perf_counter() - t0) / len(norms)
        first = ttnn.get_device_tensors(y)[0]
        steps[mode] = {
            "tokens": tokens,
            "shape": tuple(first.shape),
            "memory": str(first.memory_config().memory_layout).rsplit(".", 1)[-1],
            "host_us": per_call * 1e6,
        }
    return {"norms": len(norms), "build_s": build_s, "steps": steps, "resources": ccl.describe()}


def model_section(layers: int) -> bool:
    from tt_rmsnorm.testing import workers

    print(
        f"\n3. The decoder's norms as model code builds them: DistributedRMSNorm x 2 per layer x {layers} layers + the "
        "final norm,\n   from a state_dict named like Meta's checkpoint, through real ttnn on mock meshes "
        "(validation and program factories; no kernel runs)"
    )
    ok = True
    for name, system, shape, axis, _, _ in _progress(MESHES, "model norms"):
        try:
            got = workers.run_isolated(system, model_norms_in_worker, axis, layers, timeout=1800)
        except Exception as e:  # reported: the demo goes on to the dry runs
            _report(f"  {name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            ok = False
            continue
        _report(
            f"  {name} {shape[0]}x{shape[1]}: {got['norms']} norms built in {got['build_s']:.1f} s; {got['resources']}"
        )
        for mode, s in got["steps"].items():
            _report(
                f"    {mode} T={s['tokens']}: every norm ACCEPTED, output per device {list(s['shape'])} {s['memory']}; "
                f"{s['host_us']:.0f} us host time per norm call (mock)"
            )
    return ok


def dry_run_section() -> bool:
    """Every path through real ttnn on the mock systems (no kernel runs; shapes, dtypes and memory configs)."""
    from tt_rmsnorm.testing import dry_run, workers

    print("\n4. Dry run of every path through real ttnn 0.81.1 on mock clusters (with a residual; values are zeros)")
    print(f"{'system':<10}{'mesh':<6}{'mode':<15}{'path':<9}{'verdict':<10}per-device output")
    ok = True
    for system in _progress(tuple(dry_run.HIDDEN), "mock systems"):
        try:
            rows = dry_run.run(system)
        except Exception as e:  # reported: a broken mock is evidence too
            _report(f"{system:<10}dry run failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            ok = False
            continue
        for r in rows:
            ok &= r["verdict"] == "ACCEPTED"
            detail = r.get("message", "")
            if r["verdict"] == "ACCEPTED":
                outs = r["outputs"]
                shape, dtype, memory = outs[0]
                detail = f"{r['devices']} x {list(shape)} {dtype} {memory}" + ("" if len(outs) == 1 else " (differ!)")
            mode = f"{r['mode']} T={r['tokens']}"
            _report(f"{system:<10}{r['mesh']:<6}{mode:<15}{r['path']:<9}{r['verdict']:<10}{detail}")
    workers.shutdown_workers()
    return ok


def compat_section() -> bool:
    """One decoder layer's norms as tt-metal's decoders run them, through tt_rmsnorm.compat on the mock meshes."""
    from tt_rmsnorm.testing import tt_metal_stand_ins, workers

    print(
        "\n5. One decoder layer of tt-metal's with one import line changed (tt_rmsnorm.compat: tt_transformers' "
        "RMSNorm + DistributedNorm on T3000 and P300,\n   the Galaxy decoder's DistributedNorm with its residual on "
        "the Wormhole and Blackhole Galaxies; the model's CCL object), through real ttnn on mock meshes"
    )
    ok = True
    for system in ("t3k", "galaxy", "p300", "bh-galaxy"):
        for mode in ("decode", "prefill"):
            try:
                attn, ff, ops, allocations = workers.run_isolated(
                    system, tt_metal_stand_ins.decoder_layer, mode, system, timeout=900
                )
            except Exception as e:  # reported: the demo goes on
                _report(f"  {system} {mode}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                ok = False
                continue
            ok &= not allocations
            _report(
                f"  {system:<10}{mode:<8} ACCEPTED: attention_norm -> {attn['devices']} x {list(attn['shape'])} "
                f"{attn['layout']} {attn['buffer']}, ffn_norm -> {list(ff['shape'])}; a planned layer issues "
                f"{', '.join(ops)}; allocates {len(allocations)}"
            )
    workers.shutdown_workers()
    return ok


def parity_section() -> bool:
    from programs.parity import summary

    print("\n6. Cross-backend parity")
    run = summary.print_demo_summary()
    return not run.failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one prefill and one decode case per mesh, 2 layers")
    ap.add_argument("--layers", type=int, default=None, help=f"decoder layers to build (default {LLAMA_70B_LAYERS})")
    ap.add_argument("--no-dry-run", action="store_true", help="skip the mock-cluster sections")
    args = ap.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    hardware = tt_hardware_present()
    backend = (
        "ttnn on Tenstorrent hardware"
        if hardware
        else "reference-model emulation of the N devices (no Tenstorrent hardware here)"
    )
    print(RULE)
    print(f"tt_rmsnorm demo: Llama-70B RMSNorm, hidden {HIDDEN}, epsilon {EPSILON}, on T3000 (1x8) and Galaxy (8x4)")
    print(RULE)
    path_section()
    verdicts = {"numbers": print_numbers(run_cases(hardware, args.quick), backend)}
    if not hardware and not args.no_dry_run:
        layers = args.layers or (2 if args.quick else LLAMA_70B_LAYERS)
        verdicts["model norms"] = model_section(layers)
        verdicts["dry runs"] = dry_run_section()
        verdicts["tt-metal port"] = compat_section()
    verdicts["parity"] = parity_section()
    print()
    print(RULE)
    print("demo: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in verdicts.items()))
    print("PASS" if all(verdicts.values()) else "FAIL")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
