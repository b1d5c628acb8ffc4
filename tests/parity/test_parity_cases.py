"""The seeded parity input set: reproducible, covering decode to prefill and 1 to 32 devices, and hard rows that are
what they claim."""

import dataclasses

import pytest
import torch

from programs.parity.cases import HARD_ROWS, WEIGHTS, Case, default_cases, full_cases, tensors


def test_same_seed_same_tensors_in_any_order_and_another_seed_differs():
    a, b = default_cases()[:3], list(reversed(default_cases()[:3]))
    for case in a:
        other = next(c for c in b if c == case)
        tensors.cache_clear()
        x1, w1 = tensors(case).x.clone(), tensors(case).weight.clone()
        tensors.cache_clear()
        assert torch.equal(x1, tensors(other).x) and torch.equal(w1, tensors(other).weight)
    reseeded = dataclasses.replace(a[0], seed=a[0].seed + 1)
    assert not torch.equal(tensors(a[0]).x, tensors(reseeded).x)


def test_default_set_covers_the_issue():
    cases = default_cases()
    assert {c.num_devices for c in cases} == {1, 2, 8, 32}
    assert {c.epsilon for c in cases} == {1e-5, 1e-6}
    assert {c.weight for c in cases} == set(WEIGHTS)
    assert {c.hard for c in cases} - {None} == set(HARD_ROWS)
    assert min(c.rows for c in cases) == 1 and max(c.rows for c in cases) == 2048
    assert min(c.hidden for c in cases) == 2048 and max(c.hidden for c in cases) == 16384
    assert {c.phase for c in cases} == {"decode", "prefill"}
    assert len({c.name for c in full_cases()}) == len(full_cases())  # names identify cases


@pytest.mark.parametrize("hard", HARD_ROWS)
def test_hard_rows_are_what_they_claim(hard):
    case = Case("decode", 32, 2048, 2, 1e-5, "random", hard=hard)
    x = tensors(case).x[0, 0]
    hard_rows, plain = x[::2], x[1::2]
    assert plain.abs().max() < 10  # randn rows stay between the hard ones
    mag = hard_rows.abs()
    if hard == "zeros":
        assert torch.count_nonzero(hard_rows) == 0
    elif hard == "outlier":
        assert ((mag == 2.0**20).sum(-1) == 1).all() and (mag.sort(-1).values[:, -2] < 10).all()
    elif hard == "tiny":
        assert (mag > 0).all() and (mag < 2.0**-126).any() and (mag < 2.0**-125).all()
        assert torch.isinf(hard_rows.pow(2).sum(-1)).logical_not().all() and (hard_rows.pow(2) == 0).all()
    else:
        assert (mag >= 2.0**126).all() and (hard_rows.to(torch.bfloat16).abs() < torch.finfo(torch.bfloat16).max).all()
        assert torch.isinf(hard_rows.pow(2).sum(-1)).all()  # the fp32 sum of squares overflows


def test_zero_centered_weight_carries_its_offset():
    case = Case("prefill", 4, 2048, 1, 1e-6, "zero_centered")
    t = tensors(case)
    assert t.weight_offset == 1.0 and t.weight.abs().mean() < 0.2
    assert torch.equal(t.effective_weight(), t.weight + 1.0)


def test_a_hidden_that_does_not_split_into_tiles_is_refused():
    with pytest.raises(ValueError, match="multiple of 32"):
        Case("decode", 1, 2048, 128, 1e-5, "ones")
