"""The PTX of the cluster kernel's exchange (forward_cluster.py): the K CTAs of a row meet in distributed shared
memory. `arrive_asm` declares the slots and the mbarrier at the kernel's start, `exchange_asm` sends each CTA's partial
sum (and its max|x*w| for FP8 row scales) to every peer with `st.async` and sums the slots in rank order, so every
CTA gets the same bits; `rescaled_exchange_asm` is the second exchange of a row past fp32's range (row_stats.py's
rule), through plain stores and a cluster barrier. Gluon cannot reduce across a cluster's CTAs, hence inline PTX."""

from __future__ import annotations


def arrive_asm(k: int, values: int = 1) -> str:
    """PTX at the kernel's start: the mbarrier and the K value slots (`values` floats a CTA), declared at function
    scope (the exchange's asm names them). Thread 0 initializes the mbarrier, arrives on it at once expecting
    4 * values * K bytes (phase 0 then completes when the K partials have landed) and fences the init for the cluster;
    every thread arrives on the cluster barrier (relaxed), which the exchange waits on before it writes into a peer: a
    peer's mbarrier must be initialized, and the CTA started, first."""
    return "\n".join(
        [
            ".shared .align 8 .b64 rmsc_bar;",
            f".shared .align 16 .f32 rmsc_val[{values * k}];",
            f".shared .align 16 .f32 rmsc_val2[{values * k}];",
            ".shared .align 4 .f32 rmsc_ss;",
            "{",
            ".reg .pred p;",
            ".reg .b32 t, a;",
            "mov.u32 t, %tid.x;",
            "setp.eq.u32 p, t, 0;",
            "mov.u32 a, rmsc_bar;",
            "@p mbarrier.init.shared::cta.b64 [a], 1;",
            f"@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [a], {4 * values * k};",
            "@p fence.mbarrier_init.release.cluster;",
            "}",
            "barrier.cluster.arrive.relaxed.aligned;",
            "mov.u32 $0, $1;",
        ]
    )


def exchange_asm(k: int, with_max: bool = False) -> str:
    """PTX of the exchange: $1 this CTA's partial, $0 the row's sum (slots summed in rank order). with_max: the CTA
    also sends $3 (its max|x*w|, the FP8 row max before rs) beside $2, in one 8-byte st.async; $0 is the sum and $1
    the max of the K maxima. The wait loop's exit is voted by the whole warp: ptxas treats a loop over one shared
    address as uniform (its registers then too), and a warp that split there read a clobbered base address (seen
    with polled slots)."""
    vals = 2 if with_max else 1
    send = "{bits, mbits}" if with_max else "bits"
    lines = [
        "{",
        ".reg .pred p, q;",
        ".reg .b32 base, bar, me, tid, la, ra, rb, bits, mbits;",
        f".reg .f32 slot<{vals * k}>;",
        "mov.u32 base, rmsc_val;",
        "mov.u32 bar, rmsc_bar;",
        "mov.u32 me, %cluster_ctarank;",
        "mov.u32 tid, %tid.x;",
        f"setp.lt.u32 p, tid, {k};",
        f"mad.lo.u32 la, me, {4 * vals}, base;",
        f"mov.b32 bits, ${2 if with_max else 1};",
    ]
    if with_max:
        lines.append("mov.b32 mbits, $3;")
    lines += [
        "barrier.cluster.wait.acquire.aligned;",
        "@p mapa.shared::cluster.u32 ra, la, tid;",
        "@p mapa.shared::cluster.u32 rb, bar, tid;",
        f"@p st.async.shared::cluster.mbarrier::complete_tx::bytes{'.v2' if with_max else ''}.b32 [ra], {send}, [rb];",
        "wait_${:uid}:",
        "mbarrier.try_wait.parity.shared::cta.b64 q, [bar], 0;",
        "vote.sync.all.pred q, q, 0xffffffff;",
        "@!q bra.uni wait_${:uid};",
    ]
    n = vals * k
    for j in range(0, n, 4):
        if n - j >= 4:
            lines.append(f"ld.shared.v4.f32 {{slot{j}, slot{j + 1}, slot{j + 2}, slot{j + 3}}}, [base+{4 * j}];")
        else:
            lines += [f"ld.shared.f32 slot{i}, [base+{4 * i}];" for i in range(j, n)]
    # value j of rank r is slot[vals * r + j]: the sums in rank order, the maxima in any order (max is exact)
    lines += [f"add.f32 slot0, slot0, slot{vals * r};" for r in range(1, k)]
    if with_max:
        lines += [f"max.f32 slot1, slot1, slot{vals * r + 1};" for r in range(1, k)]
        lines += ["mov.f32 $1, slot1;"]
    # the row's sum also into rmsc_ss, where SUM_ASM reads it back as one scalar (row_stats' range test needs a
    # scalar, and a reduction over the cluster's CTAs does not lower): each thread reads its own store
    lines += ["mov.u32 base, rmsc_ss;", "st.shared.f32 [base], slot0;", "mov.f32 $0, slot0;", "}"]
    return "\n".join(lines)


# the row's sum as the exchange left it in rmsc_ss: a scalar (its operand only orders it after the exchange's asm);
# and the shared address of rmsc_val2, for the second pass's exchange in a called function
SUM_ASM = "{ .reg .b32 a; mov.u32 a, rmsc_ss; ld.shared.f32 $0, [a]; }"
VAL2_ASM = "mov.u32 $0, rmsc_val2;"


def rescaled_exchange_asm(k: int, with_max: bool = False) -> str:
    """PTX of the second pass's exchange (rows past fp32's range only, row_stats): every CTA's scaled partial $1
    (and with_max its max|x c w| $2) stored into slot rank of rmsc_val2 (its shared address the last operand: the
    exchange runs in a called function, where the kernel's shared names are not in scope) in every peer by threads
    0..K-1, a cluster
    barrier (release / acquire: the stores are visible after it; every CTA of the cluster takes this branch, its
    test reading the same sum), then $0 the sum in rank order (and $1 the max)."""
    vals = 2 if with_max else 1
    lines = [
        "{",
        ".reg .pred p;",
        ".reg .b32 base, me, tid, la, ra, bits, mbits;",
        f".reg .f32 slot<{vals * k}>;",
        f"mov.u32 base, ${4 if with_max else 2};",
        "mov.u32 me, %cluster_ctarank;",
        "mov.u32 tid, %tid.x;",
        f"setp.lt.u32 p, tid, {k};",
        f"mad.lo.u32 la, me, {4 * vals}, base;",
        f"mov.b32 bits, ${2 if with_max else 1};",
        "@p mapa.shared::cluster.u32 ra, la, tid;",
    ]
    if with_max:
        lines += ["mov.b32 mbits, $3;", "@p st.shared::cluster.v2.b32 [ra], {bits, mbits};"]
    else:
        lines += ["@p st.shared::cluster.b32 [ra], bits;"]
    lines += ["barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;"]
    n = vals * k
    lines += [f"ld.shared.f32 slot{i}, [base+{4 * i}];" for i in range(n)]
    lines += [f"add.f32 slot0, slot0, slot{vals * r};" for r in range(1, k)]
    if with_max:
        lines += [f"max.f32 slot1, slot1, slot{vals * r + 1};" for r in range(1, k)]
        lines += ["mov.f32 $1, slot1;"]
    lines += ["mov.f32 $0, slot0;", "}"]
    return "\n".join(lines)
