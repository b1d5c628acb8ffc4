"""The benchmark's timing rounds (programs/triton/benchmark.py), with the GPU timer replaced: what is reported is each
contender's median over interleaved rounds, and a peer that cannot run a shape is n/a, not retried."""

from programs.triton import benchmark


def test_timed_rounds_interleaves_contenders_and_reports_medians(monkeypatch):
    order, scripted = [], {"copy": [3.0, 1.0, 2.0], "ours": [5.0, 4.0, 9.0]}

    def fake_graph_time(calls, reps):
        name = calls[0]()
        order.append(name)
        return scripted[name].pop(0)

    monkeypatch.setattr(benchmark, "graph_time", fake_graph_time)
    runs = {"copy": lambda i: (lambda: "copy"), "ours": lambda i: (lambda: "ours")}
    t = benchmark.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional=set())
    assert t == {"copy": 2.0, "ours": 5.0}
    assert order == ["copy", "ours"] * 3


def test_timed_rounds_reports_a_peer_that_cannot_run_as_none_once(monkeypatch):
    tried = []

    def fake_graph_time(calls, reps):
        name = calls[0]()
        tried.append(name)
        if name == "liger":
            raise RuntimeError("Cannot launch Triton kernel since n = 262144 exceeds the recommended Triton blocksize")
        return 1.0

    monkeypatch.setattr(benchmark, "graph_time", fake_graph_time)
    monkeypatch.setattr(benchmark.torch.cuda, "synchronize", lambda: None)  # try_time syncs after a failure
    runs = {"ours": lambda i: (lambda: "ours"), "liger": lambda i: (lambda: "liger")}
    t = benchmark.timed_rounds(runs, sets=2, calls=8, reps=15, rounds=3, optional={"liger"})
    assert t == {"ours": 1.0, "liger": None}
    assert tried.count("liger") == 1 and tried.count("ours") == 3
