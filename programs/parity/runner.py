"""tt-rmsnorm-parity: one seeded input set through every backend this machine has, one report.

    tt-rmsnorm-parity                      # or: make parity / python -m programs.parity.runner
    python -m programs.parity.runner --out out/parity --cases default|full|demo [--backends torch-bf16,nki-bf16]

Every backend's output is compared with the float64 golden of the inputs it really computed on, by the project's one
policy (tt_rmsnorm.accuracy.compare). Prints the tables, writes parity.md / parity.csv / parity.png to --out, and exits
1 when any backend is outside its tolerance or raised, 0 otherwise.
"""

from __future__ import annotations

import os
import sys

import torch

# Triton reads TRITON_INTERPRET when its kernels are decorated: without CUDA it must be set before programs.triton
# loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from programs.parity import log, report  # noqa: E402
from programs.parity.backends import MOCK_SYSTEMS, Backend, all_backends  # noqa: E402
from programs.parity.cases import CASE_SETS, DEFAULT_SEED, Case  # noqa: E402
from programs.parity.log import logger  # noqa: E402
from tt_rmsnorm.accuracy import compare  # noqa: E402

DEFAULT_OUT = Path("out/parity")
RULE_KINDS = ("RuleError", "ValueError")  # rule refusals, also as reported by mock-cluster workers


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if not enabled:
        return None
    return tqdm(total=total, desc="parity", unit="run", file=sys.stderr, dynamic_ncols=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _is_rule_refusal(e: BaseException) -> bool:
    from_worker = getattr(e, "kind", None)  # tt_rmsnorm.testing.mock_cluster.IsolatedError carries the remote type name
    return from_worker in RULE_KINDS if from_worker is not None else isinstance(e, ValueError)


def run_one(backend: Backend, case: Case, available: tuple[bool, str]) -> report.Result:
    base = dict(case=case.name, backend=backend.name, label="", dtype=backend.dtype)
    ok, why = available
    if ok:
        try:
            ok, why = backend.supports(case)
        except Exception as e:  # noqa: BLE001 - a backend that cannot even answer is reported, not fatal
            return report.Result(**base, status="error", reason=f"supports() raised {_first_line(e)}")
    if not ok:
        return report.Result(**base, status="skip", reason=why)
    t0 = time.perf_counter()
    try:
        out, label = backend.run(case)
    except Exception as e:  # noqa: BLE001
        status = "unsupported" if _is_rule_refusal(e) else "error"
        logger.debug(f"{backend.name} on {case.name}: {e!r}")
        return report.Result(**base, status=status, reason=_first_line(e), seconds=time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    base["label"] = label
    if not backend.numeric:
        return report.Result(**base, status="accepted", seconds=seconds)
    expected = backend.expected(case)
    rep = compare(out, expected, backend.dtype)
    status, reason = ("pass", "") if rep.passed else ("FAIL", "; ".join(rep.failures))
    if not rep.passed:
        limited = judge_with_limit(backend, case, out, expected)
        if limited is not None:
            rep, status, reason = limited
    return report.Result(
        **base,
        status=status,
        reason=reason,
        pcc=rep.pcc,
        max_abs=rep.max_abs,
        max_ulp=rep.max_ulp,
        mean_ulp=rep.mean_ulp,
        max_bf8_step=rep.max_bf8_step,
        rel_rms=rep.rel_rms,
        nonfinite=rep.nonfinite,
        seconds=seconds,
    )


def judge_with_limit(backend: Backend, case: Case, out, expected):
    """(report of the other rows, "limit", reason) when the backend's documented limit explains its failure: it
    returns exactly the limit's prediction on the limit's rows and is within tolerance on every other row. Otherwise
    None (the failure stands)."""
    lim = backend.limit(case)
    if lim is None:
        return None
    o = torch.as_tensor(out).detach().cpu().double().reshape(-1, case.hidden)
    e = torch.as_tensor(expected).double().reshape(-1, case.hidden)
    on = o[lim.rows]
    if not bool(((on == lim.predicted) | (on.isnan() & lim.predicted.isnan())).all()):
        return None
    rest = compare(o[~lim.rows], e[~lim.rows], backend.dtype)
    if not rest.passed:
        return None
    return rest, "limit", f"{int(lim.rows.sum())} of {case.rows} rows: {lim.what}; the other rows within tolerance"


def environment() -> str:
    """What the run ran on, for the report header: CPU cores, GPU, and the versions of the backends' packages."""
    from importlib.metadata import PackageNotFoundError, version

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    parts = [f"{os.cpu_count()} CPU cores, {gpu}"]
    for pkg in ("torch", "triton", "ttnn", "neuronxcc"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            parts.append(f"no {pkg}")
    return ", ".join(parts)


def run_parity(
    cases: list[Case], backends: list[Backend], *, seed: int = DEFAULT_SEED, progress: bool = True
) -> report.ParityRun:
    """Every case through every backend (case by case, so each case's tensors are drawn once)."""
    t0 = time.perf_counter()
    avail = {}
    for b in backends:
        try:
            avail[b.name] = b.available()
        except Exception as e:  # noqa: BLE001
            avail[b.name] = (False, f"available() raised {_first_line(e)}")
    infos = [report.BackendInfo(b.name, b.dtype, *avail[b.name]) for b in backends]
    results = []
    bar = _progress(len(cases) * len(backends), progress)
    try:
        for case in cases:
            for b, info in zip(backends, infos, strict=True):
                if bar is not None:
                    bar.set_postfix_str(f"{case.name} {b.name}", refresh=False)
                r = run_one(b, case, avail[b.name])
                if r.label and r.label not in info.labels:
                    info.labels.append(r.label)
                results.append(r)
                if bar is not None:
                    bar.update()
    finally:
        if bar is not None:
            bar.close()
        for b in backends:
            try:
                b.close()
            except Exception as e:  # noqa: BLE001 - closing must not hide the results
                logger.warning(f"closing {b.name}: {e!r}")
    return report.ParityRun([c.name for c in cases], infos, results, seed, time.perf_counter() - t0, environment())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tt-rmsnorm-parity", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--cases", choices=sorted(CASE_SETS), default="default", help="case set (default: default)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--backends", default="", help="comma-separated backend names to run (default: all)")
    ap.add_argument(
        "--tt-arch",
        choices=sorted(MOCK_SYSTEMS),
        default="wormhole_b0",
        help="the architecture of the mock systems ttnn's judge runs on without hardware (default wormhole_b0)",
    )
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = ap.parse_args(argv)
    os.environ.setdefault("TT_LOGGER_LEVEL", "error")  # ttnn's cluster chatter would interleave with the tables
    log.configure(args.verbose)

    backends = all_backends(args.tt_arch)
    if args.backends:
        wanted = [n.strip() for n in args.backends.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {b.name for b in backends})
        if unknown:
            ap.error(f"unknown backend(s) {unknown}; known: {[b.name for b in backends]}")
        backends = [b for b in backends if b.name in wanted]
    cases = CASE_SETS[args.cases](args.seed)
    run = run_parity(cases, backends, seed=args.seed, progress=not args.no_progress)
    print(report.terminal_report(run), flush=True)
    written = report.write_files(run, args.out)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
