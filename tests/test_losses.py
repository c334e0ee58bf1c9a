"""Tests for aligntrain.losses against independent references.

References are 60-digit ``decimal.Decimal`` evaluations of the textbook formulas
(direct binomial sums with exact integer coefficients), written here without the
module's log-space machinery. Inputs are the exact binary values the code sees
(Decimal(float) is exact), so the comparison measures the code's error only.

Tolerances: float64 results must match to 1e-11 relative, tighter than the 1e-9
the brief suggests: the measured worst case over these grids and 1500 random
(N, k, p) points is 2.3e-13 (from log-space terms such as (N−1)·log(1−p) of size
up to ~5000 and log C(N, j) up to ~175), so 1e-11 leaves a 40×
margin. Values the dtype cannot hold (below its smallest normal number, e.g.
F(256, 1 − 1e-9) ≈ 1e-2295) must come back as 0 or a subnormal, hence the
absolute slack of one smallest normal. float32 results are checked at 1e-6
relative (about 8 float32 ulps): the module computes in float64 and rounds once.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.losses import (
    LOGP_POSITIVE_TOLERANCE,
    as_tensor,
    cat_best_of_n_rl_weight,
    cat_majority_rl_weight,
    cat_pass_at_n_rl_weight,
    consensus_threshold,
    contrastive_hinge_loss,
    contrastive_hybrid_loss,
    contrastive_margin_loss,
    dco_keep_mask,
    dynamic_majority_threshold,
    empirical_success_probability,
    log1mexp,
    majority_loss,
    majority_weight,
    majority_weight_from_logp,
    pass_at_n_loss,
    pass_at_n_weight,
    pass_at_n_weight_from_logp,
    sample_rivals,
    sequence_success_probability,
    variance_inflation,
)

PRECISION = 60
RTOL64 = 1e-11
RTOL32 = 1e-6

BUDGETS = [1, 2, 3, 5, 8, 16, 33, 64, 128, 255, 256]
P_GRID = [
    1e-20,
    1e-15,
    1e-12,
    1e-9,
    1e-6,
    1e-4,
    1e-3,
    0.01,
    0.05,
    0.1,
    0.2,
    0.3,
    0.45,
    0.5,
    0.55,
    0.7,
    0.9,
    0.99,
    0.999,
    1 - 1e-6,
    1 - 1e-9,
]
# Log-probabilities spanning the same p range, plus underflow (p = 0 in float64).
LOGP_GRID = [-2000.0, -700.0, -46.0] + [math.log(p) for p in P_GRID]


# ---------------------------------------------------------------------------
# Decimal references (independent of the module under test)


def dec(x: float) -> Decimal:
    return Decimal(float(x))  # exact binary value


def power(x: Decimal, exponent: int) -> Decimal:
    """x**exponent with 0**0 = 1 (Decimal raises on it)."""
    return Decimal(1) if exponent == 0 else x**exponent


def cancellation_free_precision(p: Decimal) -> int:
    """Digits that keep 1 − (1 − p)^N exact to PRECISION digits however small p is."""
    return PRECISION + max(0, -p.adjusted())


def ref_pass_weight(n: int, p: Decimal) -> Decimal:
    """F(N,p) = N p q^{N−1} / (1 − q^N), F(N,0) = 1."""
    if p == 0:
        return Decimal(1)
    with localcontext(prec=cancellation_free_precision(p)):
        q = 1 - p
        return n * p * power(q, n - 1) / (1 - q**n)


def ref_neg_log_one_minus(x: Decimal) -> Decimal:
    """−ln(1 − x) = Σ_{m≥1} x^m/m for 0 ≤ x ≤ 1/2 (no cancellation, however small x is)."""
    assert 0 <= x <= Decimal("0.5")
    with localcontext(prec=PRECISION):
        total, term, m = Decimal(0), x, 1
        while term > total * Decimal(10) ** -PRECISION or m == 1:
            total += term / m
            term *= x
            m += 1
        return total


def ref_neg_log_tail(upper: Decimal, lower: Decimal) -> Decimal:
    """−ln(upper) for complementary probabilities upper + lower = 1, from the smaller one."""
    with localcontext(prec=PRECISION):
        return -upper.ln() if upper <= lower else ref_neg_log_one_minus(lower)


def ref_pass_loss(n: int, p: Decimal) -> Decimal:
    """−ln(1 − q^N)."""
    with localcontext(prec=cancellation_free_precision(p)):
        miss = (1 - p) ** n
        return ref_neg_log_tail(1 - miss, miss)


def ref_binomial_pmf(n: int, p: Decimal) -> list[Decimal]:
    with localcontext(prec=PRECISION):
        q = 1 - p
        return [math.comb(n, j) * power(p, j) * power(q, n - j) for j in range(n + 1)]


def ref_majority(n: int, p: Decimal) -> tuple[list[Decimal], list[Decimal]]:
    """For k = 1..N: the loss −ln P[Bin ≥ k] and the weight k·C(N,k)p^k q^{N−k}/P[Bin ≥ k]."""
    pmf = ref_binomial_pmf(n, p)
    with localcontext(prec=PRECISION):
        losses, weights = [], []
        for k in range(1, n + 1):
            upper, lower = sum(pmf[k:], Decimal(0)), sum(pmf[:k], Decimal(0))
            losses.append(ref_neg_log_tail(upper, lower))
            weights.append(Decimal(k) if p == 0 else k * pmf[k] / upper)
        return losses, weights


def ref_raw_majority(n: int, k: int, p: Decimal) -> Decimal:
    with localcontext(prec=PRECISION):
        return n * math.comb(n - 1, k - 1) * power(p, k - 1) * power(1 - p, n - k)


def ref_power_weight(n: int, q: Decimal) -> Decimal:
    """N·q^{N−1} (raw pass@N weight at q = 1 − p; best-of-N weight at q)."""
    with localcontext(prec=PRECISION):
        return n * power(q, n - 1)


def assert_matches(got: torch.Tensor, ref: list[Decimal], rtol: float) -> None:
    got_np = got.detach().to(torch.float64).numpy().ravel()
    ref_np = np.array([float(r) for r in ref])
    tiny = torch.finfo(got.dtype).tiny
    assert np.all(np.isfinite(got_np)), got_np
    err = np.abs(got_np - ref_np)
    bad = err > rtol * np.abs(ref_np) + tiny
    assert not bad.any(), list(zip(got_np[bad], ref_np[bad], strict=True))


def logp_tensor(values: list[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, requires_grad=True)


def loss_and_grad(loss_fn, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    loss = loss_fn(logp)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss, grad


# ---------------------------------------------------------------------------
# log1mexp


def test_log1mexp_matches_decimal_and_edges() -> None:
    xs = [-1e-300, -1e-20, -1e-8, -0.1, -0.6931, -math.log(2), -0.7, -5.0, -40.0, -800.0]
    x = torch.tensor(xs, dtype=torch.float64)
    with localcontext(prec=PRECISION):
        ref = [(1 - dec(v).exp()).ln() for v in xs]
    assert_matches(log1mexp(x), ref, 1e-14)
    edges = log1mexp(torch.tensor([0.0, -math.inf], dtype=torch.float64))
    assert edges[0] == -math.inf and edges[1] == 0.0


def test_log1mexp_gradient_is_finite_and_correct() -> None:
    x = torch.tensor([-1e-10, -0.5, -math.log(2), -1.0, -30.0, -1e4], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(log1mexp(x).sum(), x)
    expected = -1.0 / torch.expm1(-x.detach())  # d/dx log(1 − eˣ) = −eˣ/(1 − eˣ)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=0.0)
    assert torch.autograd.gradcheck(
        log1mexp, (torch.tensor([-0.2, -0.9, -3.0], dtype=torch.float64, requires_grad=True),)
    )


# ---------------------------------------------------------------------------
# Pass@N weight F(N, p)


@pytest.mark.parametrize("n", BUDGETS)
def test_pass_weight_matches_decimal_float64(n: int) -> None:
    p = torch.tensor(P_GRID, dtype=torch.float64)
    assert_matches(pass_at_n_weight(p, n), [ref_pass_weight(n, dec(v)) for v in P_GRID], RTOL64)


@pytest.mark.parametrize("n", BUDGETS)
def test_pass_weight_from_logp_matches_decimal_float64(n: int) -> None:
    logp = torch.tensor(LOGP_GRID, dtype=torch.float64)
    with localcontext(prec=PRECISION):
        ref = [ref_pass_weight(n, dec(v).exp()) for v in LOGP_GRID]
    assert_matches(pass_at_n_weight_from_logp(logp, n), ref, RTOL64)


@pytest.mark.parametrize("n", [2, 8, 64, 256])
def test_pass_weight_float32_accurate_and_monotone(n: int) -> None:
    p32 = torch.tensor(P_GRID, dtype=torch.float32)
    weight = pass_at_n_weight(p32, n)
    assert weight.dtype == torch.float32
    assert_matches(weight, [ref_pass_weight(n, dec(v)) for v in p32.tolist()], RTOL32)
    fine = torch.logspace(-30, 0, 2000, dtype=torch.float32).clamp(max=1.0)
    assert (pass_at_n_weight(fine, n).diff() <= 0).all()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 256), log10_p=st.floats(-20.0, -1e-9))
def test_pass_weight_random_points(n: int, log10_p: float) -> None:
    p = 10.0**log10_p
    assert_matches(pass_at_n_weight(torch.tensor([p], dtype=torch.float64), n), [ref_pass_weight(n, dec(p))], RTOL64)


def test_pass_weight_limits() -> None:
    p = torch.tensor([0.0, 1e-300, 1e-20, 0.3, 0.999, 1.0], dtype=torch.float64)
    assert (pass_at_n_weight(p, 1) == 1.0).all()  # F(1, p) = 1
    for n in [2, 16, 256]:
        weight = pass_at_n_weight(p, n)
        assert weight[0] == 1.0 and weight[1] == 1.0  # F(N, 0) = 1
        assert weight[-1] == 0.0  # F(N, 1) = 0 for N > 1
    assert pass_at_n_weight(0.5, 2).item() == pytest.approx(2 / 3, rel=1e-15)  # 2·½·½ / (1 − ¼)


@pytest.mark.parametrize("n", [2, 4, 64, 256])
def test_pass_weight_decreases_in_p(n: int) -> None:
    p = torch.cat(
        [torch.logspace(-20, -1, 400, dtype=torch.float64), torch.linspace(0.1, 1.0, 400, dtype=torch.float64)]
    )
    weight = pass_at_n_weight(p, n)
    assert (weight.diff() <= 4 * torch.finfo(torch.float64).eps * weight[1:]).all()
    assert (weight <= 1.0).all()


# ---------------------------------------------------------------------------
# Pass@N loss


@pytest.mark.parametrize("n", BUDGETS)
def test_pass_loss_value_and_gradient_match_decimal(n: int) -> None:
    logp = logp_tensor(LOGP_GRID)
    loss, grad = loss_and_grad(lambda x: pass_at_n_loss(x, n), logp)
    with localcontext(prec=PRECISION):
        p_ref = [dec(v).exp() for v in LOGP_GRID]
        loss_ref = [
            ref_pass_loss(n, p) if p > 0 else -(Decimal(n).ln() + dec(v)) for p, v in zip(p_ref, LOGP_GRID, strict=True)
        ]
        weight_ref = [ref_pass_weight(n, p) for p in p_ref]
    assert_matches(loss, loss_ref, RTOL64)
    assert_matches(-grad, weight_ref, RTOL64)  # d loss/dℓ = −F(N, p)


@pytest.mark.parametrize("n", [1, 8, 64, 256])
def test_pass_loss_float32(n: int) -> None:
    logp = logp_tensor([-1e4, -200.0, -30.0, -3.0, -0.5, -1e-3, -1e-7, 0.0], torch.float32)
    loss, grad = loss_and_grad(lambda x: pass_at_n_loss(x, n), logp)
    assert loss.dtype == grad.dtype == torch.float32
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    assert grad[0].item() == -1.0  # tiny regime: loss = −(log N + ℓ)
    assert loss[0].item() == pytest.approx(1e4 - math.log(n), rel=1e-7)
    assert loss[-1].item() == 0.0 and grad[-1].item() == (-1.0 if n == 1 else 0.0)
    assert (loss.diff() <= 0).all()  # decreasing in ℓ
    with localcontext(prec=PRECISION):
        weight_ref = [ref_pass_weight(n, dec(v).exp()) for v in logp.tolist()]
    assert_matches(-grad, weight_ref, RTOL32)


def test_pass_loss_tends_to_zero_at_certainty() -> None:
    logp = torch.tensor([-1e-3, -1e-6, -1e-12, -1e-300], dtype=torch.float64)
    loss = pass_at_n_loss(logp, 4)
    assert (loss.diff() <= 0).all() and loss[-1] == 0.0 and loss[0] < 1e-11


@pytest.mark.parametrize("n", [1, 4, 64])
def test_pass_loss_gradcheck(n: int) -> None:
    logp = torch.tensor([-60.0, -20.0, -3.0, -0.69, -0.7, -0.05, -1e-4], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: pass_at_n_loss(x, n), (logp,))


def test_pass_loss_accepts_tiny_positive_rounding() -> None:
    logp = torch.tensor([LOGP_POSITIVE_TOLERANCE / 2], dtype=torch.float64, requires_grad=True)
    loss, grad = loss_and_grad(lambda x: pass_at_n_loss(x, 1), logp)
    assert loss.item() == 0.0 and grad.item() == -1.0  # treated as ℓ = 0, straight-through gradient


def test_pass_loss_bfloat16_input_gives_float32_loss() -> None:
    logp = torch.tensor([-5.0, -0.25], dtype=torch.bfloat16, requires_grad=True)
    loss, grad = loss_and_grad(lambda x: pass_at_n_loss(x, 4), logp)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    assert loss[0].item() == pytest.approx(float(ref_pass_loss(4, Decimal(-5).exp())), rel=1e-6)


# ---------------------------------------------------------------------------
# Majority vote


@pytest.mark.parametrize("n", BUDGETS)
def test_majority_weight_matches_decimal_for_every_k(n: int) -> None:
    ks = torch.arange(1, n + 1)
    for p in P_GRID + [0.0, 1.0]:
        _, weight_ref = ref_majority(n, dec(p))
        got = majority_weight(torch.full((n,), p, dtype=torch.float64), n, ks)  # per-row k
        assert_matches(got, weight_ref, RTOL64)


@pytest.mark.parametrize("n", BUDGETS)
def test_majority_loss_and_gradient_match_decimal_for_every_k(n: int) -> None:
    with localcontext(prec=PRECISION):
        p_ref = [dec(v).exp() for v in LOGP_GRID]
    refs = [ref_majority(n, p) if p > 0 else None for p in p_ref]
    finite = [i for i, r in enumerate(refs) if r is not None]  # p = e^ℓ representable in Decimal
    logp = logp_tensor(LOGP_GRID)
    for k in range(1, n + 1):
        loss, grad = loss_and_grad(lambda x, k=k: majority_loss(x, n, k), logp)
        with localcontext(prec=PRECISION):
            loss_ref = [refs[i][0][k - 1] for i in finite]
            weight_ref = [refs[i][1][k - 1] for i in finite]
        assert_matches(loss[finite], loss_ref, RTOL64)
        assert_matches(-grad[finite], weight_ref, RTOL64)  # d loss/dℓ = −w(p)
        torch.testing.assert_close(
            -grad, majority_weight_from_logp(logp.detach(), n, k), rtol=RTOL64, atol=torch.finfo(torch.float64).tiny
        )


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_majority_random_points(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 256))
    k = data.draw(st.integers(1, n))
    logp = data.draw(st.floats(-46.0, -1e-9))
    with localcontext(prec=PRECISION):
        losses, weights = ref_majority(n, dec(logp).exp())
        loss_ref = losses[k - 1]
    x = logp_tensor([logp])
    loss, grad = loss_and_grad(lambda t: majority_loss(t, n, k), x)
    assert_matches(loss, [loss_ref], RTOL64)
    assert_matches(-grad, [weights[k - 1]], RTOL64)


@pytest.mark.parametrize(("n", "k"), [(1, 1), (8, 1), (8, 5), (8, 8), (64, 26), (256, 129)])
def test_majority_loss_float32_extremes(n: int, k: int) -> None:
    logp = logp_tensor([-1e4, -300.0, -30.0, -2.0, -0.2, -1e-6, 0.0], torch.float32)
    loss, grad = loss_and_grad(lambda x: majority_loss(x, n, k), logp)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    assert grad[0].item() == pytest.approx(-k, rel=1e-7)  # B ≈ C(N,k) p^k
    assert loss[0].item() == pytest.approx(-(k * -1e4 + math.log(math.comb(n, k))), rel=1e-7)
    assert loss[-1].item() == 0.0 and grad[-1].item() == (-float(n) if k == n else 0.0)
    assert (loss.diff() <= 0).all()
    with localcontext(prec=PRECISION):
        weight_ref = [ref_majority(n, dec(v).exp())[1][k - 1] for v in logp.tolist()[1:]]
    assert_matches(-grad[1:], weight_ref, RTOL32)


@pytest.mark.parametrize(("n", "k"), [(3, 2), (16, 9), (64, 26), (256, 200)])
def test_majority_weight_float32_and_monotone_where_reference_is(n: int, k: int) -> None:
    p64 = torch.cat(
        [torch.logspace(-20, -1, 60, dtype=torch.float64), torch.linspace(0.1, 0.999, 60, dtype=torch.float64)]
    )
    p32 = p64.to(torch.float32)
    got = majority_weight(p32, n, k)
    ref = [ref_majority(n, dec(v))[1][k - 1] for v in p32.tolist()]
    assert_matches(got, ref, RTOL32)
    ref_steps = np.diff(np.array([float(r) for r in ref]))
    got_steps = got.diff().numpy()
    assert np.all(got_steps[ref_steps < 0] <= 0) and np.all(got_steps[ref_steps > 0] >= 0)


def test_majority_weight_limits_and_pass_at_n_special_case() -> None:
    p = torch.tensor([0.0, 1e-30, 0.2, 0.8, 1.0], dtype=torch.float64)
    torch.testing.assert_close(
        majority_weight(p[:2], 16, 5), torch.tensor([5.0, 5.0], dtype=torch.float64), rtol=1e-15, atol=0.0
    )  # w(0) = k
    assert majority_weight(p, 16, 5)[-1] == 0.0
    torch.testing.assert_close(majority_weight(p, 16, 16), torch.full_like(p, 16.0))  # B = p^N
    torch.testing.assert_close(majority_weight(p, 16, 1), pass_at_n_weight(p, 16), rtol=1e-13, atol=0.0)


@pytest.mark.parametrize(("n", "k"), [(1, 1), (8, 1), (8, 5), (8, 8), (64, 33)])
def test_majority_loss_gradcheck(n: int, k: int) -> None:
    logp = torch.tensor([-40.0, -5.0, -1.2, -0.6, -0.1, -1e-3], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: majority_loss(x, n, k), (logp,))


def test_variance_inflation_limits() -> None:
    """CAT App. A.6: VI → 1 for Pass@N and → k² for majority as p → 0; VI = w² throughout."""
    tiny = torch.tensor([1e-12], dtype=torch.float64)
    assert variance_inflation(pass_at_n_weight(tiny, 64)).item() == pytest.approx(1.0, rel=1e-9)
    assert variance_inflation(majority_weight(tiny, 64, 26)).item() == pytest.approx(26.0**2, rel=1e-9)
    assert torch.equal(variance_inflation(torch.tensor([0.5, -2.0])), torch.tensor([0.25, 4.0]))


# ---------------------------------------------------------------------------
# Thresholds, DCO refill


@pytest.mark.parametrize(
    ("n", "fraction", "k"),
    [(64, 0.4, 26), (64, 0.25, 16), (64, 0.5, 32), (30, 0.1, 3), (7, 0.5, 4), (8, 1.0, 8), (5, 0.01, 1), (1, 0.5, 1)],
)
def test_consensus_threshold(n: int, fraction: float, k: int) -> None:
    assert consensus_threshold(n, fraction) == k  # CAT App. I.4: ρ = .4 → 26/64, ρ = .25 → 16/64


# (N, c_max, group size) → k = max(2, min(⌊N/2⌋+1, ⌊N·c_max/n⌋+1)), worked by hand.
DYNAMIC_THRESHOLD_TABLE = [
    (8, 0, 8, 2),
    (8, 1, 8, 2),
    (8, 3, 8, 4),
    (8, 4, 8, 5),
    (8, 6, 8, 5),
    (4, 3, 8, 2),
    (4, 5, 8, 3),
    (5, 1, 3, 2),
    (5, 2, 3, 3),
    (64, 1, 8, 9),
    (64, 2, 8, 17),
    (64, 3, 8, 25),
    (64, 4, 8, 33),
    (64, 7, 8, 33),
    (2, 0, 4, 2),
    (2, 4, 4, 2),
    (1, 0, 8, 1),
    (1, 8, 8, 1),
]


@pytest.mark.parametrize(("n", "c_max", "group_size", "k"), DYNAMIC_THRESHOLD_TABLE)
def test_dynamic_majority_threshold_table(n: int, c_max: int, group_size: int, k: int) -> None:
    assert dynamic_majority_threshold(n, c_max, group_size) == k


def test_dynamic_majority_threshold_tensor_matches_table() -> None:
    for n, group_size in [(8, 8), (64, 8), (4, 8)]:
        rows = [(c, k) for nn, c, g, k in DYNAMIC_THRESHOLD_TABLE if (nn, g) == (n, group_size)]
        counts = torch.tensor([c for c, _ in rows])
        got = dynamic_majority_threshold(n, counts, group_size)
        assert got.dtype == torch.long and got.tolist() == [k for _, k in rows]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_dynamic_majority_threshold_is_one_vote_above_projected_rival(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 512))
    group_size = data.draw(st.integers(1, 64))
    c_max = data.draw(st.integers(0, group_size))
    k = dynamic_majority_threshold(n, c_max, group_size)
    # The fewest votes strictly above the projected rival count N·c_max/n, by search.
    smallest_beating = next(v for v in range(n + 2) if v * group_size > n * c_max)
    assert 2 <= k <= n // 2 + 1
    assert k == max(2, min(n // 2 + 1, smallest_beating))


def test_dco_keep_mask() -> None:
    weights = torch.tensor([0.005, 0.01, 0.3, 1.0])
    assert dco_keep_mask(weights).tolist() == [False, True, True, True]
    assert dco_keep_mask(weights, eps=0.5).tolist() == [False, False, False, True]
    # Confident examples (large p) fall below the threshold and get replaced.
    keep = dco_keep_mask(pass_at_n_weight(torch.tensor([1e-3, 0.05, 0.5]), 16))  # F ≈ .99, .66, 2.4e-4
    assert keep.tolist() == [True, True, False]


# ---------------------------------------------------------------------------
# Contrastive margin


def test_contrastive_margin_hand_computation() -> None:
    very_negative = -1e4  # exp underflows: the masked softmax is one-hot, the rival is determined
    logits = torch.tensor(
        [
            [[3.0, 1.0, very_negative], [very_negative, 0.0, 2.5], [0.3, 0.2, 0.1]],
            [[0.3, 0.2, 0.1], [very_negative, 4.0, 1.0], [5.0, very_negative, 0.5]],
        ],
        requires_grad=True,
    )
    labels = torch.tensor([[0, 2, -100], [-100, 1, 0]])
    loss = contrastive_margin_loss(logits, labels, num_rivals=3, generator=torch.Generator().manual_seed(0))

    def softplus(x: float) -> float:  # −log σ(−x)
        return math.log1p(math.exp(x))

    expected = torch.tensor(
        [(softplus(1.0 - 3.0) + softplus(0.0 - 2.5)) / 2, (softplus(1.0 - 4.0) + softplus(0.5 - 5.0)) / 2]
    )
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=0.0)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    assert (grad[0, 2] == 0).all() and (grad[1, 0] == 0).all()  # ignored positions get no gradient
    # Hand gradient at (row 0, t 0): d/dz_gold = −σ(z_rival − z_gold)/T_valid, d/dz_rival = +σ(·)/T_valid.
    sigma = 1 / (1 + math.exp(2.0))
    torch.testing.assert_close(grad[0, 0], torch.tensor([-sigma / 2, sigma / 2, 0.0]), rtol=1e-6, atol=1e-12)


def test_contrastive_ignore_index_and_empty_rows() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 7, generator=generator)
    labels = torch.randint(0, 7, (3, 5), generator=generator)
    labels[1] = -1  # a row with no supervised token
    labels[2, :2] = -1
    loss = contrastive_margin_loss(logits, labels, generator=torch.Generator().manual_seed(2), ignore_index=-1)
    assert loss[1].item() == 0.0
    perturbed = logits.clone()
    perturbed[2, :2] += torch.randn(2, 7, generator=generator)  # ignored positions: loss must not move
    perturbed[1] += 3.0
    again = contrastive_margin_loss(perturbed, labels, generator=torch.Generator().manual_seed(2), ignore_index=-1)
    torch.testing.assert_close(again, loss)


def test_contrastive_gold_is_never_a_rival() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.zeros(4, 50, 6)
    labels = torch.randint(0, 6, (4, 50), generator=generator)
    logits.scatter_(-1, labels[..., None], 50.0)  # gold holds all but e^−50 of the mass
    rivals = sample_rivals(logits, labels, num_rivals=8, generator=generator)
    assert rivals.shape == (4, 50, 8) and not (rivals == labels[..., None]).any()
    loss = contrastive_margin_loss(logits, labels, num_rivals=8, generator=generator)
    assert (loss < 1e-20).all()  # each rival term is softplus(−50); a gold "rival" would add log 2


def test_sample_rivals_follows_masked_softmax() -> None:
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0, 0.5]])
    gold = torch.tensor([3])
    draws = 40_000
    rivals = sample_rivals(logits, gold, num_rivals=draws, generator=torch.Generator().manual_seed(4))
    masked = torch.tensor([1.0, 0.0, -1.0, 0.5]).exp()
    expected = torch.zeros(5)
    expected[[0, 1, 2, 4]] = masked / masked.sum()
    frequency = torch.bincount(rivals.ravel(), minlength=5) / draws
    stderr = (expected * (1 - expected) / draws).sqrt()
    assert frequency[3] == 0
    assert ((frequency - expected).abs() <= 5 * stderr + 1e-12).all()


def test_contrastive_is_reproducible_and_gradcheck() -> None:
    logits = torch.randn(2, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(5), requires_grad=True)
    labels = torch.tensor([[0, 1, 2, -100], [4, -100, 3, 3]])

    def loss_fn(x: torch.Tensor) -> torch.Tensor:
        return contrastive_margin_loss(x, labels, num_rivals=4, generator=torch.Generator().manual_seed(6))

    torch.testing.assert_close(loss_fn(logits), loss_fn(logits), rtol=0.0, atol=0.0)
    assert torch.autograd.gradcheck(loss_fn, (logits,))


# The hinge form (CAT eqs. 24 and 26): max(0, γ − m_t), m_t = z_gold − max_{v ≠ gold} z_v


def _hand_hinge(logits: torch.Tensor, labels: torch.Tensor, gamma: float, ignore_index: int = -100) -> list[float]:
    """The hinge loss per sequence written out with Python floats, one token at a time."""
    out = []
    for row_logits, row_labels in zip(logits.tolist(), labels.tolist()):
        terms = []
        for z, gold in zip(row_logits, row_labels):
            if gold == ignore_index:
                continue
            rival = max(value for v, value in enumerate(z) if v != gold)
            terms.append(max(0.0, gamma - (z[gold] - rival)))
        out.append(sum(terms) / len(terms) if terms else 0.0)
    return out


def test_contrastive_hinge_hand_computation_and_gradient() -> None:
    """γ = 1.5. Row 0: margins 1.0 (rival token 1) and −0.5 (rival 1), losses 0.5 and 2.0; row 1:
    margin 3.0 ≥ γ (loss 0) and 0.0 (gold tied with its rival, loss 1.5). Every number is exact
    in binary, so the comparison is exact."""
    logits = torch.tensor(
        [
            [[2.0, 1.0, 0.5, -1.0], [0.0, 3.0, 2.5, 1.0], [9.0, 9.0, 9.0, 9.0]],
            [[1.0, 4.0, 0.0, 0.5], [7.0, -7.0, 7.0, 0.0], [0.25, -0.5, -1.0, 0.25]],
        ],
        requires_grad=True,
    )
    labels = torch.tensor([[0, 2, -100], [1, -100, 3]])
    loss = contrastive_hinge_loss(logits, labels, target_margin=1.5)
    torch.testing.assert_close(loss, torch.tensor([(0.5 + 2.0) / 2, (0.0 + 1.5) / 2]), rtol=0.0, atol=0.0)
    assert loss.tolist() == _hand_hinge(logits.detach(), labels, 1.5)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    # Under the margin: −1/T_valid on the gold logit, +1/T_valid on the greedy rival's; nothing
    # else, nothing over the margin (row 1, t 0), nothing at ignored positions.
    expected = torch.zeros_like(logits)
    expected[0, 0, 0], expected[0, 0, 1] = -0.5, 0.5
    expected[0, 1, 2], expected[0, 1, 1] = -0.5, 0.5
    expected[1, 2, 3], expected[1, 2, 0] = -0.5, 0.5
    torch.testing.assert_close(grad, expected, rtol=0.0, atol=0.0)


def test_contrastive_hinge_is_zero_once_every_margin_exceeds_the_target() -> None:
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 6, 9, generator=generator)
    labels = torch.randint(0, 9, (3, 6), generator=generator)
    logits.scatter_(-1, labels[..., None], 20.0)  # randn stays below 6: every margin > 14
    logits.requires_grad_(True)
    loss = contrastive_hinge_loss(logits, labels, target_margin=14.0)
    assert (loss == 0).all()
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    assert (grad == 0).all()
    assert (contrastive_hinge_loss(logits, labels, target_margin=40.0) > 0).all()  # a wider target bites


def test_contrastive_hinge_matches_the_hand_formula_and_its_finite_differences() -> None:
    """Random float64 logits: generic margins (no token sits on the kink γ or on a rival tie), so
    the loss is differentiable there and gradcheck's finite differences apply."""
    generator = torch.Generator().manual_seed(8)
    logits = torch.randn(3, 5, 6, dtype=torch.float64, generator=generator)
    labels = torch.randint(0, 6, (3, 5), generator=generator)
    labels[0, 1] = labels[2, 4] = -100
    gamma = 0.7
    torch.testing.assert_close(
        contrastive_hinge_loss(logits, labels, gamma),
        torch.tensor(_hand_hinge(logits, labels, gamma), dtype=torch.float64),
        rtol=1e-15,
        atol=0.0,
    )
    gold = labels.clamp(min=0)
    masked = logits.scatter(-1, gold[..., None], -math.inf)
    margin = logits.gather(-1, gold[..., None]).squeeze(-1) - masked.max(dim=-1).values
    top2 = masked.topk(2, dim=-1).values
    assert ((margin - gamma).abs() > 1e-3).all() and ((top2[..., 0] - top2[..., 1]) > 1e-3).all()
    assert ((margin < gamma) & (labels != -100)).any() and ((margin > gamma) & (labels != -100)).any()
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: contrastive_hinge_loss(x, labels, gamma), (logits,))
    # The gradient touches the gold and greedy-rival logits of the tokens under the margin only.
    (grad,) = torch.autograd.grad(contrastive_hinge_loss(logits, labels, gamma).sum(), logits)
    under = (margin < gamma) & (labels != -100)
    touched = torch.zeros_like(grad, dtype=torch.bool)
    touched.scatter_(-1, gold[..., None], under[..., None])
    touched.scatter_(-1, masked.argmax(dim=-1, keepdim=True), under[..., None])
    assert (grad[~touched] == 0).all() and (grad[touched] != 0).all()


def test_contrastive_hinge_ignores_unsupervised_positions(monkeypatch) -> None:
    generator = torch.Generator().manual_seed(9)
    logits = torch.randn(3, 5, 7, generator=generator)
    labels = torch.randint(0, 7, (3, 5), generator=generator)
    labels[1] = -1  # a row with no supervised token
    labels[2, :2] = -1
    loss = contrastive_hinge_loss(logits, labels, target_margin=2.0, ignore_index=-1)
    assert loss[1].item() == 0.0
    perturbed = logits.clone()
    perturbed[2, :2] += 5.0 * torch.randn(2, 7, generator=generator)  # ignored positions: loss must not move
    perturbed[1] += 3.0
    torch.testing.assert_close(contrastive_hinge_loss(perturbed, labels, 2.0, ignore_index=-1), loss)
    # The greedy rival is found a few rows at a time (memory): the chunking changes nothing.
    monkeypatch.setattr("aligntrain.losses._RIVAL_SAMPLING_ROWS", 2)
    torch.testing.assert_close(contrastive_hinge_loss(logits, labels, 2.0, ignore_index=-1), loss, rtol=0, atol=0)


def test_contrastive_hinge_in_bfloat16_returns_float32() -> None:
    logits = torch.tensor([[[2.0, 1.0, 0.5], [0.0, 3.0, 2.5]]], dtype=torch.bfloat16)
    loss = contrastive_hinge_loss(logits, torch.tensor([[0, 2]]), target_margin=1.5)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, torch.tensor([1.25]), rtol=0.0, atol=0.0)


def test_contrastive_hybrid_loss() -> None:
    ce = torch.tensor([2.0, 1.0], requires_grad=True)
    margin = torch.tensor([0.4, 3.0], requires_grad=True)
    torch.testing.assert_close(contrastive_hybrid_loss(ce, margin), torch.tensor([1.2, 2.0]))
    torch.testing.assert_close(contrastive_hybrid_loss(ce, margin, mix=0.25), torch.tensor([1.6, 1.5]))
    assert torch.autograd.gradcheck(
        lambda a, b: contrastive_hybrid_loss(a, b, mix=0.3),
        (ce.detach().double().requires_grad_(), margin.detach().double().requires_grad_()),
    )


# ---------------------------------------------------------------------------
# CAT for RL


def test_empirical_success_probability() -> None:
    counts = torch.tensor([0, 1, 4, 8])
    got = empirical_success_probability(counts, 8)
    assert got.dtype == torch.get_default_dtype()
    torch.testing.assert_close(got, torch.tensor([1 / 10, 2 / 10, 5 / 10, 9 / 10]))
    got64 = empirical_success_probability(counts.double(), 8)
    assert got64.dtype == torch.float64
    assert_matches(got64, [Decimal(c + 1) / Decimal(10) for c in [0, 1, 4, 8]], 1e-15)
    assert empirical_success_probability(3, 4).item() == pytest.approx(4 / 6)


def test_sequence_success_probability_matches_decimal() -> None:
    values = [-1e4, -100.0, -50.0, -23.1, -20.0, -3.0, -1e-9, -1e-12, 0.0, LOGP_POSITIVE_TOLERANCE]
    logp = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    got = sequence_success_probability(logp)
    assert not got.requires_grad
    with localcontext(prec=PRECISION):
        low, high = Decimal("1e-10"), 1 - Decimal("1e-10")
        ref = [min(max(min(max(dec(v), Decimal(-50)), Decimal(0)).exp(), low), high) for v in values]
    assert_matches(got, ref, 1e-15)
    # float32 input (the trainer's): p is still formed in float64, so the ceiling 1 − 1e−10 survives.
    got32 = sequence_success_probability(logp.detach().float())
    assert got32.dtype == torch.float64 and got32[-1].item() == 1 - 1e-10
    assert_matches(got32, ref, RTOL32)


@pytest.mark.parametrize("n", BUDGETS)
def test_cat_pass_rl_weights_match_decimal(n: int) -> None:
    p = torch.tensor(P_GRID, dtype=torch.float64)
    raw = cat_pass_at_n_rl_weight(p, n, clip=math.inf)
    assert_matches(raw, [ref_power_weight(n, 1 - dec(v)) for v in P_GRID], RTOL64)
    normalised = cat_pass_at_n_rl_weight(p, n, log_weighted=True)
    assert_matches(normalised, [ref_pass_weight(n, dec(v)) for v in P_GRID], RTOL64)
    clipped = cat_pass_at_n_rl_weight(p, n, clip=3.0)
    torch.testing.assert_close(clipped, raw.clamp(max=3.0), rtol=0.0, atol=0.0)


def test_cat_pass_rl_weight_edges() -> None:
    p = torch.tensor([0.0, 1.0], dtype=torch.float64)
    assert cat_pass_at_n_rl_weight(p, 256).tolist() == [50.0, 0.0]  # raw N = 256 clipped at 50
    assert cat_pass_at_n_rl_weight(p, 1).tolist() == [1.0, 1.0]  # N(1−p)^0 = 1, also at p = 1
    assert cat_pass_at_n_rl_weight(torch.tensor([0.3]), 4).dtype == torch.float32


@pytest.mark.parametrize("n", [1, 4, 8, 33, 128, 256])
def test_cat_majority_rl_weights_match_decimal(n: int) -> None:
    ks = torch.arange(1, n + 1)
    for p in P_GRID:
        p_rows = torch.full((n,), p, dtype=torch.float64)
        raw = cat_majority_rl_weight(p_rows, n, ks, clip=math.inf)
        assert_matches(raw, [ref_raw_majority(n, k, dec(p)) for k in range(1, n + 1)], RTOL64)
        normalised = cat_majority_rl_weight(p_rows, n, ks, log_weighted=True, clip=math.inf)
        assert_matches(normalised, ref_majority(n, dec(p))[1], RTOL64)


def test_cat_majority_rl_weight_per_row_threshold_and_clip() -> None:
    p = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.4, 0.6]], dtype=torch.float64)
    k = dynamic_majority_threshold(8, torch.tensor([2, 4]), group_size=8)  # → [3, 5]
    assert k.tolist() == [3, 5]
    got = cat_majority_rl_weight(p, 8, k, clip=math.inf)
    expected = [
        [float(ref_raw_majority(8, kk, dec(v))) for v in row] for kk, row in zip([3, 5], p.tolist(), strict=True)
    ]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0.0)
    sft = cat_majority_rl_weight(p, 8, k, log_weighted=True)
    torch.testing.assert_close(sft[1], majority_weight(p[1], 8, 5), rtol=0.0, atol=0.0)
    assert cat_majority_rl_weight(torch.tensor([0.0]), 256, 1).item() == 50.0  # raw weight N clipped
    assert cat_majority_rl_weight(torch.tensor([1.0], dtype=torch.float64), 8, 8).item() == 8.0


@pytest.mark.parametrize("n", BUDGETS)
def test_cat_best_of_n_weight_matches_decimal(n: int) -> None:
    q = torch.tensor([0.0, *P_GRID, 1.0], dtype=torch.float64)
    got = cat_best_of_n_rl_weight(q, n, clip=math.inf)
    assert_matches(got, [ref_power_weight(n, dec(v)) for v in q.tolist()], RTOL64)
    assert cat_best_of_n_rl_weight(q, n).max().item() == min(n, 50.0)


# ---------------------------------------------------------------------------
# Validation: every ValueError path names its argument

P = torch.tensor([0.5])
LOGP = torch.tensor([-1.0])
LOGITS = torch.zeros(1, 2, 3)
LABELS = torch.tensor([[0, 1]])

VALUE_ERRORS = [
    (lambda: pass_at_n_loss(LOGP, 0), "n must be >= 1"),
    (lambda: pass_at_n_loss(LOGP, 2.5), "n must be an integer"),
    (lambda: pass_at_n_loss(LOGP, True), "n must be an integer"),
    (lambda: pass_at_n_loss(torch.tensor([0.1]), 2), "logp must be <= 0"),
    (lambda: pass_at_n_loss(torch.tensor([math.nan]), 2), "logp contains NaN"),
    (lambda: pass_at_n_loss(torch.tensor([-1]), 2), "logp must be a floating-point"),
    (lambda: pass_at_n_weight(torch.tensor([1.5]), 2), "p must lie in"),
    (lambda: pass_at_n_weight(torch.tensor([-0.1]), 2), "p must lie in"),
    (lambda: pass_at_n_weight(torch.tensor([math.nan]), 2), "p contains NaN"),
    (lambda: pass_at_n_weight("0.5", 2), "p must be a tensor"),
    (lambda: pass_at_n_weight(P, -1), "n must be >= 1"),
    (lambda: pass_at_n_weight_from_logp(torch.tensor([1.0]), 2), "logp must be <= 0"),
    (lambda: majority_loss(LOGP, 4, 0), "k must be >= 1"),
    (lambda: majority_loss(LOGP, 4, 5), "k must be <= n"),
    (lambda: majority_loss(LOGP, 4, torch.tensor([2])), "k must be an int"),
    (lambda: majority_loss(LOGP, 0, 1), "n must be >= 1"),
    (lambda: majority_loss(torch.tensor([2.0]), 4, 2), "logp must be <= 0"),
    (lambda: majority_loss(torch.tensor([math.nan]), 4, 2), "logp contains NaN"),
    (lambda: majority_weight(P, 4, 5), "k must be <= n"),
    (lambda: majority_weight(torch.tensor([0.5, 0.5]), 4, torch.tensor([1, 5])), "k must lie in"),
    (lambda: majority_weight(torch.tensor([0.5, 0.5]), 4, torch.tensor([1.5, 2.0])), "k must hold integers"),
    (lambda: majority_weight(torch.tensor([0.5, 0.5]), 4, torch.tensor([1, 2, 3])), "k must have a shape"),
    (lambda: majority_weight(torch.tensor([2.0]), 4, 2), "p must lie in"),
    (lambda: majority_weight_from_logp(torch.tensor([math.nan]), 4, 2), "logp contains NaN"),
    (lambda: consensus_threshold(8, 0.0), "fraction must lie in"),
    (lambda: consensus_threshold(8, 1.5), "fraction must lie in"),
    (lambda: consensus_threshold(8, math.nan), "fraction must not be NaN"),
    (lambda: consensus_threshold(8, "0.5"), "fraction must be a real number"),
    (lambda: consensus_threshold(0, 0.5), "n must be >= 1"),
    (lambda: dco_keep_mask(torch.tensor([math.nan])), "weights contains NaN"),
    (lambda: dco_keep_mask(P, eps=-0.1), "eps must be >= 0"),
    (lambda: dco_keep_mask(P, eps=math.nan), "eps must not be NaN"),
    (lambda: dco_keep_mask([0.5], eps=0.1), "weights must be a tensor"),
    (lambda: log1mexp(torch.tensor([-1])), "x must be a floating-point tensor"),
    (lambda: variance_inflation([0.5]), "weight must be a tensor"),
    (lambda: majority_weight(torch.tensor([0.5]), 4, torch.tensor([math.nan])), "k contains NaN"),
    (lambda: empirical_success_probability(torch.tensor([math.nan]), 4), "correct_counts contains NaN"),
    (lambda: empirical_success_probability(2.5, 4), "correct_counts must be an integer"),
    (lambda: sequence_success_probability(torch.tensor([-1])), "logp must be a floating-point tensor"),
    (lambda: contrastive_margin_loss(LOGITS, LABELS, ignore_index=0.5), "ignore_index must be an integer"),
    (lambda: contrastive_hinge_loss(LOGITS, LABELS, target_margin=0.0), "target_margin must be > 0"),
    (lambda: contrastive_hinge_loss(LOGITS, LABELS, target_margin=math.nan), "target_margin must not be NaN"),
    (lambda: contrastive_hinge_loss(LOGITS, LABELS, target_margin=math.inf), "target_margin must be finite"),
    (lambda: contrastive_hinge_loss(LOGITS, torch.tensor([[0, 3]])), "labels must lie in"),
    (lambda: contrastive_hinge_loss(torch.zeros(2, 3), LABELS), "logits must be a floating-point tensor"),
    (lambda: contrastive_hinge_loss(torch.zeros(1, 2, 1), torch.tensor([[0, 0]])), "vocabulary of at least 2"),
    (lambda: contrastive_hybrid_loss(P, P, mix=math.nan), "mix must not be NaN"),
    (lambda: sample_rivals(torch.zeros(2, 3), torch.tensor([0, 1, 2])), "gold must have shape"),
    (lambda: log1mexp(torch.tensor([0.5])), "x must be <= 0"),
    (lambda: log1mexp(torch.tensor([math.nan])), "x contains NaN"),
    (lambda: variance_inflation(torch.tensor([math.nan])), "weight contains NaN"),
    (lambda: contrastive_margin_loss(LOGITS, LABELS, num_rivals=0), "num_rivals must be >= 1"),
    (lambda: contrastive_margin_loss(LOGITS, torch.tensor([[0, 3]])), "labels must lie in"),
    (lambda: contrastive_margin_loss(LOGITS, torch.tensor([0, 1])), "labels must be an integer tensor"),
    (lambda: contrastive_margin_loss(torch.zeros(2, 3), LABELS), "logits must be a floating-point tensor"),
    (lambda: contrastive_margin_loss(torch.zeros(1, 2, 1), torch.tensor([[0, 0]])), "vocabulary of at least 2"),
    (lambda: sample_rivals(torch.zeros(2, 3), torch.tensor([0, 1]), num_rivals=0), "num_rivals must be >= 1"),
    (lambda: sample_rivals(torch.zeros(2, 1), torch.tensor([0, 0]), num_rivals=2), "vocabulary of at least 2"),
    (lambda: contrastive_hybrid_loss(P, P, mix=1.5), "mix must lie in"),
    (lambda: contrastive_hybrid_loss(P, torch.tensor([0.5, 0.5])), "same shape"),
    (lambda: empirical_success_probability(torch.tensor([5]), 4), "correct_counts must lie in"),
    (lambda: empirical_success_probability(torch.tensor([-1]), 4), "correct_counts must lie in"),
    (lambda: empirical_success_probability(torch.tensor([1.5]), 4), "correct_counts must hold integers"),
    (lambda: empirical_success_probability(1, 0), "group_size must be >= 1"),
    (lambda: sequence_success_probability(torch.tensor([0.5])), "logp must be <= 0"),
    (lambda: sequence_success_probability(torch.tensor([math.nan])), "logp contains NaN"),
    (lambda: dynamic_majority_threshold(0, 1, 8), "n must be >= 1"),
    (lambda: dynamic_majority_threshold(8, 9, 8), "c_max must be <= group_size"),
    (lambda: dynamic_majority_threshold(8, -1, 8), "c_max must be >= 0"),
    (lambda: dynamic_majority_threshold(8, torch.tensor([9]), 8), "c_max must lie in"),
    (lambda: dynamic_majority_threshold(8, 1, 0), "group_size must be >= 1"),
    (lambda: cat_pass_at_n_rl_weight(P, 4, clip=0.0), "clip must be > 0"),
    (lambda: cat_pass_at_n_rl_weight(P, 4, clip=math.nan), "clip must not be NaN"),
    (lambda: cat_pass_at_n_rl_weight(P, 4, clip=None), "clip must be a real number"),
    (lambda: cat_pass_at_n_rl_weight(torch.tensor([1.1]), 4), "p must lie in"),
    (lambda: cat_pass_at_n_rl_weight(P, 0), "n must be >= 1"),
    (lambda: cat_majority_rl_weight(P, 4, 5), "k must be <= n"),
    (lambda: cat_majority_rl_weight(P, 4, 0), "k must be >= 1"),
    (lambda: cat_majority_rl_weight(P, 4, 2, clip=-1.0), "clip must be > 0"),
    (lambda: cat_majority_rl_weight(torch.tensor([math.nan]), 4, 2), "p contains NaN"),
    (lambda: cat_best_of_n_rl_weight(torch.tensor([1.5]), 4), "q must lie in"),
    (lambda: cat_best_of_n_rl_weight(P, 4, clip=0.0), "clip must be > 0"),
    (lambda: cat_best_of_n_rl_weight(P, 0), "n must be >= 1"),
    # ℓ = −inf (p = 0) is outside the domain: the loss would be inf with no error.
    (lambda: pass_at_n_loss(torch.tensor([-1.0, -math.inf]), 2), "logp must be finite.*1 of 2 values are -inf"),
    (lambda: pass_at_n_loss(torch.tensor([math.inf]), 2), "logp must be <= 0.*got max inf"),
    (lambda: pass_at_n_loss(torch.tensor([-math.inf, math.nan]), 2), "logp contains NaN"),
    (lambda: pass_at_n_weight_from_logp(-math.inf, 2), "logp must be finite"),
    (lambda: majority_loss(torch.tensor([-math.inf]), 4, 2), "logp must be finite"),
    (lambda: majority_weight_from_logp(torch.tensor([-math.inf]), 4, 2), "logp must be finite"),
    (lambda: sequence_success_probability(torch.tensor([-math.inf])), "logp must be finite"),
]


@pytest.mark.parametrize(("call", "message"), VALUE_ERRORS, ids=[m for _, m in VALUE_ERRORS])
def test_value_errors_name_the_argument(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_strategy_losses_refuse_an_infinite_log_probability() -> None:
    """The training path (an objective's loss on a batch's ℓ) stops instead of returning inf."""
    from aligntrain.objectives import get_objective

    logp = torch.tensor([-2.0, -math.inf], dtype=torch.float32, requires_grad=True)
    for name, options in [("pass_at_n", {"budget": 4}), ("majority", {"budget": 4, "k": 2})]:
        objective = get_objective(name).model_validate(options)
        with pytest.raises(ValueError, match="logp must be finite"):
            objective.loss(logp)
        with pytest.raises(ValueError, match="logp must be finite"):
            objective.weight(logp)
    finite = logp.detach()[:1].requires_grad_()
    assert torch.isfinite(pass_at_n_loss(finite, 4)).all()


def test_as_tensor_is_the_one_conversion():
    """A tensor passes as it is; numbers and arrays of them become new float64 tensors; the rest is refused."""
    t = torch.tensor([0.5], dtype=torch.float32)
    assert as_tensor(t, "p") is t
    scalar = as_tensor(0.1, "p")
    assert scalar.dtype == torch.float64 and scalar.shape == () and scalar.item() == 0.1
    assert as_tensor(3, "p").dtype == torch.float64
    nodes = np.array([0.25, 0.5])
    nodes.flags.writeable = False
    converted = as_tensor(nodes, "p")  # a copy: read-only arrays are fine
    assert converted.dtype == torch.float64 and converted.tolist() == [0.25, 0.5]
    assert as_tensor([1, 2], "p").tolist() == [1.0, 2.0]
    expected = pass_at_n_weight(torch.tensor([0.1, 0.5], dtype=torch.float64), 4)
    assert torch.equal(pass_at_n_weight(np.array([0.1, 0.5]), 4), expected)
    for bad in (True, "0.5", None, [True, False], np.array(["a"])):
        with pytest.raises(ValueError, match="p must be a tensor, a real number or an array of them"):
            as_tensor(bad, "p")
