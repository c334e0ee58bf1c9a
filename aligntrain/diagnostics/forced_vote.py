"""Forced-vote sensitivities: the partial derivatives of a strategy's value (docs/math.md §4).

A strategy draws N iid outcomes from a finite distribution p (answer classes, or reward
values) and scores them; its value P(p) = Σ_counts multinomial(N; counts) Π p_j^{n_j}
value(counts) is a homogeneous polynomial of degree N. CAT (eqs. 35–37, 65) shows
its partial derivatives — taken on that polynomial, i.e. extended off the simplex — are

    a_j = ∂P/∂p_j = N · E[value | one of the N draws is forced to j]   (forced-vote identity).

``diagonal.py`` compares the diagonal term a_t with D, the exact derivative along the
target under proportional decay (D/a_t, the diagonal-approximation efficiency of CAT
Figure 9; ``training_weight_comparison``: the training weights against D), and
``pool_efficiency.py`` computes D/a_t for every prompt of a stored pool.

Strategies (``STRATEGIES``):
- ``pass``: outcome j has a correct flag; the N draws win iff one is correct.
- ``majority``: plurality vote over answer classes, target = the gold class; an outcome with
  ``votable`` False (unparseable) is drawn but never wins; no votable draw fails. Ties
  follow ``ties`` (docs/math.md §4.1):
  ``"uniform"`` (default) — broken uniformly at random, a tie of the gold class with τ
  rivals is worth its expected value 1/(1+τ): the convention of
  ``aligntrain.estimators.maj_at_k`` (docs/math.md §1.2), so the diagnostics describe the
  metric the study reports; ``"strict"`` — the gold class wins only with strictly more
  votes than every rival, a tie is a loss: the CAT authors' convention, for comparison
  with CAT Figure 9. The two give different polynomials, hence different a_j
  and D/a_t: with two classes at N = 2, D/a_t = 1/(1 + p_t) uniform against 1 strict
  (a factor up to 2); on random distributions strict's D/a_t is the larger, by a median
  4–9% at N = 4–32 (docs/math.md §4.2). Either way with replacement (iid draws): on the
  empirical distribution of a pool of M, the uniform value agrees with maj@k only as M → ∞.
- ``best_of_n``: outcome j has reward r_j; value = E[max reward of the N draws]. Its forced-
  vote sensitivities are the oracle advantages of docs/math.md §4 plus N·P. [choice] target =
  the top-reward outcome (the first of them on a tie). D/a_t is not shift-invariant here:
  adding c to every reward leaves D unchanged and adds N·c to a_t.
- ``best_of_n_selection``: CAT's own best-of-N formulation (App. B.3, B.5, Fig. 10):
  value = probability that the selected draw is the target t (a draw of maximal reward,
  chosen uniformly among the draws sharing it), for any candidate t. Its training weight is
  CAT's N·q^{N−1} (``cat_best_of_n_rl_weight``), q = mass strictly below r_t.

Methods: ``exact`` — closed forms for pass, best_of_n and best_of_n_selection (O(m) or
O(N²)); a dynamic programme for majority, either tie convention (``majority_dp.py``);
``monte_carlo`` — CAT's 5000 draws with seed 42 (``monte_carlo_sensitivities``); ``auto``
— exact, except majority with N > ``AUTO_EXACT_MAJORITY_MAX_BUDGET``.

Outcome distributions come as probabilities, or from a prompt's samples
(``class_distribution``, ``reward_distribution``). The validated outcomes
(``_Outcomes``), the strategy registry and its helpers (``_prepared``,
``_sensitivities``, ``_check_*``) are shared with ``diagonal.py`` and
``pool_efficiency.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.special import gammaln, xlogy

from aligntrain.diagnostics.majority_dp import majority_exact
from aligntrain.validation import check_finite_vector, check_int

__all__ = [
    "AUTO_EXACT_MAJORITY_MAX_BUDGET",
    "DEFAULT_NUM_DRAWS",
    "DEFAULT_SEED",
    "EmpiricalDistribution",
    "MonteCarloSensitivities",
    "STRATEGIES",
    "TIES",
    "Ties",
    "class_distribution",
    "forced_vote_sensitivities",
    "monte_carlo_sensitivities",
    "reward_distribution",
    "strategy_value",
]


#: CAT App. A.11: the off-diagonal sensitivities by Monte Carlo, 5000 draws, seed 42.
DEFAULT_NUM_DRAWS = 5000
DEFAULT_SEED = 42

#: ``method="auto"`` runs the exact majority DP up to this N, Monte Carlo above it. The DP's
#: time grows like K·N² to K·N³ for K distinct rival probabilities; measured on one core:
#: N = 64 with 10 distinct rivals 0.06 s, with 64 0.6 s; N = 128 0.25 s and 2 s; N = 256
#: 2 s with 10. The other strategies are closed forms, always exact.
AUTO_EXACT_MAJORITY_MAX_BUDGET = 128

_PROBABILITY_SUM_TOLERANCE = 1e-9

#: Majority vote's tie conventions (module docstring, docs/math.md §4.1): "uniform" scores a
#: tie of the gold class with τ rivals 1/(1+τ) (maj@k's convention), "strict" scores it 0 (CAT's).
Ties = Literal["uniform", "strict"]
TIES: tuple[Ties, ...] = ("uniform", "strict")

#: Only plurality vote has ties to break: the other strategies refuse ties="strict" (``_check_ties``).
_STRATEGIES_WITH_TIES = ("majority",)


# ---------------------------------------------------------------------------
# Validation


def _check_probs(probs: ArrayLike) -> np.ndarray:
    array = check_finite_vector(probs, "probs")
    if np.any(array < 0):
        raise ValueError("probs must be >= 0")
    total = array.sum()
    if abs(total - 1.0) > _PROBABILITY_SUM_TOLERANCE:
        raise ValueError(f"probs must sum to 1 (within {_PROBABILITY_SUM_TOLERANCE:g}), got {total!r}")
    return array / total  # exact normalisation: the CDFs below must end at 1


def _check_mask(mask: ArrayLike | None, size: int, name: str) -> np.ndarray | None:
    if mask is None:
        return None
    array = np.asarray(mask)
    if array.shape != (size,) or array.dtype != np.bool_:
        raise ValueError(f"{name} must be a boolean array of length len(probs) = {size}, got {array!r}")
    return array


def _check_ties(ties: object, strategy: str) -> Ties:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    if ties != "uniform" and strategy not in _STRATEGIES_WITH_TIES:
        # best_of_n_selection's equal-reward ties are a different rule (a uniform pick among
        # the maximal draws, CAT App. B.3): refuse rather than silently ignore the option.
        raise ValueError(f"ties={ties!r} applies to strategy 'majority' only, got strategy {strategy!r}")
    return ties


def _check_target(target: object, size: int) -> int | None:
    if target is None:
        return None
    index = check_int(target, "target", minimum=0)
    if index >= size:
        raise ValueError(f"target must be < len(probs) = {size}, got {index}")
    return index


@dataclass(frozen=True)
class _Outcomes:
    """A validated outcome distribution and what the strategies read from it."""

    probs: np.ndarray
    target: int | None = None
    correct: np.ndarray | None = None
    rewards: np.ndarray | None = None
    votable: np.ndarray | None = None
    ties: Ties = "uniform"  # majority only (``_check_ties``)

    def replace(self, **changes: object) -> _Outcomes:
        return _Outcomes(**{**self.__dict__, **changes})


def _outcomes(
    probs: ArrayLike,
    target: object = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
) -> _Outcomes:
    p = _check_probs(probs)
    reward_values = None
    if rewards is not None:
        reward_values = check_finite_vector(rewards, "rewards")
        if reward_values.shape != p.shape:
            raise ValueError(f"rewards must have one value per outcome (length {p.size}), got {rewards!r}")
    return _Outcomes(
        probs=p,
        target=_check_target(target, p.size),
        correct=_check_mask(correct, p.size, "correct"),
        rewards=reward_values,
        votable=_check_mask(votable, p.size, "votable"),
        ties=ties,
    )


# ---------------------------------------------------------------------------
# pass: win iff a draw is correct


def _prepare_pass(o: _Outcomes) -> _Outcomes:
    """correct defaults to the target alone; the target defaults to the only correct outcome."""
    if o.correct is None:
        if o.target is None:
            raise ValueError("strategy 'pass' needs correct (a boolean mask) or target")
        correct = np.zeros(o.probs.size, dtype=bool)
        correct[o.target] = True
        return o.replace(correct=correct)
    if o.target is None and int(o.correct.sum()) == 1:
        return o.replace(target=int(np.flatnonzero(o.correct)[0]))
    return o


def _pass_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """P = 1 − (1 − s)^N, s the correct mass; a_j = N if j is correct, else N·(1 − (1 − s)^{N−1})."""
    correct_mass = float(o.probs[o.correct].sum())

    def win(draws: int) -> float:  # 1 − (1 − s)^draws, accurate for small s
        return 1.0 if correct_mass >= 1.0 else -math.expm1(draws * math.log1p(-correct_mass))

    return win(n), np.where(o.correct, float(n), n * win(n - 1))


def _pass_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    return (counts[:, o.correct].sum(axis=1) > 0).astype(np.float64)


# ---------------------------------------------------------------------------
# majority: plurality vote, ties uniform or strict, unvotable outcomes never win


def _prepare_majority(o: _Outcomes) -> _Outcomes:
    if o.target is None:
        raise ValueError("strategy 'majority' needs target (the index of the gold class)")
    votable = np.ones(o.probs.size, dtype=bool) if o.votable is None else o.votable
    if not votable[o.target]:
        raise ValueError(f"votable[target] must be True: the gold class (target = {o.target}) must be able to win")
    return o.replace(votable=votable)


def _majority_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """Exact P and a_j for plurality vote, under the outcomes' tie convention (``majority_dp``)."""
    return majority_exact(o.probs, o.target, o.votable, n, strict=o.ties == "strict")


def _majority_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    votes = np.where(o.votable, counts, -1)  # unvotable outcomes never lead
    gold = counts[:, o.target]
    if o.ties == "strict":
        votes[:, o.target] = -1
        return ((gold > votes.max(axis=1)) & (gold > 0)).astype(np.float64)
    top = votes.max(axis=1)
    ties = (votes == top[:, None]).sum(axis=1)
    wins = (gold == top) & (top > 0)
    return wins / ties


# ---------------------------------------------------------------------------
# best_of_n: E[max reward]


def _prepare_best_of_n(o: _Outcomes) -> _Outcomes:
    if o.rewards is None:
        raise ValueError("strategy 'best_of_n' needs rewards (one per outcome)")
    return o if o.target is not None else o.replace(target=int(np.argmax(o.rewards)))


def _best_of_n_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """P = Σ_v v [F(v)^N − F(v⁻)^N];
    a_j = N·(r_j F(r_j)^{N−1} + Σ_{v > r_j} v [F(v)^{N−1} − F(v⁻)^{N−1}]),
    over the distinct reward values v with CDF F (docs/math.md §4, the oracle advantage plus N·P)."""
    top = float(o.rewards.max())  # E[max] shifts with the rewards: compute on r − top, add top back
    values, position = np.unique(o.rewards - top, return_inverse=True)
    cdf = np.cumsum(np.bincount(position, weights=o.probs, minlength=values.size))
    cdf /= cdf[-1]
    below = np.concatenate(([0.0], cdf[:-1]))
    value = float(np.sum(values * (cdf**n - below**n)))
    increments = values * (cdf ** (n - 1) - below ** (n - 1))
    above = np.concatenate((np.cumsum(increments[::-1])[::-1][1:], [0.0]))  # Σ over larger values
    per_value = values * cdf ** (n - 1) + above
    return value + top, n * (per_value[position] + top)


def _best_of_n_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    return np.where(counts > 0, o.rewards, -np.inf).max(axis=1)


# ---------------------------------------------------------------------------
# best_of_n_selection: probability that the selected draw is the target (CAT App. B.3)


def _prepare_selection(o: _Outcomes) -> _Outcomes:
    if o.rewards is None or o.target is None:
        raise ValueError("strategy 'best_of_n_selection' needs rewards and target (the candidate)")
    return o


def _selection_exact(o: _Outcomes, n: int) -> tuple[float, np.ndarray]:
    """Sum over the trinomial (target, equal-reward others, lower) counts with no higher draw.

    With n_t target draws and n_e draws of other outcomes sharing its reward, the target is
    selected with probability n_t/(n_t + n_e) (uniform among the maximal draws). A forced
    vote adds one to the target's, an equal's or a lower count; a forced higher vote loses.
    O(N²) terms, in log space.
    """
    reward = o.rewards[o.target]
    others = np.arange(o.probs.size) != o.target
    equal = others & (o.rewards == reward)
    lower = o.rewards < reward
    p, e, q = o.probs[o.target], o.probs[equal].sum(), o.probs[lower].sum()

    def expectation(draws: int, share: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
        n_t, n_e = np.meshgrid(np.arange(draws + 1), np.arange(draws + 1), indexing="ij")
        n_l = draws - n_t - n_e
        feasible = n_l >= 0
        n_l = np.where(feasible, n_l, 0)
        log_mass = (
            gammaln(draws + 1)
            - gammaln(n_t + 1)
            - gammaln(n_e + 1)
            - gammaln(n_l + 1)
            + xlogy(n_t, p)
            + xlogy(n_e, e)
            + xlogy(n_l, q)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = np.nan_to_num(share(n_t, n_e))  # 0/0 (nothing maximal drawn) scores 0
        return float(np.sum(np.where(feasible, np.exp(log_mass) * shares, 0.0)))

    value = expectation(n, lambda n_t, n_e: n_t / (n_t + n_e))
    sensitivities = np.zeros(o.probs.size)  # a higher reward drawn: the target is never selected
    sensitivities[o.target] = n * expectation(n - 1, lambda n_t, n_e: (n_t + 1) / (n_t + 1 + n_e))
    sensitivities[equal] = n * expectation(n - 1, lambda n_t, n_e: n_t / (n_t + n_e + 1))
    sensitivities[lower] = n * expectation(n - 1, lambda n_t, n_e: n_t / (n_t + n_e))
    return value, sensitivities


def _selection_draw_values(o: _Outcomes, counts: np.ndarray) -> np.ndarray:
    reward = o.rewards[o.target]
    others = np.arange(o.probs.size) != o.target
    n_t = counts[:, o.target]
    n_e = counts[:, others & (o.rewards == reward)].sum(axis=1)
    none_higher = counts[:, o.rewards > reward].sum(axis=1) == 0
    return np.where(none_higher & (n_t > 0), n_t / np.maximum(n_t + n_e, 1), 0.0)


# ---------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class _Strategy:
    prepare: Callable[[_Outcomes], _Outcomes]  # validate, fill defaults (target, masks)
    exact: Callable[[_Outcomes, int], tuple[float, np.ndarray]]  # (P, a)
    draw_values: Callable[[_Outcomes, np.ndarray], np.ndarray]  # value per row of counts (D, m)
    auto_exact: Callable[[int], bool]  # whether ``method="auto"`` runs ``exact`` at this N


STRATEGIES: Mapping[str, _Strategy] = {
    "pass": _Strategy(_prepare_pass, _pass_exact, _pass_draw_values, lambda n: True),
    "majority": _Strategy(
        _prepare_majority, _majority_exact, _majority_draw_values, lambda n: n <= AUTO_EXACT_MAJORITY_MAX_BUDGET
    ),
    "best_of_n": _Strategy(_prepare_best_of_n, _best_of_n_exact, _best_of_n_draw_values, lambda n: True),
    "best_of_n_selection": _Strategy(_prepare_selection, _selection_exact, _selection_draw_values, lambda n: True),
}

_METHODS = ("auto", "exact", "monte_carlo")


def _strategy(name: object) -> _Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {name!r}")
    return STRATEGIES[name]


def _prepared(
    probs: ArrayLike,
    n: object,
    strategy: str,
    target: object,
    correct: ArrayLike | None,
    rewards: ArrayLike | None,
    votable: ArrayLike | None,
    ties: object = "uniform",
) -> tuple[_Strategy, _Outcomes, int]:
    rule = _strategy(strategy)
    budget = check_int(n, "n", minimum=1)
    ties = _check_ties(ties, strategy)
    return rule, rule.prepare(_outcomes(probs, target, correct, rewards, votable, ties)), budget


# ---------------------------------------------------------------------------
# Public API


@dataclass(frozen=True)
class MonteCarloSensitivities:
    """Monte Carlo a_j with their standard errors (common random draws for every j)."""

    values: np.ndarray
    standard_errors: np.ndarray
    num_draws: int


def strategy_value(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
) -> float:
    """Exact P(p) of ``strategy`` at budget n (win probability, or E[max reward] for best_of_n).

    Arguments as in ``forced_vote_sensitivities``. The majority DP takes a few seconds at
    N = 256 (see ``_majority_exact``).
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return float(rule.exact(outcomes, budget)[0])


def _monte_carlo(
    rule: _Strategy, outcomes: _Outcomes, n: int, num_draws: object, seed: int | None
) -> MonteCarloSensitivities:
    num_draws = check_int(num_draws, "num_draws", minimum=2)
    counts = np.random.default_rng(seed).multinomial(n - 1, outcomes.probs, size=num_draws)
    means, errors = np.empty(outcomes.probs.size), np.empty(outcomes.probs.size)
    for j in range(outcomes.probs.size):
        counts[:, j] += 1  # the forced vote
        draws = rule.draw_values(outcomes, counts)
        counts[:, j] -= 1
        means[j] = draws.mean()
        errors[j] = draws.std(ddof=1) / math.sqrt(num_draws)
    return MonteCarloSensitivities(n * means, n * errors, num_draws)


def monte_carlo_sensitivities(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> MonteCarloSensitivities:
    """a_j ≈ N · mean over ``num_draws`` samples of the N − 1 free draws of value(counts + e_j).

    CAT App. A.11's estimate (5000 draws, seed 42). The same draws serve every j (common
    random numbers, so differences a_t − a_j are less noisy than each a_j); standard errors
    are N·std/√draws (ddof = 1). Arguments as in ``forced_vote_sensitivities``.
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return _monte_carlo(rule, outcomes, budget, num_draws, seed)


def _sensitivities(
    rule: _Strategy, outcomes: _Outcomes, n: int, method: str, num_draws: object, seed: int | None
) -> tuple[np.ndarray, str]:
    """(a, the method that ran): ``auto`` resolves to exact or Monte Carlo by the strategy's rule."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if method == "exact" or (method == "auto" and rule.auto_exact(n)):
        return rule.exact(outcomes, n)[1], "exact"
    return _monte_carlo(rule, outcomes, n, num_draws, seed).values, "monte_carlo"


def forced_vote_sensitivities(
    probs: ArrayLike,
    n: int,
    strategy: str,
    *,
    target: int | None = None,
    correct: ArrayLike | None = None,
    rewards: ArrayLike | None = None,
    votable: ArrayLike | None = None,
    ties: Ties = "uniform",
    method: str = "auto",
    num_draws: int = DEFAULT_NUM_DRAWS,
    seed: int | None = DEFAULT_SEED,
) -> np.ndarray:
    """a_j = ∂P/∂p_j = N·E[value | one draw forced to j] for every outcome j (CAT eqs. 37, 65).

    probs: the distribution over outcomes (sums to 1 within 1e-9; renormalised). Per
    strategy: ``pass`` reads ``correct`` (or a one-hot ``target``); ``majority`` reads
    ``target`` (the gold class), ``votable`` (default all True) and ``ties`` (``"uniform"``:
    a tie with τ rivals scores 1/(1+τ), maj@k's convention; ``"strict"``: a tie loses,
    the CAT authors' convention; the module docstring); ``best_of_n`` reads ``rewards``;
    ``best_of_n_selection`` reads ``rewards`` and ``target``. ``ties`` other than
    ``"uniform"`` is an error for the strategies other than majority. ``method``:
    ``exact``, ``monte_carlo`` (``num_draws`` draws, ``seed``; CAT uses 5000 and 42) or
    ``auto`` (exact unless majority with N > ``AUTO_EXACT_MAJORITY_MAX_BUDGET``).
    """
    rule, outcomes, budget = _prepared(probs, n, strategy, target, correct, rewards, votable, ties)
    return _sensitivities(rule, outcomes, budget, method, num_draws, seed)[0]


# ---------------------------------------------------------------------------
# Outcome distributions from samples


@dataclass(frozen=True)
class EmpiricalDistribution:
    """A prompt's pool as an outcome distribution: labels[j] has probability probs[j].

    For answer classes, votable[j] is False for the unparseable outcome (label None) and
    correct[j] marks the gold class; for reward values, rewards[j] = labels[j]. target is
    the gold class's index (None when it is not in the pool) or the top reward's index.
    sample_outcomes[i] is the outcome index of input sample i (for per-sample quantities
    such as the oracle advantage A*(y_i) = a_{outcome(i)} − N·P, docs/math.md §4).
    """

    labels: tuple
    probs: np.ndarray
    votable: np.ndarray
    correct: np.ndarray
    rewards: np.ndarray | None
    target: int | None
    sample_outcomes: np.ndarray


def _is_missing(label: object) -> bool:
    # pandas reads a missing class back as NaN (or pd.NA); both mean unparseable.
    return label is None or label is pd.NA or (isinstance(label, float) and math.isnan(label))


def class_distribution(answer_classes: Sequence[Hashable | None], gold_class: Hashable | None) -> EmpiricalDistribution:
    """Empirical distribution over answer classes; None (or NaN) is the unparseable outcome.

    Outcomes in order of first appearance. gold_class None, or absent from the pool,
    gives target None.
    """
    if len(answer_classes) == 0:
        raise ValueError("answer_classes must be non-empty")
    labels = [None if _is_missing(label) else label for label in answer_classes]
    order = list(dict.fromkeys(labels))
    index = {label: j for j, label in enumerate(order)}
    sample_outcomes = np.array([index[label] for label in labels])
    counts = np.bincount(sample_outcomes, minlength=len(order)).astype(np.float64)
    votable = np.array([label is not None for label in order])
    correct = np.array([label is not None and label == gold_class for label in order])
    target = int(np.flatnonzero(correct)[0]) if gold_class is not None and correct.any() else None
    return EmpiricalDistribution(tuple(order), counts / counts.sum(), votable, correct, None, target, sample_outcomes)


def reward_distribution(rewards: ArrayLike) -> EmpiricalDistribution:
    """Empirical distribution over the distinct reward values (ascending); target = the top one."""
    values = check_finite_vector(rewards, "rewards")
    distinct, sample_outcomes, counts = np.unique(values, return_inverse=True, return_counts=True)
    ones = np.ones(distinct.size, dtype=bool)
    return EmpiricalDistribution(
        tuple(distinct.tolist()), counts / counts.sum(), ones, ones.copy(), distinct, distinct.size - 1, sample_outcomes
    )
