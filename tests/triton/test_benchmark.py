"""The benchmarks' measurement method (benchmarks/triton/timing.py and allreduce_measurement.py), with the
GPU timer replaced: what is reported is each contender's median over interleaved rounds, and a peer that cannot run a
shape is n/a, not retried."""

import contextlib

import torch

from benchmarks.triton import timing


def test_timed_rounds_interleaves_contenders_and_reports_medians(monkeypatch):
    order, scripted = [], {"copy": [3.0, 1.0, 2.0], "ours": [5.0, 4.0, 9.0]}

    def fake_graph_time(calls, reps, before=None):
        name = calls[0]()
        order.append(name)
        return scripted[name].pop(0)

    monkeypatch.setattr(timing, "graph_time", fake_graph_time)
    runs = {"copy": lambda i: lambda: "copy", "ours": lambda i: lambda: "ours"}
    t = timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional=set())
    assert t == {"copy": 2.0, "ours": 5.0}
    assert sorted(order) == ["copy"] * 3 + ["ours"] * 3 and order[:2] == ["copy", "ours"]


def test_timed_rounds_moves_every_contender_between_rounds(monkeypatch):
    order = []

    def fake_graph_time(calls, reps, before=None):
        order.append(calls[0]())
        return 1.0

    monkeypatch.setattr(timing, "graph_time", fake_graph_time)
    names = ["copy2d", "copyflat", "ours", "eager", "compile", "liger", "quack", "ours_fp8"]
    runs = {k: (lambda i, k=k: lambda: k) for k in names}
    timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional=set())
    rounds = [order[i * len(names) : (i + 1) * len(names)] for i in range(3)]
    assert rounds[0] == names and all(sorted(r) == sorted(names) for r in rounds)
    first_again = list(order)
    order.clear()
    timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional=set())
    assert order == first_again  # the same orders every run
    for k in ("ours", "quack"):
        places = {r.index(k) for r in rounds}
        before = {r[r.index(k) - 1] if r.index(k) else None for r in rounds}
        assert len(places) > 1 and len(before) > 1, (k, rounds)


def test_timed_rounds_reports_a_peer_that_cannot_run_as_none_once(monkeypatch):
    tried = []

    def fake_graph_time(calls, reps, before=None):
        name = calls[0]()
        tried.append(name)
        if name == "liger":
            raise RuntimeError("Cannot launch Triton kernel since n = 262144 exceeds the recommended Triton blocksize")
        return 1.0

    monkeypatch.setattr(timing, "graph_time", fake_graph_time)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)  # try_time syncs after a failure
    runs = {"ours": lambda i: lambda: "ours", "liger": lambda i: lambda: "liger"}
    t = timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional={"liger"})
    assert t == {"ours": 1.0, "liger": None}
    assert tried.count("liger") == 1 and tried.count("ours") == 3


def test_timed_rounds_hands_its_hook_to_every_timing(monkeypatch):
    """Every contender's timing gets the same `before` hook (the launch-state pin), once a round each,
    and the hook changes no contender's number."""
    seen = []

    def fake_graph_time(calls, reps, before=None):
        seen.append((calls[0](), before))
        return {"copy": 2.0, "ours": 4.0}[calls[0]()]

    monkeypatch.setattr(timing, "graph_time", fake_graph_time)

    def hook():
        return None

    runs = {k: (lambda i, k=k: lambda: k) for k in ("copy", "ours")}
    t = timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional=set(), before=hook)
    assert t == {"copy": 2.0, "ours": 4.0}
    assert len(seen) == 6 and all(b is hook for _, b in seen)
    assert sorted(name for name, _ in seen) == ["copy"] * 3 + ["ours"] * 3


def test_no_launch_state_pin_without_pdl():
    """Off Hopper (here: the CPU) there is no PDL launch to pin the state with, so the tables time without a hook."""
    assert timing.pin_launch_state(torch.device("cpu")) is None


class _FakeCuda:
    """Just enough of torch.cuda for measurement.graph_time_us to run on the CPU. The log names each graph by
    what was captured into it ("reset" / "fn"), and its replays as "replay <name>"."""

    def __init__(self, log):
        self.log = log
        fake = self

        class Graph:
            name = None

            def replay(self):
                fake.log.append(f"replay {self.name}")

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                fake.log.append("timer")

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        self.CUDAGraph, self.Event = Graph, Event

    def synchronize(self):
        pass

    @contextlib.contextmanager
    def graph(self, g):
        start = len(self.log)
        yield
        g.name = self.log[start] if len(self.log) > start else "empty"
        del self.log[start:]  # captured work is not run


def _fake_gpu(monkeypatch, log):
    """The all-reduce measurement with torch.cuda faked and its warm-up's stream hand-off a plain block."""
    from benchmarks.triton import allreduce_measurement as measurement

    monkeypatch.setattr(measurement.torch, "cuda", _FakeCuda(log))
    monkeypatch.setattr(measurement, "on_capture_stream", contextlib.nullcontext)
    return measurement


def test_allreduce_bench_pins_once_and_resets_by_graph(monkeypatch):
    """The all-reduce benchmark re-copies the in-place NCCL input before each replay. Eager, that copy is a plain
    launch that would put every replay after the first in the slow launch state; as a graph replay it moves no
    state, so one pin before the replays holds for all of them, and no rank waits on a per-replay sync."""
    log = []
    measurement = _fake_gpu(monkeypatch, log)
    us = measurement.graph_time_us(
        lambda: log.append("fn"), lambda: log.append("reset"), calls=4, reps=3, pin=lambda: log.append("pin")
    )
    assert us == 1000.0 / 4
    assert log[:6] == ["reset", "fn"] * 3  # warm-up, eager, before the capture
    assert log[6:] == ["pin"] + ["replay reset", "timer", "replay fn", "timer"] * 3


def test_allreduce_bench_without_reset_captures_no_empty_graph(monkeypatch):
    """Methods that work out of place pass no reset: then no reset graph is captured or replayed (an empty capture
    is an error-prone no-op in torch), and the pin still precedes the timed replays."""
    log = []
    measurement = _fake_gpu(monkeypatch, log)
    measurement.graph_time_us(lambda: log.append("fn"), None, calls=2, reps=2, pin=lambda: log.append("pin"))
    assert log == ["fn"] * 3 + ["pin"] + ["timer", "replay fn", "timer"] * 2


def test_timed_rounds_runs_every_contender_before_any_timing(monkeypatch):
    """Compiles (torch.compile's, the peers' JIT) all happen before the first timing: a torch.compile run moved every
    later contender's time, so none may be timed before another's first call. A peer whose first call
    fails is n/a without being timed; a failing contender of ours is an error."""
    events = []

    def fake_graph_time(calls, reps, before=None):
        events.append(("time",))
        calls[0]()
        return 1.0

    def call(name):
        def run():
            events.append(("call", name))
            if name == "liger":
                raise RuntimeError("n = 262144 exceeds the recommended Triton blocksize")
            return name

        return lambda i: run

    monkeypatch.setattr(timing, "graph_time", fake_graph_time)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    runs = {k: call(k) for k in ("copy", "ours", "compile", "liger")}
    t = timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=2, optional={"compile", "liger"})
    assert t == {"copy": 1.0, "ours": 1.0, "compile": 1.0, "liger": None}
    first_timing = next(i for i, e in enumerate(events) if e[0] == "time")
    assert events[:first_timing] == [("call", k) for k in ("copy", "ours", "compile", "liger")]
    assert ("call", "liger") not in events[first_timing:]  # n/a after its warm-up call, never timed

    runs["ours"] = call("liger")  # a failure of a contender that is not optional is raised, not reported as n/a
    try:
        timing.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=1, optional={"compile", "liger"})
    except RuntimeError:
        pass
    else:
        raise AssertionError("a failing non-optional contender must raise")


def test_allreduce_bench_sweeps_block_rows_only_where_every_sm_gets_a_block():
    from benchmarks.triton import allreduce_measurement as b
    from programs.triton.allreduce.dispatch import Strategy

    sweep = [(1, 8), (1, 16), (2, 16), (4, 32)]
    assert b.sweep_shapes(sweep, 2, 4096, Strategy.NCCL) == [None]
    assert b.sweep_shapes(sweep, 2, 4096, Strategy.ONE_SHOT_FLAGS) == [(1, 8), (1, 16)]  # one row a program
    assert b.sweep_shapes(sweep, 2, 528, Strategy.TWO_SHOT_PULLED) == [(1, 8), (1, 16), (2, 16)]  # 264 rows a rank
    assert b.sweep_shapes(sweep, 2, 264, Strategy.TWO_SHOT_PULLED) == [(1, 8), (1, 16)]  # T / world rows a rank


def test_allreduce_bench_table_names_the_best_strategy_and_the_dispatched_ratios():
    from benchmarks.triton import allreduce_measurement as b
    from programs.triton.allreduce.dispatch import Strategy

    row = {"T": 8, "per_rank_kib": 128.0, "nccl": 10.0, "nccl+fused": 12.0, "nccl+torch": None, "fused": 6.0}
    row |= {"times": {Strategy.ONE_SHOT_FLAGS: (5.0, "1x16"), Strategy.ONE_SHOT_LAMPORT: (4.0, "1x16")}}
    row |= {"auto": Strategy.ONE_SHOT_FLAGS}
    title, head, rule, line = b.render([row], "## t", hidden=8192, torch_baseline=False)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert len(cells) == len(head.strip("|").split("|")) == rule.count("---:")
    best = "one_shot_lamport (3.00x)"
    assert cells[-5:] == [best, "6.0 (one_shot_flags)", "2.00x", "0.67x", f"{8 * 8192 * 2 / 6.0 / 1e3:.0f}"]
    assert "-" in cells  # strategies not timed at this T


def test_tree_comparison_rotates_every_tree_through_every_place_and_reports_ratios_to_the_first(tmp_path):
    """compare_trees: two trees alternate, more rotate (each takes every place in turn); the table gives each later
    tree's median over the first's; clashing directory names fall back to positional names."""
    from benchmarks.triton.timing import render, rotated, tree_names

    assert [rotated(["a", "b"], r) for r in range(2)] == [["a", "b"], ["b", "a"]]
    three = [rotated(["a", "b", "c"], r) for r in range(3)]
    assert all(sorted(order) == ["a", "b", "c"] for order in three)
    assert {order.index("a") for order in three} == {0, 1, 2}, "every tree takes every place"
    runs = {"a": [{"fwd 8x8": 10.0}, {"fwd 8x8": 12.0}, {"fwd 8x8": 11.0}], "b": [{"fwd 8x8": 9.9}] * 3}
    head, line = render(runs, ["a", "b"])
    assert "b/a" in head
    assert line.split()[2:5] == ["11.00", "9.90", "0.9000"], line
    assert line.split()[-2:] == ["20.0%", "0.0%"], "each tree's spread, max / min - 1"
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "x").mkdir()
    assert tree_names([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]
    assert tree_names([tmp_path / "x", tmp_path / "y" / "x"]) == ["before", "after"]
