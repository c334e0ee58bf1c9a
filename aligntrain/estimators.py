"""Evaluation estimators on a pool of M completions per prompt (docs/math.md §1).

Every estimator here is *exact* for sampling k of the pool's M completions without
replacement; nothing is Monte Carlo except ``maj_at_k_monte_carlo``, the papers'
500-draw estimate (CAT App. I.3), kept for comparison and benchmarks.

- pass@k: unbiased estimator of Chen et al. (2021), in log space.
- maj@k: exact plurality-vote success probability by a DP over answer classes.
- max@k (bo@k): exact expected best of k, plus TEA's grouped protocol (TEA App. B.2).
- Uncertainty over prompts: mean ± standard error (CAT) and win/tie/loss counts (TEA App. B.2);
  the paired bootstrap over seeds and prompts is :mod:`aligntrain.evaluation.inference`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from aligntrain.validation import (
    check_finite_vector,
    check_int,
    check_int_sequence,
    check_real,
)

__all__ = [
    "WinTieLoss",
    "ensemble_budgets",
    "ensemble_pass_at_k_curve",
    "grouped_max_at_k",
    "maj_at_k",
    "maj_at_k_curve",
    "maj_at_k_monte_carlo",
    "max_at_k",
    "max_at_k_curve",
    "mean_and_stderr",
    "pass_at_k",
    "pass_at_k_curve",
    "win_tie_loss",
]

#: Largest pool for which maj@k counts subsets in float64. Every count the DP forms
#: is at most C(M, k) <= 2**M < 2**1024 (float64's ceiling), and all terms are
#: positive, so the relative error stays near (number of operations) x 1.1e-16.
#: Larger pools switch to exact Python integers (slower: object arrays).
MAJ_FLOAT64_POOL_LIMIT = 1000


# ---------------------------------------------------------------------------
# Validation helpers


def _validated_k(k: object, pool_size: int, pool_name: str) -> int:
    k = check_int(k, "k", minimum=1)
    if k > pool_size:
        raise ValueError(f"k must be <= {pool_name} = {pool_size}, got {k}")
    return k


def _validated_ks(ks: Sequence[int], pool_size: int, pool_name: str) -> list[int]:
    budgets = check_int_sequence(ks, "ks", minimum=1, item_name="k")
    return [_validated_k(k, pool_size, pool_name) for k in budgets]


def _paired_vectors(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a, b = check_finite_vector(a, "a", booleans=False), check_finite_vector(b, "b", booleans=False)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same length, got {a.size} and {b.size}")
    return a, b


# ---------------------------------------------------------------------------
# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for c correct of n samples: 1 − C(n−c, k)/C(n, k) (docs/math.md §1).

    See ``pass_at_k_curve`` for the numerics; this is its one-prompt, one-k case.
    """
    return float(pass_at_k_curve(n, [check_int(c, "c", minimum=0)], [k])[0, 0])


def pass_at_k_curve(n: int, c: ArrayLike, ks: Sequence[int]) -> np.ndarray:
    """pass@k for every prompt (rows, c correct of the same n) and every k (columns).

    1 − C(n−c, k)/C(n, k) = 1 − Π_{j=0}^{k−1} (1 − c/(n−j)) (docs/math.md §1), evaluated as
    −expm1(Σ_j log1p(−c/(n−j))) so that tiny probabilities (n = 1000, c = 1, k = 1) keep
    full relative precision. k factors, not n: the cost grows with the largest k and the
    number of distinct c, never with n (n = 10¹² costs what n = 64 does). One cumulative
    sum over j serves every k. It is exactly 1 when n − c < k (a factor is 0: every
    k-subset holds a correct sample).
    """
    return -np.expm1(_log_failure_curve(n, c, ks))


def _log_failure_curve(n: int, c: ArrayLike, ks: Sequence[int]) -> np.ndarray:
    """log C(n−c, k)/C(n, k) per prompt and k (−inf when n − c < k): log(1 − pass@k), validated."""
    n = check_int(n, "n", minimum=1)
    c_values = np.asarray(c)
    if c_values.ndim != 1:
        raise ValueError(f"c must be one-dimensional (one count per prompt), got shape {c_values.shape}")
    # Booleans are per-sample correctness, not counts; np.asarray([3, True]) would hide one.
    if any(isinstance(value, (bool, np.bool_)) for value in np.asarray(c, dtype=object)):
        raise ValueError(f"c must hold integer counts, not booleans, got {c!r}")
    try:
        correct = c_values.astype(np.int64)
        integral = np.array_equal(correct, c_values)
    except (TypeError, ValueError):
        integral = False
    if not integral:
        raise ValueError(f"c must hold integer counts, got {c!r}")
    if np.any(correct < 0):
        raise ValueError(f"c must be >= 0, got min {correct.min()}")
    if np.any(correct > n):
        raise ValueError(f"c must be <= n = {n}, got max {correct.max()}")
    ks = _validated_ks(ks, n, "n")

    if correct.size == 0:
        return np.full((0, len(ks)), -np.inf)
    distinct, row_of = np.unique(correct, return_inverse=True)
    # ratio[c, j] = c/(n − j) for j < max k; a ratio ≥ 1 is a factor ≤ 0, i.e. log = −inf.
    ratio = distinct[:, None] / (n - np.arange(max(ks), dtype=np.float64))[None, :]
    with np.errstate(divide="ignore"):
        log_factors = np.log1p(-np.minimum(ratio, 1.0))
    cumulative = np.cumsum(log_factors, axis=1)  # column k − 1: log C(n−c, k)/C(n, k)
    return cumulative[:, np.asarray(ks) - 1][row_of.reshape(-1)]


def ensemble_budgets(k: int, members: int) -> list[int]:
    """Attempts of each of ``members`` models sharing k attempts: k // K each, the first k mod K one more.

    [choice] DCO §5.3 splits the test-time budget evenly over the ensemble's K models; a
    remainder goes to the first members in the order given, so every k has an exact score.
    """
    k = check_int(k, "k", minimum=1)
    members = check_int(members, "members", minimum=1)
    return [k // members + (1 if i < k % members else 0) for i in range(members)]


def ensemble_pass_at_k_curve(n: int, c: ArrayLike, ks: Sequence[int]) -> np.ndarray:
    """pass@k of an ensemble of K models that share the budget: 1 − Π_i C(n−c_i, k_i)/C(n, k_i) per prompt and k.

    ``c``: prompts × K correct counts, member i's c_i of its own n samples; k_i =
    :func:`ensemble_budgets` (k, K). Each member's k_i attempts are drawn without replacement
    from its own pool, independently of the others, so the ensemble fails only when every
    member fails: the product of the members' unbiased failure probabilities (docs/math.md §1)
    is an unbiased estimate of the ensemble's (DCO §5.3, Table 2's ensemble; a member with
    k_i = 0 fails with probability 1). Summed in log space and finished with −expm1, as
    :func:`pass_at_k_curve`, so that K = 1 is that estimator exactly. Returns prompts × len(ks).
    """
    n = check_int(n, "n", minimum=1)
    counts = np.asarray(c)
    if counts.ndim != 2 or counts.shape[1] < 1:
        raise ValueError(f"c must be prompts x members, got shape {counts.shape}")
    ks = _validated_ks(ks, n * counts.shape[1], "n x members")
    members = counts.shape[1]
    log_failure = np.zeros((counts.shape[0], len(ks)))
    for member in range(members):
        budgets = [ensemble_budgets(k, members)[member] for k in ks]
        drawn = sorted({b for b in budgets if b})
        # every member's counts are validated, drawn from or not; k_i = 0 adds log 1 = 0
        member_log = _log_failure_curve(n, counts[:, member], drawn or [1])
        column = {b: j for j, b in enumerate(drawn)}
        for j, b in enumerate(budgets):
            if b:
                log_failure[:, j] += member_log[:, column[b]]
    return -np.expm1(log_failure)


# ---------------------------------------------------------------------------
# maj@k


@lru_cache(maxsize=256)  # the same rows recur across the prompts of an evaluation
def _binomial_row(n: int, exact: bool) -> np.ndarray:
    """C(n, 0..n) as float64 (correctly rounded) or as exact Python ints (object)."""
    row = [1]
    for j in range(n):  # C(n, j+1) = C(n, j) (n − j) / (j + 1), exact in integers
        row.append(row[-1] * (n - j) // (j + 1))
    array = np.array(row, dtype=object) if exact else np.array(row, dtype=np.float64)
    array.flags.writeable = False
    return array


@lru_cache(maxsize=256)
def _lag_index(length: int) -> np.ndarray:
    """L[i, j] = j − i where j >= i, else ``length`` (the zero slot of a padded polynomial)."""
    lag = np.arange(length)[None, :] - np.arange(length)[:, None]
    index = np.where(lag >= 0, lag, length)
    index.flags.writeable = False
    return index


def _times_polynomial(rows: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Multiply each row (coefficients in x) by ``poly``, truncated to the row length.

    Short polynomials: one shifted add per coefficient. Longer ones: one product with
    the banded Toeplitz matrix, which costs fewer numpy calls (the arrays are tiny,
    so call overhead, not arithmetic, is the cost).
    """
    if len(poly) <= 3:
        product = rows * poly[0]
        for power in range(1, len(poly)):
            product[:, power:] += poly[power] * rows[:, :-power]
        return product
    length = rows.shape[1]
    padded = np.zeros(length + 1, dtype=rows.dtype)
    padded[: len(poly)] = poly
    return rows @ padded[_lag_index(length)]


def _contender_ways(contenders: Sequence[int], t: int, room: int, exact: bool) -> np.ndarray:
    """D_t[τ, s] of docs/math.md §1 for the wrong classes that can reach t votes.

    Ways to draw s completions (s <= room) from the ``contenders`` (class sizes) so that
    every class gets at most t and exactly τ classes get t: the product over classes
    of Σ_{u<t} C(n_j, u) x^u + C(n_j, t) x^t y, coefficient of x^s y^τ. τ never
    exceeds room // t, which bounds the array.
    """
    max_ties = min(len(contenders), room // t)
    dtype = object if exact else np.float64
    ways = np.zeros((max_ties + 1, room + 1), dtype=dtype)
    if t == 1:  # a class takes 0 votes or 1 (a tie): D_1[s, s] = e_s(n_1, ..., n_m)
        elementary = np.ones(1, dtype=dtype)
        for size in contenders:
            elementary = np.convolve(elementary, np.array([1, size], dtype=dtype))[: max_ties + 1]
        np.fill_diagonal(ways, elementary)
        return ways
    first, *others = contenders  # the first class's own polynomial starts the product
    first_row = _binomial_row(first, exact)
    ways[0, : min(t, room + 1)] = first_row[: min(t, room + 1)]
    ways[1, t] = first_row[t]
    for size in others:
        row = _binomial_row(size, exact)
        grown = _times_polynomial(ways, row[: min(t, room + 1)])  # this class takes u < t
        grown[1:, t:] += row[t] * ways[:-1, : room + 1 - t]  # it takes exactly t: one more tie
        ways = grown
    return ways


def _maj_winning_subsets(
    n_correct: int, wrong_sizes: Sequence[int], n_unparseable: int, k_max: int, exact: bool
) -> np.ndarray:
    """Entry k (0..k_max): Σ over k-subsets of the pool of the correct class's vote share.

    docs/math.md §1: Σ_{t>=1} C(n_c, t) Σ_{s,τ} D_t[s, τ] C(n_free, k−t−s) / (1+τ). For t
    correct votes, a wrong class with fewer than t completions, or any wrong class
    when t > k_max − t (no room for t more votes), cannot tie or beat the correct
    class: like the unparseable ones it only dilutes, so it joins the n_free
    completions and the DP runs over the few large classes only. A level t without
    such contenders is a sure win, C(n_c, t) C(M − n_c, k − t); all of those levels
    are summed by one convolution. The k-dependence sits in the last convolution,
    so one pass serves every k <= k_max.
    """
    dtype = object if exact else np.float64
    n_others = n_unparseable + sum(wrong_sizes)
    largest_wrong = max(wrong_sizes, default=0)
    top_level = min(n_correct, k_max)
    sure_wins = np.zeros(k_max + 1, dtype=dtype)  # C(n_c, t) at the levels without contenders
    sure_wins[1 : top_level + 1] = _binomial_row(n_correct, exact)[1 : top_level + 1]
    winning = np.zeros(k_max + 1, dtype=dtype)
    # Tie weights 1/(1+τ), τ <= k_max. Exact counts use the integers scale/(1+τ) and
    # divide by scale once at the end.
    scale = math.lcm(*range(1, k_max + 2)) if exact else 1
    for t in range(1, min(top_level, largest_wrong, k_max // 2) + 1):
        room = k_max - t  # draws left for wrong and unparseable completions
        contenders = [size for size in wrong_sizes if size >= t]
        ways = _contender_ways(contenders, t, room, exact)
        n_rows = ways.shape[0]  # τ = 0 .. n_rows − 1
        if exact:
            tie_weights = np.array([scale // (1 + tau) for tau in range(n_rows)], dtype=object)
        else:
            tie_weights = 1.0 / np.arange(1, n_rows + 1)
        n_free = n_others - sum(contenders)
        with_free = np.convolve(tie_weights @ ways, _binomial_row(n_free, exact)[: room + 1])
        winning[t:] += sure_wins[t] * with_free[: room + 1]
        sure_wins[t] = 0
    winning += scale * np.convolve(sure_wins, _binomial_row(n_others, exact)[: k_max + 1])[: k_max + 1]
    if exact:
        return np.array([Fraction(count, scale) for count in winning], dtype=object)
    return winning


def _answer_pool(answers: Sequence[Hashable | None], correct: Hashable) -> tuple[int, list[int], int]:
    """(n_correct, wrong class sizes, n_unparseable) of a pool of answer classes."""
    if correct is None:
        raise ValueError("correct must be an answer class, not None")
    if not _hashable(correct):
        raise ValueError(f"correct must be a hashable answer class, got {correct!r}")
    if len(answers) == 0:
        raise ValueError("answers must be non-empty")
    try:
        class_sizes = Counter(answers)
    except TypeError:  # an unhashable answer (a list, a dict): name it rather than leak a TypeError
        index, answer = next((i, a) for i, a in enumerate(answers) if not _hashable(a))
        raise ValueError(f"answers must hold hashable answer classes or None; answers[{index}] is {answer!r}") from None
    n_unparseable = class_sizes.pop(None, 0)
    n_correct = class_sizes.pop(correct, 0)
    return n_correct, list(class_sizes.values()), n_unparseable


def _hashable(value: object) -> bool:
    # hash() itself: a tuple is Hashable by type yet fails to hash when it holds a list.
    try:
        hash(value)
    except TypeError:
        return False
    return True


def maj_at_k(answers: Sequence[Hashable | None], correct: Hashable, k: int) -> float:
    """Exact probability that a plurality vote of k completions drawn without
    replacement from the pool picks the correct class (docs/math.md §1).

    ``answers[i]`` is completion i's canonical answer class, None when unparseable
    (drawn, never wins); ``correct`` is the gold class (classes compared with ==). A
    draw with no valid answer fails; a tie of the correct class with τ others scores
    1/(1+τ). See ``maj_at_k_curve`` for the method; this is its one-k case.
    """
    return float(maj_at_k_curve(answers, correct, [k])[0])


def maj_at_k_curve(answers: Sequence[Hashable | None], correct: Hashable, ks: Sequence[int]) -> np.ndarray:
    """maj@k for every k in ``ks`` from one DP pass (rules as in ``maj_at_k``).

    Method [choice, docs/math.md §1]: for each number t of correct votes, count the ways
    the wrong classes can stay at or below t (D_t[s, τ], tracking ties τ) by a DP over
    the classes that can reach t, fold in the classes that cannot by one binomial, and
    weight ties by 1/(1+τ); divide by C(M, k). Pools up to ``MAJ_FLOAT64_POOL_LIMIT``
    count in float64: no overflow, and only positive terms are added, so rounding
    stays relative (a few 1e-16 measured against exact values at M = 512); larger
    pools count with exact integers (object arrays, much slower). Cost: for each
    t <= min(n_c, largest wrong class, max k / 2), one small array update per wrong
    class holding >= t completions — no per-subset work; about 0.1–1 ms for M = 128
    and k <= 64 (benchmarks/README.md).
    """
    n_correct, wrong_sizes, n_unparseable = _answer_pool(answers, correct)
    pool_size = n_correct + sum(wrong_sizes) + n_unparseable
    ks = _validated_ks(ks, pool_size, "len(answers)")
    exact = pool_size > MAJ_FLOAT64_POOL_LIMIT
    winning = _maj_winning_subsets(n_correct, wrong_sizes, n_unparseable, max(ks), exact)
    all_subsets = _binomial_row(pool_size, exact)
    return np.array([float(winning[k] / all_subsets[k]) for k in ks])


def maj_at_k_monte_carlo(
    answers: Sequence[Hashable | None],
    correct: Hashable,
    k: int,
    draws: int = 500,
    rng: np.random.Generator | int | None = None,
) -> float:
    """The seeds' Monte Carlo maj@k (CAT App. I.3): mean over ``draws`` random
    k-subsets (without replacement) of whether the plurality answer is correct.

    Rules as in ``maj_at_k``. [choice] A tie scores its expected value 1/(1+τ)
    instead of a sampled coin flip: same expectation, smaller variance. Vectorised:
    one argpartition of random keys picks all subsets, one bincount tallies votes.
    """
    n_correct, wrong_sizes, n_unparseable = _answer_pool(answers, correct)
    k = _validated_k(k, len(answers), "len(answers)")
    draws = check_int(draws, "draws", minimum=1)
    # Class labels: 0 = correct, 1..m = wrong classes, m+1 = unparseable (not a candidate).
    n_classes = 1 + len(wrong_sizes)
    labels = np.repeat(
        np.arange(n_classes + 1), [n_correct, *wrong_sizes, n_unparseable]
    )  # the pool, reordered by class (order is irrelevant to uniform subsets)
    generator = np.random.default_rng(rng)
    picks = generator.random((draws, labels.size)).argpartition(k - 1, axis=1)[:, :k]
    offsets = (n_classes + 1) * np.arange(draws)[:, None]
    votes = np.bincount((labels[picks] + offsets).ravel(), minlength=draws * (n_classes + 1))
    votes = votes.reshape(draws, n_classes + 1)[:, :n_classes]
    top = votes.max(axis=1)
    n_at_top = (votes == top[:, None]).sum(axis=1)
    correct_wins = (votes[:, 0] == top) & (top > 0)
    return float(np.where(correct_wins, 1.0 / n_at_top, 0.0).mean())


# ---------------------------------------------------------------------------
# max@k (best-of-k)


def _max_at_k_weights(pool_size: int, k: int) -> np.ndarray:
    """w_i = C(i−1, k−1)/C(M, k) for i = k..M (the ascending order statistics).

    By the recurrence w_M = k/M, w_{i−1} = w_i (i−k)/(i−1): every factor is in
    [0, 1], so no binomial is formed and nothing overflows (small weights underflow
    gracefully to 0, e.g. w_k = 1/C(4096, 2048)).
    """
    i = np.arange(pool_size, k, -1)  # M, M−1, ..., k+1
    descending = (k / pool_size) * np.concatenate(([1.0], np.cumprod((i - k) / (i - 1))))
    return descending[::-1]


def max_at_k(rewards: ArrayLike, k: int) -> float:
    """Exact expected maximum of k rewards drawn without replacement (docs/math.md §1):
    Σ_{i=k}^{M} C(i−1, k−1) r_(i) / C(M, k) over the ascending rewards r_(i)."""
    return float(max_at_k_curve(rewards, [k])[0])


def max_at_k_curve(rewards: ArrayLike, ks: Sequence[int]) -> np.ndarray:
    """``max_at_k`` for every k in ``ks`` (one sort, one O(M) weight vector per k)."""
    ordered = np.sort(check_finite_vector(rewards, "rewards", booleans=False))
    ks = _validated_ks(ks, ordered.size, "len(rewards)")
    return np.array([ordered[k - 1 :] @ _max_at_k_weights(ordered.size, k) for k in ks])


def grouped_max_at_k(rewards: ArrayLike, k: int) -> float:
    """TEA's grouped bo@k (TEA App. B.2): split the rewards, in sampling order, into
    M // k consecutive groups of k and average the group maxima.

    [choice] When k does not divide M, the trailing M mod k rewards are dropped so
    that every group has exactly k members (TEA only reports budgets dividing M).
    """
    values = check_finite_vector(rewards, "rewards", booleans=False)
    k = _validated_k(k, values.size, "len(rewards)")
    n_groups = values.size // k
    return float(values[: n_groups * k].reshape(n_groups, k).max(axis=1).mean())


# ---------------------------------------------------------------------------
# Uncertainty over prompts


@dataclass(frozen=True)
class WinTieLoss:
    """Prompt counts where a beats b, ties with it (|a − b| <= tol), or loses."""

    wins: int
    ties: int
    losses: int


def mean_and_stderr(scores: ArrayLike) -> tuple[float, float]:
    """Mean of per-prompt scores and its standard error std(ddof=1)/sqrt(P), as CAT
    reports them; the standard error of a single prompt is 0."""
    values = check_finite_vector(scores, "scores", booleans=False)
    if values.size == 1:
        return float(values[0]), 0.0
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(values.size))


def win_tie_loss(a: ArrayLike, b: ArrayLike, tol: float = 1e-8) -> WinTieLoss:
    """Per-prompt comparison of a with b (TEA App. B.2): tie when |a − b| <= tol."""
    a, b = _paired_vectors(a, b)
    check_real(tol, "tol", low=0, finite=True)
    differences = a - b
    wins = int(np.count_nonzero(differences > tol))
    losses = int(np.count_nonzero(differences < -tol))
    return WinTieLoss(wins=wins, ties=differences.size - wins - losses, losses=losses)
