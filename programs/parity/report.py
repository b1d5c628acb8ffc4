"""What a parity run writes: the terminal tables, parity.md, parity.csv and parity.png (error per backend per case).

The runner, the tests and the demo summary all format through here, so the numbers they show are the same.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from tt_rmsnorm.accuracy import tolerance_for

FAILED = ("FAIL", "error")  # statuses that make the run fail


@dataclass
class Result:
    """One backend on one case. status: pass | FAIL (outside its tolerance) | limit (outside it only on the rows of a
    documented hardware or library limit, returning there what the limit predicts; within tolerance elsewhere, and
    the metrics are those rows') | error (raised) | skip (not run here, with the reason) | unsupported (a rule of the
    backend refuses the case, with the rule's message) | accepted (ttnn mock: shapes accepted, no values)."""

    case: str
    backend: str
    label: str
    dtype: str
    status: str
    reason: str = ""
    pcc: float | None = None
    max_abs: float | None = None
    max_ulp: float | None = None
    mean_ulp: float | None = None
    max_bf8_step: float | None = None  # bfloat8_b results, in steps of their shared-exponent block (no ULPs)
    rel_rms: float | None = None
    nonfinite: int | None = None
    seconds: float | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILED


@dataclass
class BackendInfo:
    name: str
    dtype: str
    available: bool
    reason: str
    labels: list[str] = field(default_factory=list)


@dataclass
class ParityRun:
    cases: list[str]
    backends: list[BackendInfo]
    results: list[Result]
    seed: int
    wall_s: float
    environment: str = ""

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    def result(self, case: str, backend: str) -> Result | None:
        return next((r for r in self.results if r.case == case and r.backend == backend), None)


# ---------------------------------------------------------------------------------------------------------------------
# Tables.


def _num(v, fmt=".3g") -> str:
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return format(v, fmt)


COMPARED = ("pass", "FAIL", "limit")  # statuses with numbers


def cell(r: Result | None) -> str:
    """Matrix cell: the max bf16 ULP distance (bfloat8_b: block steps, 's'), '!' appended on a tolerance failure and
    'L' on a documented limit; words for everything else."""
    if r is None:
        return ""
    if r.status in COMPARED:
        value = _num(r.max_ulp, ".2g") if r.max_ulp is not None else _num(r.max_bf8_step, ".2g") + "s"
        return value + {"pass": "", "FAIL": "!", "limit": "L"}[r.status]
    return {"skip": "-", "unsupported": "rule", "error": "ERROR", "accepted": "ok"}[r.status]


LEGEND = (
    "cell = max |error| in bf16 ULPs of the float64 golden of the backend's own inputs (bf8b: in steps of its "
    "shared-exponent block, 's'; half a step is correct rounding); '!' = outside the backend's tolerance "
    "(tt_rmsnorm.accuracy); 'L' = a documented hardware/library limit (fp32 overflow of the sum of squares): those "
    "rows return what the limit predicts, the number is the other rows'; '-' = skipped; 'rule' = refused by a rule "
    "of the backend; 'ok' = accepted by ttnn on the mock (no values); ERROR = raised"
)


def _grid(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """A plain-text table: the first `left` columns left-aligned (names), the rest right-aligned (numbers)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in pairs)

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]


def backend_rows(run: ParityRun) -> tuple[list[str], list[list[str]]]:
    header = [
        "backend",
        "dtype",
        "ran on",
        "run",
        "pass",
        "limit",
        "FAIL",
        "skip",
        "worst max ULP",
        "worst rel RMS",
        "time s",
    ]
    rows = []
    for b in run.backends:
        rs = [r for r in run.results if r.backend == b.name]
        compared = [r for r in rs if r.status in COMPARED]
        ran = [r for r in rs if r.status not in ("skip",)]
        ulps = [r.max_ulp for r in compared if r.max_ulp is not None and not math.isnan(r.max_ulp)]
        steps = [r.max_bf8_step for r in compared if r.max_bf8_step is not None and not math.isnan(r.max_bf8_step)]
        rms = [r.rel_rms for r in compared if r.rel_rms is not None and not math.isnan(r.rel_rms)]
        where = "; ".join(sorted({lbl.split(" (")[0].split(":")[0] for lbl in b.labels})) if b.available else "not run"
        rows.append(
            [
                b.name,
                b.dtype,
                where,
                str(len(ran)),
                str(sum(r.status in ("pass", "accepted") for r in rs)),
                str(sum(r.status == "limit" for r in rs)),
                str(sum(r.failed for r in rs)),
                str(sum(r.status in ("skip", "unsupported") for r in rs)),
                _num(max(ulps), ".3g") if ulps else (_num(max(steps), ".3g") + " steps" if steps else ""),
                _num(max(rms), ".3g") if rms else "",
                f"{sum(r.seconds or 0.0 for r in rs):.1f}",
            ]
        )
    return header, rows


def matrix_rows(run: ParityRun) -> tuple[list[str], list[list[str]]]:
    header = ["case", *(b.name for b in run.backends)]
    return header, [[c, *(cell(run.result(c, b.name)) for b in run.backends)] for c in run.cases]


def detail_rows(run: ParityRun) -> tuple[list[str], list[list[str]]]:
    header = [
        "case",
        "backend",
        "label",
        "dtype",
        "status",
        "PCC",
        "max abs",
        "max ULP",
        "mean ULP",
        "max bf8 step",
        "rel RMS",
        "NaN/Inf",
        "s",
        "reason",
    ]
    rows = [
        [
            r.case,
            r.backend,
            r.label,
            r.dtype,
            r.status,
            _num(r.pcc, ".7f"),
            _num(r.max_abs),
            _num(r.max_ulp),
            _num(r.mean_ulp),
            _num(r.max_bf8_step),
            _num(r.rel_rms),
            _num(r.nonfinite, "d"),
            _num(r.seconds, ".2f"),
            r.reason,
        ]
        for r in run.results
    ]
    return header, rows


def _notes(run: ParityRun) -> list[str]:
    lines = []
    for r in run.results:
        if r.failed or r.status == "limit":
            lines.append(f"{r.status} {r.case} {r.backend}: {r.reason}")
    for r in run.results:
        if r.status in ("skip", "unsupported") and next(b for b in run.backends if b.name == r.backend).available:
            lines.append(f"{r.status} {r.case} {r.backend}: {r.reason}")
    return lines


def verdict(run: ParityRun) -> str:
    n_cmp = sum(r.status in COMPARED for r in run.results)
    n_fail = len(run.failures)
    n_limit = sum(r.status == "limit" for r in run.results)
    limits = f"; {n_limit} of them within it on every row but those of a documented limit" if n_limit else ""
    if not n_fail:
        return f"PASS: all {n_cmp} compared runs within tolerance{limits}"
    return f"FAIL: {n_fail} backend run(s) outside tolerance or raised, of {n_cmp} compared{limits}"


def terminal_report(run: ParityRun) -> str:
    out = [
        f"Parity: {len(run.cases)} cases x {len(run.backends)} backends, seed {run.seed}, wall {run.wall_s:.1f} s",
        f"on {run.environment}",
        "",
    ]
    out += _grid(*backend_rows(run), left=3)
    out += [f"{b.name} not run: {b.reason}" for b in run.backends if not b.available]
    out += ["", LEGEND]
    out += _grid(*matrix_rows(run))
    notes = _notes(run)
    if notes:
        out += [""] + notes
    out += ["", verdict(run)]
    return "\n".join(out)


def markdown_report(run: ParityRun, plot_name: str | None) -> str:
    out = [
        "# Parity run",
        "",
        f"{len(run.cases)} cases x {len(run.backends)} backends, seed {run.seed}, wall {run.wall_s:.1f} s, on "
        f"{run.environment}. {verdict(run)}.",
        "",
        "## Backends",
        "",
        *_md(*backend_rows(run)),
        "",
        *(f"- {b.name} not run: {b.reason}" for b in run.backends if not b.available),
        "",
        "## Max bf16 ULP per case and backend",
        "",
        LEGEND + ".",
        "",
        *_md(*matrix_rows(run)),
        "",
    ]
    if plot_name:
        out += [f"![error per backend per case]({plot_name})", ""]
    notes = _notes(run)
    if notes:
        out += ["## Failures and skips", "", *(f"- {n}" for n in notes), ""]
    out += ["## Every run", "", *_md(*detail_rows(run)), ""]
    return "\n".join(out)


def write_csv(run: ParityRun, path: Path) -> None:
    names = [f.name for f in fields(Result)]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names)
        w.writeheader()
        for r in run.results:
            w.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})


def plot(run: ParityRun, path: Path) -> None:
    """Two log-scale panels, max bf16 ULP and relative RMS error, one marker series per numeric backend; failures are
    drawn as red-edged markers, exact zeros at the panel's floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric = [b for b in run.backends if any(r.backend == b.name and r.status in COMPARED for r in run.results)]
    fig, axes = plt.subplots(2, 1, figsize=(max(9.0, 0.7 * len(run.cases) + 4), 8.5), sharex=True)
    markers = "osD^v<>ph*"
    xs = range(len(run.cases))
    for ax, metric, title, floor in (
        (axes[0], "max_ulp", "max error, bf16 ULPs of the golden", 1e-15),
        (axes[1], "rel_rms", "relative RMS error", 1e-18),
    ):
        for k, b in enumerate(numeric):
            pts, bad = [], []
            for i, c in enumerate(run.cases):
                r = run.result(c, b.name)
                if r is None or r.status not in COMPARED:
                    continue
                v = getattr(r, metric)
                if v is None or math.isnan(v):
                    continue
                v = min(max(v, floor), 1e12)  # inf (all-wrong rows) drawn at the top
                (bad if r.status == "FAIL" else pts).append((i + (k - len(numeric) / 2) * 0.06, v))
            m = markers[k % len(markers)]
            line = ax.scatter(*zip(*pts, strict=True), marker=m, s=28, label=b.name, alpha=0.85) if pts else None
            if bad:
                color = line.get_facecolor()[0] if line is not None else None
                ax.scatter(
                    *zip(*bad, strict=True),
                    marker=m,
                    s=60,
                    color=color,
                    edgecolors="red",
                    linewidths=1.8,
                    label=None if line is not None else b.name,
                )
        if metric == "max_ulp":  # the per-element ULP bounds of the policy, for the dtypes that have one
            for dt in sorted({b.dtype for b in numeric}):
                bound = tolerance_for(dt).max_ulp
                if bound is not None:
                    ax.axhline(bound, ls="--", lw=0.8, color="gray")
                    ax.annotate(
                        f"{dt} max ULP {bound:g}",
                        (len(run.cases) - 0.5, bound),
                        fontsize=7,
                        color="gray",
                        ha="right",
                        va="bottom",
                    )
        ax.set_yscale("log")
        ax.set_ylabel(title)
        ax.grid(True, which="major", axis="y", alpha=0.3)
    if numeric:
        axes[0].legend(
            fontsize=8, ncol=min(len(numeric), 8), loc="lower left", bbox_to_anchor=(0.0, 1.01), frameon=False
        )
    fig.suptitle(
        f"Parity per backend and case (seed {run.seed}; red edge = outside tolerance; exact zeros at the "
        f"floor; bfloat8_b is judged by PCC and max-abs, not ULPs)",
        fontsize=10,
    )
    axes[1].set_xticks(list(xs))
    axes[1].set_xticklabels(run.cases, rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_files(run: ParityRun, out_dir: Path) -> dict[str, Path]:
    """parity.csv, parity.png (unless matplotlib is missing) and parity.md under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"csv": out_dir / "parity.csv"}
    write_csv(run, written["csv"])
    try:
        plot(run, out_dir / "parity.png")
        written["png"] = out_dir / "parity.png"
    except ImportError as e:
        from programs.parity.log import logger

        logger.warning(f"no plot (matplotlib missing): {e}")
    written["md"] = out_dir / "parity.md"
    written["md"].write_text(markdown_report(run, "parity.png" if "png" in written else None))
    return written


def short_report(run: ParityRun) -> str:
    """A few lines for the demo: which backends ran (or why not), the case x backend matrix, who failed where."""
    out = [
        f"Cross-backend parity ({len(run.cases)} cases, seed {run.seed}, {run.wall_s:.1f} s; full run: "
        f"tt-rmsnorm-parity):"
    ]
    skipped = [f"{b.name} ({b.reason})" for b in run.backends if not b.available]
    if skipped:
        out.append("  not run here: " + "; ".join(skipped))
    out += ["  " + line for line in _grid(*matrix_rows(run))]
    for c in run.cases:
        bad = [r.backend for r in run.results if r.case == c and r.failed]
        if bad:
            out.append(f"  {c}: outside tolerance: {', '.join(bad)}")
    for what in sorted({r.reason.split(": ", 1)[1] for r in run.results if r.status == "limit"}):
        who = sorted({f"{r.backend} on {r.case}" for r in run.results if r.status == "limit" and what in r.reason})
        out.append(f"  L: {'; '.join(who)}: {what}")
    out.append(
        "  " + verdict(run) + " (cells: max bf16 ULP, bf8b block steps 's'; '!' = outside tolerance; 'L' = a "
        "documented limit; '-' = skipped)"
    )
    return "\n".join(out)
