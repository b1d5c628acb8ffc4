"""tt-metal's RMSNorm test parameter sets (corpus.py) against the package: every entry through the rules device-free,
a seeded sample through real ttnn on the mock clusters. `make conformance` runs all of it and prints the table."""

import pytest

from tests.conformance import corpus, corpus_format
from tools import conformance
from tt_rmsnorm.rules.table import PACKAGE_ONLY_RULES

ISSUE_FILES = (
    {
        "tests/ttnn/unit_tests/operations/fused/" + f
        for f in (
            "test_distributed_layernorm_sharded.py",
            "test_distributed_layernorm.py",
            "test_distributed_layernorm_exhaustive.py",
            "test_distributed_layernorm_allclose.py",
            "test_distributed_layernorm_ulp.py",
            "test_rmsnorm_2d_core_grid_single_device.py",
            "test_pre_allgather_wide.py",
            "test_rms_norm.py",
            "test_rms_norm_sharded.py",
            "test_rms_norm_bad_user_repro.py",
        )
    }
    | {
        "tests/tt_eager/python_api_testing/unit_testing/misc/" + f
        for f in (
            "test_distributed_layernorm_pre_allgather.py",
            "test_distributed_layernorm_post_allgather.py",
            "test_layernorm_sharded.py",
            "test_layernorm_tg_llama.py",
        )
    }
    | {"models/demos/deepseek_v3/tests/unit/test_rmsnorm.py"}
)
# Why the package may refuse a call tt-metal runs: a documented package-only guard, or a test written for a newer ttnn
# (0.81.1 itself refuses it: the L1 budget of the unchunked pre, a keyword the bindings lack).
NEWER = {"newer_ttnn": {"pre.l1_budget", "post.l1_budget"}, "newer_api": {conformance.KEYWORD_RULE}}
MUST_SEE = (  # in every mock sample: the known-wrong calls and each kind of refusal
    "test_rms_norm_bad_user_repro::test_rms_norm_reproduces_llama_bad_user_pattern[]",
    "test_rmsnorm::test_rmsnorm_post_all_gather[]",
    "test_pre_allgather_wide::test_pre_all_gather_wide_bf16[rmsnorm-4128-128-fp32-True]",
    "test_distributed_layernorm_ulp::test_distributed_norm_comparison[case1-rms_norm]",
    "test_distributed_layernorm_allclose::test_distributed_norm_large_batch[rms_norm]",
)
ROWS = {e["id"]: (e, conformance.package_entry(e)) for e in corpus.ENTRIES}


def test_corpus_covers_the_rmsnorm_tests():
    assert len(corpus.ENTRIES) >= 350
    assert {e["source"] for e in corpus.ENTRIES} == ISSUE_FILES
    for e in corpus.ENTRIES:
        assert e["calls"] and e["test"].startswith("test_") and e["intent"] in corpus_format.INTENTS, e["id"]
        assert e["intent"] == "runs" or e["why"], f"{e['id']}: a non-running intent needs its reason"
    assert all(i in ROWS for i in MUST_SEE)


def failures(check) -> list[str]:
    return [f"{i}: {pkg['verdict']} {pkg['rule']}" for i, (e, pkg) in ROWS.items() if not check(e, pkg)]


def test_package_refuses_what_tt_metal_runs_only_with_a_written_reason():
    def ok(e, pkg):
        if e["intent"] != "runs" or pkg["verdict"] in ("accept", "warn", "crash"):
            return True
        return pkg["rule"] in PACKAGE_ONLY_RULES or any(pkg["rule"] in NEWER.get(n, ()) for n in e["notes"])

    assert not failures(ok)


def test_package_refuses_what_tt_metal_declares_invalid():
    assert not failures(lambda e, pkg: e["intent"] != "raises" or pkg["verdict"] == "reject")


def test_known_wrong_outputs_refused_or_warned():
    assert not failures(lambda e, pkg: e["intent"] != "wrong" or pkg["verdict"] in ("reject", "warn"))
    _, bad_user = ROWS[MUST_SEE[0]]
    assert (
        bad_user["rule"] == "sharded.stats_gather_burst"
        and "LayerNormShardedMultiCoreProgramConfig(" in bad_user["message"]
    )
    assert ROWS[MUST_SEE[1]][1]["rule"] == "stats.kind_mismatch"


def test_rules_describe_every_call_but_rank1_weights():
    # (W,) weights crash the TensorDesc checker until rank-1 weights are described as ttnn pads them
    assert not failures(lambda e, pkg: pkg["verdict"] != "crash" or "rank1_weight" in e["notes"])


@pytest.mark.mock_cluster
def test_seeded_sample_agrees_with_ttnn_on_mock():
    picked = {e["id"]: e for e in conformance.sample(corpus.ENTRIES, 24, seed=40)}
    picked.update({i: ROWS[i][0] for i in MUST_SEE})
    rows = conformance.run(list(picked.values()))
    odd = [r for r in rows if False in r["agree"]]
    assert not odd, conformance.table(odd)
    for r in rows:
        e, pkg, got = r["entry"], r["package"], r["ttnn"]
        if any(n in NEWER for n in e["notes"]) and pkg["verdict"] == "reject":  # the written reason holds on 0.81.1
            assert got["verdict"] == "reject", (e["id"], got)
        if e["intent"] == "wrong" and pkg["verdict"] == "reject":  # ttnn runs it: only the package stands in the way
            assert got["verdict"] == "accept", (e["id"], got)
