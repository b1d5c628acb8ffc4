"""What the compiler makes of a kernel, without a GPU: Triton compiles it for sm_90a here, ptxas reports registers and
spills, and the PTX shows layout conversions through shared memory, PDL waits and triggers, atomics, fences and async
copies. ptx_report.py beside it prints these facts for the launch shapes the port uses; the tests check them.

Why it exists: the split forward with FP8 row scales ran 100x slow on the GPU. Its PTX held 4,096
shared-memory stores per thread where the bf16 variant held 2 (a layout conversion Triton generated); and the
pipelined split kernels spilled at some launch shapes. Both show here in seconds, with no device time. The fused
all-reduce kernels are compiled with their GPU-only synchronization (the interpreter tests skip it), and the pushed
strategies' claim of no atomics is counted.
Needs Triton's NVIDIA backend (its bundled ptxas); TRITON_INTERPRET must be unset (the kernels are compiled).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from programs.triton.allreduce import kernels as ar_kernels
from programs.triton.fp8 import OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC
from programs.triton.kernels import backward as backward_kernels
from programs.triton.kernels import forward as forward_kernels
from programs.triton.kernels import forward_split as forward_split_kernels

TARGET = GPUTarget("cuda", 90, 32)
# a split kernel's FP8-row store at 16 warps / chunk 8192: 6 shared stores after the fix, 4,096 before
MAX_SHARED_STORES = 64


@dataclass(frozen=True)
class Report:
    name: str
    ptx_lines: int
    shared_stores: int
    registers: int
    spill_bytes: int
    atomics: int
    wide_loads: int  # 16-byte global loads (4-wide ld.global): the JIT's vectorized loads, given divisibility hints
    fences: int  # fence / membar instructions: a gpu-scope release waits for every earlier access of the thread
    volatile_loads: int  # ld.volatile: the split exchange's reads (first read, polling loop, re-read of stale copies)
    l2_prefetches: (
        int  # cp.async.bulk.prefetch.L2: the streaming rows backward's look-ahead (kernels.backward.l2_prefetch_row)
    )
    async_sends: int  # st.async: the cluster forward's partials sent into its peers' shared memory (forward_cluster)
    async_copies: int  # cp.async.cg / .ca: the async rows forward's 16-byte copies of x into shared memory
    barriers: int  # bar.sync / barrier.sync: a CTA-wide wait, two for each reduction through shared memory


# cp.async.cg / .ca (not .commit_group / .wait_group): a 4-16 byte copy from global into shared memory, what
# Report.async_copies counts and one of the global accesses PdlReport.wait_first orders
ASYNC_COPY = re.compile(r"\bcp\.async\.c[ag]\b")
BARRIER = re.compile(r"\bbar(rier)?\.sync\b")


def ptxas() -> str:
    """The ptxas Triton compiles with (its knob: TRITON_PTXAS_PATH where that runs, which torch.compile sets to
    torch's own, whose PTX ISA the bundled one may not read; else the one bundled with Triton)."""
    return triton.knobs.nvidia.ptxas.path


def _signature(fn, pointers: dict[str, str], floats: tuple[str, ...]) -> dict[str, str]:
    """Triton signature: pointers as given, the named floats fp32, other runtime arguments i32, the rest constexpr."""
    consts = {name for name, p in zip(fn.arg_names, fn.params, strict=True) if p.is_constexpr}
    return {n: "constexpr" if n in consts else pointers.get(n, "fp32" if n in floats else "i32") for n in fn.arg_names}


def _divisibility(fn, signature: dict[str, str]) -> dict:
    """The JIT's specialization of a real launch: pointers 16-byte aligned, strides and sizes multiples of 16 (as at
    the benchmark shapes). Without it the loads compile to 2-byte scalar loads and the register and spill counts are
    not those of the kernel that runs."""
    names = [
        n
        for n, t in signature.items()
        if t.startswith("*") or (t == "i32" and (n.startswith("stride") or n in ("M", "N", "H", "H2")))
    ]
    return {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in names}


def _compile(
    fn,
    signature: dict[str, str],
    constexprs: dict,
    num_warps: int,
    maxnreg: int = 0,
    num_ctas: int = 1,
    source_type=ASTSource,
    **options,
):
    if signature.get("w_off") == "constexpr" and "w_off" not in constexprs:
        constexprs = {**constexprs, "w_off": 0.0}  # the weight offset as the usual call passes it
    source = source_type(fn, signature, constexprs, _divisibility(fn, signature))
    options.update(num_warps=num_warps, num_ctas=num_ctas, **({"maxnreg": maxnreg} if maxnreg else {}))
    return triton.compile(source, target=TARGET, options=options)


def compile_report(
    name: str,
    fn,
    signature: dict[str, str],
    constexprs: dict,
    num_warps: int,
    maxnreg: int = 0,
    num_ctas: int = 1,
    source_type=ASTSource,
) -> Report:
    ptx = _compile(fn, signature, constexprs, num_warps, maxnreg, num_ctas, source_type).asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run(
            [ptxas(), "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True, check=True
        ).stderr
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", out)
    spill = re.findall(r"(\d+) bytes spill stores", out)
    lines = ptx.splitlines()
    return Report(
        name,
        len(lines),
        sum("st.shared" in ln for ln in lines),
        int(regs[0]) if regs else -1,
        int(spill[0]) if spill else 0,
        sum("atom." in ln for ln in lines),
        sum("ld.global" in ln and ".v4." in ln for ln in lines),
        sum("fence." in ln or "membar." in ln for ln in lines),
        sum("ld.volatile" in ln for ln in lines),
        sum("cp.async.bulk.prefetch.L2" in ln for ln in lines),
        sum("st.async" in ln for ln in lines),
        sum(ASYNC_COPY.search(ln) is not None for ln in lines),
        sum(BARRIER.search(ln) is not None for ln in lines),
    )


def _fwd_signature(fn, fp8: bool) -> dict[str, str]:
    """A forward kernel's signature as the call launches it: bf16 tensors (FP8 e4m3 output if fp8), fp32 per-row
    values, the split exchange words as int64."""
    ptrs = {n: "*bf16" for n in ("X", "R", "RO", "Y", "W", "B")}
    ptrs.update({n: "*fp32" for n in ("RSIG", "SC", "STATS", "SCALE_IN")}, XSS="*i64", XMX="*i64")
    if fp8:
        ptrs["Y"] = "*fp8e4nv"
    return _signature(fn, ptrs, ("inv_n", "eps", "w_off", "scale_ub", "fp8_max"))


def _bwd_signature(fn) -> dict[str, str]:
    """A backward kernel's signature as the call launches it: bf16 tensors and weight gradients, fp32 rsigma and
    partial rows, the split exchange words as int64."""
    ptrs = {n: "*bf16" for n in ("DY", "H", "W", "DX", "DRES", "DW", "DB")}
    ptrs.update({n: "*fp32" for n in ("RSIG", "DWP", "DBP")}, XDOT="*i64")
    return _signature(fn, ptrs, ("inv_n", "w_off"))


def _fwd_flags(out_mode: int, store_rsigma: bool = False) -> dict:
    """A weight and nothing else fused (no bias, residual or stats); rsigma stored if asked."""
    return dict(
        HAS_W=True,
        HAS_B=False,
        HAS_RES=False,
        HAS_STATS=False,
        STORE_RSIG=store_rsigma,
        OUT_MODE=out_mode,
        Y_DROP=0,
        Y_MIN_NORMAL=0.0,
        Y_SUB=0.0,
    )


def _cap(maxnreg: int) -> str:
    return f" maxnreg={maxnreg}" if maxnreg else ""


def fwd_rows(
    block_n: int,
    num_warps: int,
    block_m: int,
    maxnreg: int = 0,
    store_rsigma: bool = False,
    out_mode: int = OUT_CAST,
    joint_max: bool = False,
) -> Report:
    """The register-resident forward as the plain call launches it (bf16 in and out, a weight; rsigma stored as the
    autograd forward asks); out_mode FP8: e4m3 output, joint_max as the launch sets JOINT_MAX."""
    fn = forward_kernels.fwd_rows_kernel
    consts = dict(BLOCK_M=block_m, BLOCK_N=block_n, SLICES=1, JOINT_MAX=joint_max, **_fwd_flags(out_mode, store_rsigma))
    return compile_report(
        f"fwd rows N={block_n} warps={num_warps}{_cap(maxnreg)} block_m={block_m}"
        f"{' rsigma' if store_rsigma else ''} out_mode={out_mode}{' joint' if joint_max else ''}",
        fn,
        _fwd_signature(fn, out_mode != OUT_CAST),
        consts,
        num_warps,
        maxnreg,
    )


def fwd_split(chunk: int, num_warps: int, block_m: int, out_mode: int, fp8: bool, maxnreg: int = 0) -> Report:
    fn = forward_split_kernels.fwd_split_kernel
    consts = dict(SPLITS=8, XW=8, CHUNK=chunk, BLOCK_M=block_m, **_fwd_flags(out_mode))
    return compile_report(
        f"fwd split chunk={chunk} warps={num_warps}{_cap(maxnreg)} block_m={block_m} out_mode={out_mode}",
        fn,
        _fwd_signature(fn, fp8),
        consts,
        num_warps,
        maxnreg,
    )


def fwd_split_words(chunk: int, num_warps: int, stages: int, splits: int, maxnreg: int = 0) -> Report:
    fn = forward_split_kernels.fwd_split_words_kernel
    sig = _signature(
        fn, {"X": "*bf16", "Y": "*bf16", "W": "*bf16", "RSIG": "*fp32", "XSS": "*i64"}, ("inv_n", "eps", "w_off")
    )
    consts = dict(SPLITS=splits, XW=splits, CHUNK=chunk, BLOCK_M=1, STAGES=stages, HAS_W=True, STORE_RSIG=True)
    return compile_report(
        f"fwd split words chunk={chunk} warps={num_warps}{_cap(maxnreg)} stages={stages}",
        fn,
        sig,
        consts,
        num_warps,
        maxnreg,
    )


def _gluon_signature(fn) -> dict[str, str]:
    """A Gluon forward's (forward_cluster, forward_async) signature as the plain call launches it: bf16 x, y, weight
    and bias, fp32 rsigma."""
    return _signature(
        fn, {"X": "*bf16", "Y": "*bf16", "W": "*bf16", "B": "*bf16", "RSIG": "*fp32"}, ("inv_n", "eps", "w_off")
    )


def _gluon_report(
    name: str,
    fn,
    consts: dict,
    num_warps: int,
    maxnreg: int = 0,
    num_ctas: int = 1,
    signature: dict[str, str] | None = None,
) -> Report:
    from triton.experimental.gluon._runtime import GluonASTSource

    return compile_report(
        name,
        fn,
        signature or _gluon_signature(fn),
        consts,
        num_warps,
        maxnreg=maxnreg,
        num_ctas=num_ctas,
        source_type=GluonASTSource,
    )


def fwd_cluster(
    n: int,
    chunk: int,
    num_warps: int,
    store_rsigma: bool = True,
    maxnreg: int = 0,
    bias: bool = False,
    out_mode: int = OUT_CAST,
    busy: bool = True,
) -> Report:
    """The cluster forward with a weight (and a bias if asked); out_mode FP8 (fp8.OUT_*): e4m3 output; busy
    as cluster_staging.x_staged takes it (False: too few CTAs to stage x)."""
    from programs.triton.kernels import forward_cluster as rc

    consts = rc.constants(n, chunk, num_warps, 2, 2 if bias else 0, store_rsigma, busy=busy, out_mode=out_mode)
    fn = rc.fwd_cluster_kernel
    sig = _fwd_signature(fn, out_mode in (OUT_FP8_ROW, OUT_FP8_STATIC))
    return _gluon_report(
        f"fwd cluster N={n} chunk={chunk} warps={num_warps}{_cap(maxnreg)} ctas={consts['K']}"
        f" out_mode={out_mode}{'' if busy else ' not busy'}",
        fn,
        consts,
        num_warps,
        maxnreg,
        consts["K"],
        sig,
    )


def fwd_async(n: int, block_m: int, num_warps: int) -> Report:
    """The cp.async rows forward with a weight, rsigma stored."""
    from programs.triton.kernels import forward_async as ra

    consts = ra.constants(n, block_m, num_warps, 2, True, False, True)
    return _gluon_report(f"fwd async N={n} block_m={block_m} warps={num_warps}", ra.fwd_async_kernel, consts, num_warps)


@dataclass(frozen=True)
class PdlReport:
    name: str
    launch_pdl: bool  # the compiled kernel's launch sets the programmatic-dependent-launch attribute
    waits: int  # griddepcontrol.wait: the previous kernel's writes visible from here on
    triggers: int  # griddepcontrol.launch_dependents
    wait_first: bool  # the wait precedes every global load, store, atomic and async copy of the PTX
    trigger_at: str  # where the trigger sits: "start" (before any global access), "end" (after the last global
    # store), "after_async_wait" (after the wait for the async copies), else "middle"; "" without a trigger


# PTX that touches global memory: what must not run before the previous kernel's writes are visible
GLOBAL_ACCESS = re.compile(rf"\b(ld|st|atom|red)\.global|{ASYNC_COPY.pattern}")


def pdl(kernel: str, enabled: bool = True) -> PdlReport:
    """The rows, looped, cp.async or cluster forward ("rows", "looped", "async", "cluster") compiled as forward.py
    launches it with enable_pdl on (or off): a bf16 row of 4096-8192 columns with a weight (65536 in 8 CTAs of 8192
    for the cluster kernel, rsigma stored); or the backward's rows or decode kernel or the partials' sum ("bwd_rows",
    "bwd_decode", "sum_partials") as backward.py launches it, with dweight, dbias and dresidual."""
    f, flags = forward_kernels, _fwd_flags(OUT_CAST)
    num_ctas = 1
    if kernel == "cluster":
        from triton.experimental.gluon._runtime import GluonASTSource

        from programs.triton.kernels import forward_cluster as rc

        fn, consts, source_type = rc.fwd_cluster_kernel, rc.constants(65536, 8192, 4, 2, 0, True), GluonASTSource
        sig, num_ctas = _fwd_signature(fn, False), consts["K"]
    elif kernel == "async":
        from triton.experimental.gluon._runtime import GluonASTSource

        from programs.triton.kernels import forward_async as ra

        fn, consts, source_type = ra.fwd_async_kernel, ra.constants(4096, 1, 4, 2, True, False, False), GluonASTSource
        sig = _gluon_signature(fn)
    elif kernel.startswith("bwd") or kernel == "sum_partials":
        b, bflags = backward_kernels, dict(HAS_W=True, NEED_DB=True, HAS_DRES=True)
        fn, consts = {
            "bwd_rows": (b.bwd_rows_kernel, dict(BLOCK_M=1, BLOCK_N=4096, STREAM=False, L2_AHEAD=0, **bflags)),
            "bwd_decode": (b.bwd_decode_kernel, dict(BLOCK_M=1, BLOCK_N=8192, COLS=128, **bflags)),
            "sum_partials": (b.sum_partials_kernel, dict(BLOCK_G=32, BLOCK=128)),
        }[kernel]
        sig = _bwd_signature(fn) if kernel != "sum_partials" else _signature(fn, {"P": "*fp32", "OUT": "*bf16"}, ())
        source_type = ASTSource
    else:
        fn, consts = {
            "rows": (f.fwd_rows_kernel, dict(BLOCK_M=1, BLOCK_N=8192, SLICES=1, **flags)),
            "looped": (f.fwd_looped_kernel, dict(CHUNK=4096, HEAD=0, WORDS=0, REVERSE=False, ONE_ROW=True, **flags)),
        }[kernel]
        sig, source_type = _fwd_signature(fn, False), ASTSource
    compiled = _compile(
        fn, sig, {**consts, "PDL": enabled}, 4, num_ctas=num_ctas, source_type=source_type, launch_pdl=enabled
    )
    lines = compiled.asm["ptx"].splitlines()
    waits = [i for i, ln in enumerate(lines) if "griddepcontrol.wait" in ln]
    triggers = [i for i, ln in enumerate(lines) if "griddepcontrol.launch_dependents" in ln]
    accesses = [i for i, ln in enumerate(lines) if GLOBAL_ACCESS.search(ln)]
    stores = [i for i, ln in enumerate(lines) if re.search(r"\bst\.global", ln)]
    async_waits = [i for i, ln in enumerate(lines) if "cp.async.wait_group" in ln]
    trigger_at = ""
    if triggers:
        t = triggers[0]
        if accesses and t < accesses[0]:
            trigger_at = "start"
        elif stores and t > stores[-1]:
            trigger_at = "end"
        elif async_waits and t > async_waits[0] and not any(async_waits[0] < i < t for i in accesses):
            trigger_at = "after_async_wait"
        else:
            trigger_at = "middle"
    return PdlReport(
        f"{kernel} pdl={enabled}",
        bool(compiled.metadata.launch_pdl),
        len(waits),
        len(triggers),
        bool(waits) and bool(accesses) and waits[0] < accesses[0],
        trigger_at,
    )


def bwd_split(chunk: int, num_warps: int, block_m: int) -> Report:
    fn = backward_kernels.bwd_split_kernel
    sig = _bwd_signature(fn)
    consts = dict(SPLITS=8, XW=8, CHUNK=chunk, BLOCK_M=block_m, HAS_W=True, NEED_DB=False, HAS_DRES=False)
    return compile_report(f"bwd split chunk={chunk} warps={num_warps} block_m={block_m}", fn, sig, consts, num_warps)


def bwd_split_words(chunk: int, num_warps: int, stages: int, splits: int = 8) -> Report:
    fn = backward_kernels.bwd_split_words_kernel
    consts = dict(SPLITS=splits, XW=splits, CHUNK=chunk, BLOCK_M=1, STAGES=stages, HAS_W=True)
    return compile_report(
        f"bwd split words chunk={chunk} warps={num_warps} stages={stages}", fn, _bwd_signature(fn), consts, num_warps
    )


def bwd_rows(block_n: int, num_warps: int, block_m: int, stream: bool, l2_ahead: int) -> Report:
    fn = backward_kernels.bwd_rows_kernel
    consts = dict(
        BLOCK_M=block_m, BLOCK_N=block_n, HAS_W=True, NEED_DB=False, HAS_DRES=False, STREAM=stream, L2_AHEAD=l2_ahead
    )
    return compile_report(
        f"bwd rows N={block_n} warps={num_warps} block_m={block_m}{' stream' if stream else ''} l2_ahead={l2_ahead}",
        fn,
        _bwd_signature(fn),
        consts,
        num_warps,
    )


def bwd_decode(m: int, cols: int, num_warps: int) -> Report:
    """The decode backward as launched for M rows of 8192 (dx programs and dweight column programs in one kernel)."""
    fn = backward_kernels.bwd_decode_kernel
    sig = _bwd_signature(fn)
    consts = dict(BLOCK_M=m, BLOCK_N=8192, COLS=cols, HAS_W=True, NEED_DB=True, HAS_DRES=True)
    return compile_report(f"bwd decode M={m} cols={cols} warps={num_warps}", fn, sig, consts, num_warps)


def allreduce(strategy: str, world: int, block_m: int, num_warps: int, residual: bool) -> Report:
    """A fused all-reduce kernel as the GPU runs it (SYNC: barriers, flag polling), rank 0 of `world`, H=8192."""
    fn, sig, consts = _allreduce_source(strategy, world, block_m, num_warps, residual)
    return compile_report(
        f"allreduce {strategy} world={world} {block_m}x{num_warps}{' residual' if residual else ''}",
        fn,
        sig,
        consts,
        num_warps,
    )


# The registers a Lamport kernel stores to empty its words: two 16-bit marks (0x80008000) or the 32-bit scale mark
_MARKS = ("-2147450880", "-2147483648")


def lamport_empties(strategy: str, world: int, num_warps: int, residual: bool) -> tuple[int, int]:
    """(stores of the empty mark, those of them with no CTA barrier since the last volatile load) in the PTX of
    one_shot_lamport or two_shot_lamport, rank 1 of `world` at H = 8192. A mark store reached with no barrier after
    the polls could empty a word that another thread of the program, holding a copy of it, has not read yet
    (lamport.lamport_take)."""
    fn, sig, consts = _allreduce_source(strategy, world, 1, num_warps, residual, rank=1)
    ptx = _compile(fn, sig, consts, num_warps).asm["ptx"]
    marks, stores, unguarded, polled = set(), 0, 0, False
    for ln in ptx.splitlines():
        m = re.match(r"\s*mov\.b32\s+(%r\d+),\s*(-?\d+);", ln)
        if m and m.group(2) in _MARKS:
            marks.add(m.group(1))
        if "ld.volatile" in ln:
            polled = True
        elif "bar.sync" in ln or "barrier.sync" in ln:
            polled = False
        elif "st.global" in ln:
            regs = re.findall(r"%r\d+", ln.split("{", 1)[1]) if "{" in ln else []
            if regs and all(r in marks for r in regs):
                stores += 1
                unguarded += polled
    return stores, unguarded


def _allreduce_source(strategy: str, world: int, block_m: int, num_warps: int, residual: bool, rank: int = 0):
    """(kernel, signature, constexprs) of a fused all-reduce strategy (by name) for `rank` of `world` at H = 8192."""
    fn = {
        "one_shot_flags": ar_kernels.one_shot_flags_kernel,
        "two_shot_pulled": ar_kernels.two_shot_pulled_kernel,
        "one_shot_lamport": ar_kernels.one_shot_lamport_kernel,
        "two_shot_lamport": ar_kernels.two_shot_lamport_kernel,
    }[strategy]
    lamport = "lamport" in strategy
    ptrs = {
        "X": "*bf16",
        "X16": "*i16",
        "X32": "*i32",
        "R": "*bf16",
        "RO": "*bf16",
        "Y": "*fp8e4nv",
        "SC": "*fp32",
        "W": "*bf16",
        "EPOCH": "*i32",
        "CALLS": "*i32",
        "STALL_REC": "*i32",
    }
    peers = (("B", "*i16" if lamport else "*i64"), ("G", "*i16"), ("S", "*i32" if lamport else "*fp32"))
    for prefix, ty in (*peers, ("I", "*bf16"), ("Q", "*fp8e4nv"), ("O", "*bf16"), ("F", "*i32")):
        ptrs.update({f"{prefix}{r}": ty for r in range(world)})
    sig = _signature(fn, ptrs, ("inv_h", "eps", "w_off", "scale_ub", "fp8_max"))
    if "STALL_NS" in sig:
        sig["STALL_NS"] = "i64"
    consts = dict(
        RANK=rank,
        WORLD=world,
        BLOCK_H=8192,
        HAS_W=True,
        HAS_RES=residual,
        SYNC=True,
        PHASES=7,
        Y_DROP=0,
        Y_MIN_NORMAL=0.0,
        Y_SUB=0.0,
    )
    piece = num_warps * 256 if lamport else 1024
    consts.update(dict(BLOCK_M=block_m) if strategy == "two_shot_pulled" else dict(PIECE=piece, XDT=tl.bfloat16))
    for name in list(sig):  # the unused peers' pointers are None
        if name[0] in "BGIQSOF" and name[1:].isdigit() and int(name[1:]) >= world:
            sig[name], consts[name] = "constexpr", None
    return fn, sig, consts
