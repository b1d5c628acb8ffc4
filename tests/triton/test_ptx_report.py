"""The compiled kernels, checked without a GPU (tools/compiled.py, and the report tools/ptx_report.py):
Triton compiles them for sm_90a in a subprocess (the test session runs the interpreter) and the PTX must hold no
layout conversion through shared memory of the kind that made the split kernel's FP8 row output 100x slow."""

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _compiled(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# what every _compiled_json snippet may use: the report (p), the launch rules (f, b) and the output modes
PRELUDE = (
    "import json, torch, triton; from tools import compiled as p; from programs.triton import forward_config as f, "
    "backward_config as b; from programs.triton.fp8 import OUT_CAST, OUT_FP8_ROW, OUT_FP8_STATIC; "
)


class _CompileServer:
    """This test process's compile server (compile_server.py): started on first use, PRELUDE imported there once,
    stopped when the process exits."""

    process = None

    @classmethod
    def run(cls, code: str) -> dict:
        if cls.process is None or cls.process.poll() is not None:
            env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
            server = [sys.executable, str(Path(__file__).with_name("compile_server.py")), PRELUDE]
            cls.process = subprocess.Popen(
                server, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            atexit.register(cls.process.stdin.close)
        cls.process.stdin.write(json.dumps({"code": code}) + "\n")
        cls.process.stdin.flush()
        reply = cls.process.stdout.readline()
        assert reply, f"the compile server exited ({cls.process.poll()})"
        return json.loads(reply)


def _compiled_json(code: str):
    """Run `code` after PRELUDE, compiled (not interpreted); it prints one JSON value last, returned parsed."""
    out = _CompileServer.run(code)
    assert out["returncode"] == 0, out["stderr"][-2000:]
    return json.loads(out["stdout"].strip().splitlines()[-1])


def _ptxas_present() -> bool:
    probe = _compiled("from tools.compiled import ptxas; import os; print(os.path.exists(ptxas()))")
    return probe.returncode == 0 and probe.stdout.strip() == "True"


pytestmark = pytest.mark.skipif(not _ptxas_present(), reason="Triton's NVIDIA backend (bundled ptxas) is not installed")


def test_split_fp8_row_store_has_no_shared_memory_conversion():
    one_row, two_rows, limit = _compiled_json(
        "print(json.dumps([p.fwd_split(8192, 16, 1, OUT_FP8_ROW, True).shared_stores, "
        "p.fwd_split(8192, 16, 2, OUT_FP8_ROW, True).shared_stores, p.MAX_SHARED_STORES]))"
    )
    # a layout conversion through shared memory here stored 4,096 times a thread at one row per exchange
    assert one_row <= limit, f"one row per exchange: {one_row} shared stores"
    assert two_rows <= limit, f"two rows per exchange: {two_rows} shared stores"


def test_report_check_passes_for_the_default_shapes():
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "tools.ptx_report", "--check"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "bwd split chunk=8192" in out.stdout


def test_capped_rows_forward_fills_the_sm_without_spilling():
    """fwd_config caps the plain rows forward at 32 registers on rows of >= 4096 columns at 16 elements a thread (a
    full SM: two 32-warp or four 16-warp programs); uncapped the compilers took 38-40. The cap
    must cost no spill in the kernels it is set for, with rsigma stored (the autograd forward) or not."""
    rows = _compiled_json(
        "f.sm_count = lambda d: 132; "
        "cs = [(n, f.fwd_config(m, n, torch.device('cuda'))) for m, n in ((4096, 16384), (8192, 8192), (32768, "
        "4096))]; "
        "print(json.dumps([[n, c.num_warps, c.maxnreg, r.registers, r.spill_bytes] for n, c in cs for r in "
        "(p.fwd_rows(triton.next_power_of_2(n), c.num_warps, c.block_m, c.maxnreg, s) for s in (False, True))]))"
    )
    assert [r[:3] for r in rows] == [[16384, 32, 32]] * 2 + [[8192, 16, 32]] * 2 + [[4096, 16, 32]] * 2, rows
    assert all(0 < r[3] <= 32 and r[4] == 0 for r in rows), rows


@pytest.mark.parametrize("block_n, warps", [(8192, 32), (2048, 8), (512, 4)], ids=["8192-32w", "2048-8w", "512-4w"])
def test_decode_fp8_row_scales_take_the_max_in_the_sum_reduction(block_n, warps):
    """Decode launches of the rows forward (<= 8 elements a thread, JOINT_MAX) with FP8 row scales reduce the sum of
    squares and max|x*w| together: fewer CTA barriers than the two reductions one after the other (H200, 1 x 8192:
    2.04 against 2.29 us), no spill; these launches are within JOINT_MAX_PER_THREAD."""
    r = _compiled_json(
        f"rs = [p.fwd_rows({block_n}, {warps}, 1, out_mode=OUT_FP8_ROW, joint_max=j) for j in (False, True)]; "
        "print(json.dumps([[x.barriers, x.spill_bytes] for x in rs] + [f.JOINT_MAX_PER_THREAD]))"
    )
    (two, _), (one, spill), per_thread = r
    assert one < two and spill == 0, r
    assert block_n // (32 * warps) <= per_thread


def test_fp8_rows_forward_at_32_elements_a_thread_spills_nothing():
    """fwd_config's FP8 rows launches of 16-bit x as given take 32 elements a thread: row scales (the
    sum, then the row max) and a given scale at 1024-8192 columns compile without a spill."""
    r = _compiled_json(
        "f.sm_count = lambda d: 132; "
        "f.dram_gbps_per_sm = lambda d: 36.5; "
        "cs = [(n, f.fwd_config(m, n, torch.device('cuda'), fused=True, words_ok=True)) for m, n in "
        "((600, 8192), (32768, 4096), (65536, 2048), (65536, 1024))]; "
        "print(json.dumps([[n, c.num_warps, c.block_m, x.spill_bytes] for n, c in cs for x in "
        "(p.fwd_rows(n, c.num_warps, c.block_m, out_mode=o) for o in (OUT_FP8_ROW, OUT_FP8_STATIC))]))"
    )
    assert [x[:3] for x in r] == [[8192, 8, 1]] * 2 + [[4096, 4, 1]] * 2 + [[2048, 2, 1]] * 2 + [[1024, 2, 2]] * 2, r
    assert all(x[3] == 0 for x in r), r


def test_streaming_rows_backward_prefetches_into_l2_without_spilling():
    """8192 < N <= 16384 (backward_config.STREAM_ROWS_N): the rows backward holds nothing ahead in registers and asks
    the L2 for the next row's x and dy, two bulk prefetches; at 32 warps it must fit 64 registers with no spill (the
    register look-ahead spilled 176 bytes there). The small-N tile accumulator must not spill either."""
    stream, tile = _compiled_json(
        "print(json.dumps([[r.registers, r.spill_bytes, r.l2_prefetches] for r in "
        "(p.bwd_rows(b.STREAM_ROWS_N, 32, 1, True, 1), p.bwd_rows(1024, 16, 8, False, 0))]))"
    )
    assert stream[0] <= 64 and stream[1] == 0 and stream[2] == 2, stream
    assert tile[1] == 0 and tile[2] == 0, tile


def test_lean_dram_rows_backward_holds_its_look_ahead_without_spilling():
    """Where DRAM per SM is lean (H100) bwd_config gives the rows backward 8 warps at N = 4096-8192: each thread then
    holds 32-64 elements of x and dy, their look-ahead, the weight and the dweight accumulator; it must fit the
    register file with no spill (ptxas: 254 registers at N = 8192 under Triton 3.6 and 3.8)."""
    rows = _compiled_json(
        "b.sm_count = lambda d: 132; b.dram_gbps_per_sm = lambda d: 25.4; "
        "cs = [b.bwd_config(m, n, torch.device('cuda')) for m, n in ((8192, 8192), (32768, 4096))]; "
        "print(json.dumps([[c.num_warps, c.block_m, r.registers, r.spill_bytes] for c, n in zip(cs, (8192, 4096)) "
        "for r in [p.bwd_rows(n, c.num_warps, c.block_m, False, 0)]]))"
    )
    assert [r[:2] for r in rows] == [[8, 1], [8, 2]], rows
    assert all(r[2] <= 255 and r[3] == 0 for r in rows), rows


def test_split_backward_words_hold_their_stages_without_spilling():
    """The split backward's words (bwd_config where a row is cut in 8-16 chunks: 3 stages; 32 or more: 4) exist to
    hold the blocks in half the registers of 16-bit elements: at chunk 8192 / 16 warps the element kernel spills 24
    bytes under Triton 3.6 and the words kernel none at 3 stages (4 stages: none under 3.6, 8 bytes under 3.8), and its
    blocks still load 16 bytes at a time."""
    words3, words4 = _compiled_json(
        "print(json.dumps([[r.registers, r.spill_bytes, r.wide_loads] for r in "
        "(p.bwd_split_words(b.SPLIT_CHUNK, b.SPLIT_WARPS, 3), p.bwd_split_words(b.SPLIT_CHUNK, b.SPLIT_WARPS, 4, "
        "32))]))"
    )
    assert words3[0] <= 128 and words3[1] == 0, words3
    assert words4[0] <= 128 and words4[1] <= 8, words4
    assert words3[2] >= 12 and words4[2] >= 16, (words3, words4)  # 2 tensors x 2 vector loads x stages (+ weight)


def test_split_forward_words_hold_their_stages_without_spilling():
    """The split forward's words (fwd_config for plain 16-bit rows past 65536 columns; 4 stages from 32 chunks) at its
    launch (8 warps, two programs an SM under a 128-register cap, where the element kernel spills 22 bytes): no spill
    at 3 stages, at 4 none under Triton 3.6 and 4 bytes under 3.8; x loaded 16 bytes at a time."""
    reports = _compiled_json(
        "print(json.dumps([[r.registers, r.spill_bytes, r.wide_loads] for r in "
        "(p.fwd_split_words(f.SPLIT_CHUNK, f.SPLIT_WARPS, 3, 16, f.SPLIT_MAXNREG), "
        "p.fwd_split_words(f.SPLIT_CHUNK, f.SPLIT_WARPS, 4, 32, f.SPLIT_MAXNREG))]))"
    )
    assert reports[0][0] <= 128 and reports[0][1] == 0, reports
    assert reports[1][0] <= 128 and reports[1][1] <= 8, reports
    assert reports[0][2] >= 12 and reports[1][2] >= 16, reports  # 4 vector loads of x a stage (+ the weight)


def test_split_kernels_compile_to_16_byte_loads():
    """Compiled with the JIT's divisibility hints (compiled._divisibility), the split kernels load x (and dy) 16
    bytes at a time; without the hints the report showed 2-byte loads and another kernel's registers."""
    wide = _compiled_json(
        "print(json.dumps([r.wide_loads for r in (p.fwd_split(16384, 16, 1, OUT_CAST, False), p.bwd_split(8192, 16, "
        "1))]))"
    )
    assert all(n >= 3 for n in wide), wide  # the pipeline's blocks: at least three 16-byte loads each kernel


def test_split_exchange_has_no_atomics_or_fences():
    """The split kernels exchange partials as flagged words (split_exchange.split_publish / split_reduce): no counter
    atomic and no fence, whose gpu-scope release waited for the look-ahead loads and drained the pipeline every step;
    the reads are volatile: a first read, the polling loop and the re-read of stale copies."""
    rows = _compiled_json(
        "print(json.dumps([[r.atomics, r.fences, r.volatile_loads] for r in (p.fwd_split(16384, 16, 1, OUT_CAST, "
        "False), "
        "p.fwd_split(8192, 16, 2, OUT_FP8_ROW, True), p.bwd_split(8192, 16, 1))]))"
    )
    for atomics, fences, volatile in rows:
        assert atomics == 0 and fences == 0, rows
        assert volatile >= 3, rows


def test_fused_allreduce_kernels_compile_with_their_gpu_synchronization():
    """The interpreter tests run without SYNC (no polling, no barriers); this compiles that code for sm_90a, and the
    pushed strategies must hold no atomics (their call counters are plain loads and stores, kernels.py) while the
    barrier one (two-shot pulled) does."""
    push2, push8, lamport, lamport2, barrier = _compiled_json(
        "print(json.dumps([p.allreduce('one_shot_flags', 2, 1, 16, True).atomics, "
        "p.allreduce('one_shot_flags', 8, 1, 16, False).atomics, "
        "p.allreduce('one_shot_lamport', 4, 1, 16, True).atomics, "
        "p.allreduce('two_shot_lamport', 4, 1, 16, True).atomics, "
        "p.allreduce('two_shot_pulled', 3, 1, 16, False).atomics]))"
    )
    assert push2 == 0 and push8 == 0, f"one_shot_flags compiled with {push2} / {push8} atomic instructions"
    assert lamport == 0 and lamport2 == 0, f"the Lamport kernels compiled with {lamport} / {lamport2} atomics"
    assert barrier > 0, "the pulled kernel's barrier must use atomics (release / acquire at system scope)"


def test_lamport_kernels_empty_a_word_only_after_every_thread_read_it():
    """The Lamport strategies empty each polled word (lamport.lamport_take) after a CTA barrier: a word held by several
    threads (two-shot Lamport's [1, 1] scale word is held by all of them) is polled by each thread alone, and without
    the barrier the one thread that stores the mark emptied it while another was still polling, which then never saw
    it (the two-shot Lamport stall, docs/allreduce.md). Every mark store must follow a barrier after the last volatile
    load."""
    two, one = "two_shot_lamport", "one_shot_lamport"
    rows = _compiled_json(
        f"print(json.dumps([p.lamport_empties(s, w, nw, r) for s, w, nw, r in (('{two}', 2, 16, False), "
        f"('{two}', 2, 8, False), ('{two}', 4, 16, True), ('{one}', 2, 16, False))]))"
    )
    for stores, unguarded in rows:
        assert stores > 0 and unguarded == 0, rows


@pytest.mark.parametrize("n, block_m, warps", [(4096, 1, 4), (8192, 1, 8), (5000, 1, 8)], ids=lambda v: str(v))
def test_async_forward_compiles_to_16_byte_async_copies_and_no_spill(n, block_m, warps):
    """The cp.async rows forward moves x into shared memory in 16-byte cp.async copies (32 elements a thread: 4 of
    them, masked rows too) and fits 64 registers without spilling (4 CTAs of 4 warps, or 2 of 8, a SM)."""
    r = _compiled_json(
        f"import dataclasses; print(json.dumps(dataclasses.asdict(p.fwd_async({n}, {block_m}, {warps}))))"
    )
    assert r["async_copies"] == 4, r
    assert r["spill_bytes"] == 0 and r["registers"] <= 64, r
    assert r["wide_loads"] >= 1, r  # the weight in 16-byte loads


CLUSTER_LAUNCHES = [  # (n, chunk, warps, maxnreg, out_mode, busy): fwd_config's cluster launches
    (65536, 4096, 4, 0, 0, True),
    (131072, 8192, 8, 0, 0, True),
    (40000, 4096, 4, 0, 0, True),
    (65536, 8192, 4, 64, 0, True),
    (131072, 8192, 4, 64, 0, True),
    (262144, 16384, 8, 64, 0, True),
    (262144, 16384, 8, 64, 0, False),
    (65536, 4096, 4, 0, 1, True),
    (32768, 16384, 8, 0, 1, True),
    (131072, 16384, 8, 0, 1, True),
    (262144, 16384, 8, 0, 1, True),
    (65536, 8192, 4, 64, 2, True),
    (65536, 8192, 4, 64, 2, False),
    (262144, 16384, 8, 64, 2, True),
    (65536, 8192, 4, 64, 3, True),
    (262144, 16384, 8, 64, 3, True),
    (65536, 4096, 4, 0, 3, True),
    (8192, 4096, 4, 0, 1, True),
    (8192, 4096, 4, 0, 2, True),
    (16384, 8192, 4, 0, 1, True),
    (16384, 8192, 8, 0, 2, True),
    (16384, 8192, 4, 64, 2, True),
]


@pytest.mark.parametrize(
    "n, chunk, warps, maxnreg, out_mode, busy",
    CLUSTER_LAUNCHES,
    ids=["-".join(map(str, c[:5])) + ("" if c[5] else "-idle") for c in CLUSTER_LAUNCHES],
)
def test_cluster_forward_compiles_with_one_async_send_within_its_cap(n, chunk, warps, maxnreg, out_mode, busy):
    """The cluster forward's inline PTX (mbarrier, st.async into the peers, the voted wait) goes through ptxas for
    sm_90a; each CTA sends its partial once (with the FP8 row max beside it: out_mode 1 and 3, one 8-byte send),
    loads 16 bytes at a time and spills at most SPILL_OK_BYTES (the most with which a launch keeps its cap); 32
    elements a thread fit 64 registers uncapped, 64 elements a thread (x or the weight staged through the exchange)
    the default's cap of 64.
    FP8 row scales at 64 elements a thread hold the weight beside x for the row max: uncapped (fwd_config: under the
    cap they spilled), within 128 registers, so that two CTAs of 8 warps share an SM; at 32 a thread their joint
    sum-and-max reduction takes a few registers past 64 uncapped (level with a cap of 64)."""
    r = _compiled_json(
        "import dataclasses; "
        f"print(json.dumps(dataclasses.asdict(p.fwd_cluster({n}, {chunk}, {warps}, maxnreg={maxnreg}, "
        f"out_mode={out_mode}, busy={busy}))))"
    )
    from programs.triton.kernels.cluster_staging import row_max
    from programs.triton.kernels.forward_cluster import SPILL_OK_BYTES

    held = not row_max(out_mode)  # row_stats' second pass over the held row (forward_cluster._held_pass)
    if (not busy or held) and maxnreg and r["spill_bytes"] > SPILL_OK_BYTES:
        # too few rows to fill the SMs (the weight staged, not x): the cap buys no occupancy there, and the call of
        # row_stats' second pass holds a few of the kernel's arguments through its normalize (Triton 3.8: 44 bytes
        # spilled under the cap); or row_stats' second pass over the held row (_held_pass), whose registers the cap
        # of 64 does not leave at 64 elements a thread under Triton 3.8 (312-332 bytes). The launcher drops such a
        # cap after the first call (note_spills), and uncapped the launch spills nothing
        r = _compiled_json(
            "import dataclasses; "
            f"print(json.dumps(dataclasses.asdict(p.fwd_cluster({n}, {chunk}, {warps}, maxnreg=0, "
            f"out_mode={out_mode}, busy={busy}))))"
        )
        assert r["spill_bytes"] == 0 and r["registers"] <= 128 and r["async_sends"] == 1 and r["wide_loads"] >= 4, r
        return
    assert r["spill_bytes"] <= SPILL_OK_BYTES, r
    assert r["async_sends"] == 1, r
    assert r["wide_loads"] >= 4, r  # x and the weight: 16-byte loads (fewer where masked)
    # the held pass takes a few registers past 64 at 32 elements a thread over an uneven row (67, Triton 3.8)
    assert r["registers"] <= ((128 if chunk // (32 * warps) > 32 else 72) if out_mode == 1 or held else 64), r


# where each kernel lets the next one launch: at the start, but the cp.async forward once its x has
# landed, and the persistent rows backward after its rows (triggered at its start, the partials' sum and the next
# backward's CTAs crowded its one CTA an SM: 4096 x 4096 51.3 us against 33.4 plain on H200)
PDL_TRIGGER = {
    "rows": "start",
    "looped": "start",
    "async": "after_async_wait",
    "cluster": "start",
    "bwd_rows": "end",
    "bwd_decode": "start",
    "sum_partials": "start",
}


@pytest.mark.parametrize("kernel", list(PDL_TRIGGER))
def test_pdl_kernels_wait_before_touching_global_memory(kernel):
    """With enable_pdl the rows, looped, cp.async and cluster forwards, and the backward's rows and decode kernels and
    its partials' sum, are launched with the PDL attribute and wait for the previous kernel (griddepcontrol.wait)
    before their first global load, store or async copy, the weight's included; then trigger the next kernel's
    launch, each where PDL_TRIGGER says. Without it, none of this."""
    on, off = _compiled_json(
        f"import dataclasses; print(json.dumps([dataclasses.asdict(p.pdl({kernel!r}, e)) for e in (True, False)]))"
    )
    assert on["launch_pdl"] and on["waits"] == 1 and on["triggers"] == 1 and on["wait_first"], on
    assert on["trigger_at"] == PDL_TRIGGER[kernel], on
    assert not off["launch_pdl"] and off["waits"] == 0 and off["triggers"] == 0 and off["trigger_at"] == "", off


def test_a_snippets_patch_never_reaches_the_next():
    """The compile server runs each snippet in its own child: a module a snippet patches is whole again for the next."""
    assert _compiled_json("f.sm_count = lambda d: -1; print(json.dumps(f.sm_count(None)))") == -1
    assert _compiled_json("print(json.dumps(getattr(f.sm_count, '__name__', '')))") == "sm_count"
