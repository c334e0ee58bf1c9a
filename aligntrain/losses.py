"""Strategy-aware objectives: SFT losses and their weights, CAT weights for RL.

The mathematics: docs/math.md §2 (SFT objectives) and §3 "CAT for RL"; sources:
CAT (eqs. 6, 14–16, App. A.6–A.7, B, C, H.2, I.4, J.3, K.2) and DCO (eqs. 3–4,
§5.1, App. B).

Conventions
- ℓ = log π(y|x) is the *summed* sequence log-probability, shape (B,); p = e^ℓ,
  q = 1 − p. Losses take ℓ and return per-sample losses of shape (B,); the
  caller reduces. Every strategy loss L has dL/dℓ = −w(p) with the matching
  weight function w (so the loss gradient is w(p)·∇(−ℓ)).
- Weights are detached diagnostics: they never carry gradients.
- Numerics [choice]: the per-sample scalar arithmetic runs in float64 (float32 on
  MPS, which has no float64). It is O(B·N) work, negligible next to the model,
  and it makes float32/bfloat16 inputs as accurate as their rounding allows.
  Results come back in the input's dtype promoted to at least float32 (a
  bfloat16 ℓ gives a float32 loss).
- Validation [choice]: bad input raises ValueError naming the argument. Checking
  tensor values costs one host sync per call. A log-probability must be finite
  and <= 0: ℓ = −inf (p = 0 exactly) would make the loss inf, and a fused
  log-softmax never yields it from finite logits, so it signals a broken model
  or input. It may exceed 0 by at most ``LOGP_POSITIVE_TOLERANCE`` (= 1e-6,
  rounding in fused log-softmax kernels); such values count as ℓ = 0 with a
  straight-through gradient. A larger positive value is a caller bug (usually
  a negative log-likelihood passed where a log-probability belongs).
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as functional
from numpy.typing import ArrayLike
from torch import Tensor

from aligntrain.validation import check_int, check_real

__all__ = [
    "LOGP_POSITIVE_TOLERANCE",
    "cat_best_of_n_rl_weight",
    "cat_majority_rl_weight",
    "cat_pass_at_n_rl_weight",
    "consensus_threshold",
    "contrastive_hinge_loss",
    "contrastive_hybrid_loss",
    "contrastive_margin_loss",
    "dco_keep_mask",
    "dynamic_majority_threshold",
    "empirical_success_probability",
    "log1mexp",
    "majority_loss",
    "majority_weight",
    "majority_weight_from_logp",
    "pass_at_n_loss",
    "pass_at_n_weight",
    "pass_at_n_weight_from_logp",
    "sample_rivals",
    "sequence_success_probability",
    "variance_inflation",
]

LOGP_POSITIVE_TOLERANCE = 1e-6
"""Largest ℓ > 0 accepted as rounding of a log-probability (treated as ℓ = 0)."""

_LN2 = math.log(2.0)

# CAT App. J.3 (eq. 96 and the clamp after it).
_SEQUENCE_LOGP_FLOOR = -50.0
_SEQUENCE_P_MIN = 1e-10
_SEQUENCE_P_MAX = 1.0 - 1e-10

# Rows of the (rows × vocabulary) float32 softmax materialised at once when
# sampling contrastive rivals (or masking the gold token to find the greedy
# rival): bounds memory at 1024·V floats.
_RIVAL_SAMPLING_ROWS = 1024


# ---------------------------------------------------------------------------
# Validation and dtypes


def _compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _result_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def as_tensor(value: Tensor | ArrayLike, name: str) -> Tensor:
    """``value`` as a tensor: a tensor as it is; a real number, or an array of them (numpy
    array, list), as a new float64 tensor (a copy: read-only arrays are fine).

    The one conversion for the formulas here and their callers (the diagnostics). Bools,
    strings and other objects raise ValueError naming ``name``.
    """
    if isinstance(value, Tensor):
        return value
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":  # integers and floats; not bools, strings or objects
        raise ValueError(f"{name} must be a tensor, a real number or an array of them, got {type(value).__name__}")
    return torch.tensor(array, dtype=torch.float64)


def _check_no_nan(value: Tensor, name: str) -> None:
    if value.is_floating_point() and bool(torch.isnan(value).any()):
        raise ValueError(f"{name} contains NaN")


def _check_logp(logp: Tensor | float, name: str = "logp") -> Tensor:
    """Validated ℓ in the compute dtype, rounding above 0 mapped to 0 (straight-through).

    ℓ must be finite and <= 0 (up to the rounding tolerance); NaN, −inf and a
    positive ℓ raise ValueError naming ``name``.
    """
    logp = as_tensor(logp, name)
    if not logp.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {logp.dtype}")
    # One reduction and one host sync for valid input (the training path); the
    # diagnosis below runs only when something is wrong.
    if bool((torch.isfinite(logp) & (logp <= LOGP_POSITIVE_TOLERANCE)).all()):
        return _clamp_rounding(logp)
    _check_no_nan(logp, name)
    if bool((logp == -math.inf).any()):
        raise ValueError(
            f"{name} must be finite: a log-probability of -inf (p = 0) makes the loss infinite; "
            f"{int((logp == -math.inf).sum())} of {logp.numel()} values are -inf"
        )
    raise ValueError(
        f"{name} must be <= 0 (a log-probability; up to {LOGP_POSITIVE_TOLERANCE:g} of rounding "
        f"is accepted), got max {logp.max().item():.6g}"
    )


def _clamp_rounding(logp: Tensor) -> Tensor:
    """ℓ in the compute dtype, rounding above 0 mapped to 0 with a straight-through gradient."""
    logp = logp.to(_compute_dtype(logp.device))
    return torch.where(logp > 0, logp - logp.detach(), logp)


def _check_probability(p: Tensor | float, name: str) -> Tensor:
    """Validated, detached probability in the compute dtype."""
    p = as_tensor(p, name).detach()
    _check_no_nan(p, name)
    if p.numel() and bool(((p < 0) | (p > 1)).any()):
        raise ValueError(f"{name} must lie in [0, 1], got values in [{p.min().item():.6g}, {p.max().item():.6g}]")
    return p.to(_compute_dtype(p.device))


def _check_threshold(k: int | Tensor, n: int, shape: torch.Size, device: torch.device) -> Tensor:
    """k as a float tensor of the given shape: an int, or a per-row tensor.

    A tensor k indexes the leading dimensions of p ("per row"): its shape must be
    a prefix of p's shape, and it is broadcast over the trailing dimensions (p of
    shape (G, n) with k of shape (G,) gives row g the threshold k[g]).
    """
    if isinstance(k, Tensor):
        if k.dim() > len(shape) or tuple(k.shape) != tuple(shape[: k.dim()]):
            raise ValueError(f"k must have a shape that is a prefix of p's shape {tuple(shape)}, got {tuple(k.shape)}")
        _check_no_nan(k, "k")
        if k.is_floating_point() and bool((k != k.round()).any()):
            raise ValueError("k must hold integers")
        if k.numel() and bool(((k < 1) | (k > n)).any()):
            raise ValueError(f"k must lie in [1, n] = [1, {n}], got values in [{int(k.min())}, {int(k.max())}]")
        k = k.reshape(tuple(k.shape) + (1,) * (len(shape) - k.dim()))
        return k.to(device=device, dtype=_compute_dtype(device)).expand(shape)
    k = check_int(k, "k", minimum=1)
    if k > n:
        raise ValueError(f"k must be <= n, got k={k}, n={n}")
    return torch.full(shape, float(k), dtype=_compute_dtype(device), device=device)


def _check_counts(counts: Tensor | int, name: str, upper: int) -> Tensor:
    counts = counts if isinstance(counts, Tensor) else torch.tensor(check_int(counts, name, minimum=0))
    _check_no_nan(counts, name)
    if counts.is_floating_point() and bool((counts != counts.round()).any()):
        raise ValueError(f"{name} must hold integers")
    if counts.numel() and bool(((counts < 0) | (counts > upper)).any()):
        raise ValueError(f"{name} must lie in [0, group_size] = [0, {upper}]")
    return counts


# ---------------------------------------------------------------------------
# Primitives


def _log1mexp(x: Tensor) -> Tensor:
    # Mächler (2012): log(−expm1(x)) is accurate near 0, log1p(−exp(x)) far from
    # it; switch at −ln 2. Each branch sees a safe input where it is not used, so
    # no inf reaches the gradient of the other branch.
    near_zero = x > -_LN2
    x_near = torch.where(near_zero, x, -1.0)
    x_far = torch.where(near_zero, -1.0, x)
    return torch.where(near_zero, torch.log(-torch.expm1(x_near)), torch.log1p(-torch.exp(x_far)))


def log1mexp(x: Tensor) -> Tensor:
    """log(1 − eˣ) for x ≤ 0, accurate over the whole range (docs/math.md §2).

    −inf at x = 0, 0 at x = −inf; differentiable for x < 0 (the derivative
    −1/expm1(−x) tends to −inf at 0). Computes in x's dtype.
    """
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise ValueError("x must be a floating-point tensor")
    _check_no_nan(x, "x")
    if x.numel() and bool((x > 0).any()):
        raise ValueError(f"x must be <= 0, got max {x.max().item():.6g}")
    return _log1mexp(x)


def _mul_log(coefficient: Tensor | float, log_value: Tensor) -> Tensor:
    """coefficient · log_value with 0 · (−inf) = 0, i.e. log(x^c) with 0⁰ = 1."""
    return torch.where(torch.as_tensor(coefficient) == 0, 0.0, coefficient * log_value)


@functools.lru_cache(maxsize=64)
def _log_binomial_row(n: int) -> tuple[float, ...]:
    # Logs of exact integers: correctly rounded, unlike lgamma differences.
    return tuple(math.log(math.comb(n, j)) for j in range(n + 1))


def _log_binomials(n: int, like: Tensor) -> Tensor:
    """log C(n, j) for j = 0..n, on like's device and dtype."""
    return torch.tensor(_log_binomial_row(n), dtype=like.dtype, device=like.device)


# ---------------------------------------------------------------------------
# Pass@N = DCO (docs/math.md §2; CAT eqs. 6, 14, App. H.2; DCO eqs. 3–4)


def pass_at_n_loss(logp: Tensor, n: int) -> Tensor:
    """Pass@N loss −log(1 − (1−p)^N) per sample; d loss/dℓ = −F(N, p).

    Computed as −log1mexp(N·log1mexp(ℓ)). Where N·p is below the machine epsilon
    of the compute dtype (float64) the loss is −(log N + ℓ) (CAT App. H.2), whose
    relative error there is (N−1)p/2 < eps: it stays finite with gradient −1 when
    p underflows (ℓ = −1e4). At ℓ = 0 the loss is 0 with gradient −F(N, 1)
    (−1 for N = 1, else 0). Each torch.where branch is evaluated on a safe input
    where it is not selected, so no inf/NaN reaches the gradient.
    """
    n = check_int(n, "n", minimum=1)
    logp_c = _check_logp(logp)
    tiny = logp_c < math.log(torch.finfo(logp_c.dtype).eps) - math.log(n)
    certain = logp_c == 0
    logp_general = torch.where(tiny | certain, -1.0, logp_c)
    general = -_log1mexp(n * _log1mexp(logp_general))
    tiny_loss = -(math.log(n) + logp_c)
    certain_loss = -(1.0 if n == 1 else 0.0) * logp_c
    loss = torch.where(tiny, tiny_loss, torch.where(certain, certain_loss, general))
    return loss.to(_result_dtype(logp.dtype))


def _pass_at_n_weight(log_q: Tensor, n: int) -> Tensor:
    """F(N, p) from log q = log(1 − p), in the compute dtype (no gradient).

    With u = −log q ≥ 0, F = N p q^{N−1}/(1 − q^N) = N·expm1(u)/expm1(N·u)
    [derived: multiply numerator and denominator by e^{Nu}]. For N·u ≤ 1 the
    expm1 ratio is accurate to a few ulps (no cancellation, unlike the log form
    near F = 1); above, log F = log N + log(1 − e^{−u}) − (N−1)u − log(1 − e^{−Nu})
    has no cancellation either and reaches p = 1 (F = 0). N·u < eps gives 1.
    F ≤ 1 holds exactly; the clamp removes a last-ulp overshoot.
    """
    if n == 1:
        return torch.ones_like(log_q)  # cross-entropy: F(1, p) = 1 exactly
    u = -log_q
    nu = n * u
    ratio = n * torch.expm1(u) / torch.expm1(nu)
    log_form = math.log(n) + _log1mexp(-u) - (n - 1) * u - _log1mexp(-nu)
    weight = torch.where(nu <= 1.0, ratio, torch.exp(log_form))
    weight = torch.where(nu < torch.finfo(log_q.dtype).eps, 1.0, weight)
    return weight.clamp(max=1.0)


def pass_at_n_weight(p: Tensor | float, n: int) -> Tensor:
    """DCO's weight F(N, p) = N p (1−p)^{N−1} / (1 − (1−p)^N) (DCO eq. 4, CAT eq. 14).

    F(N, 0) = 1, F(1, p) = 1, F decreases in p, F(N, 1) = 0 for N > 1. Stable
    from p = 0 to p = 1 (see ``_pass_at_n_weight``). Detached.
    """
    n = check_int(n, "n", minimum=1)
    p_in = as_tensor(p, "p")
    p_c = _check_probability(p_in, "p")
    with torch.no_grad():
        return _pass_at_n_weight(torch.log1p(-p_c), n).to(_result_dtype(p_in.dtype))


def pass_at_n_weight_from_logp(logp: Tensor | float, n: int) -> Tensor:
    """F(N, e^ℓ) from the log-probability ℓ; the weight matching ``pass_at_n_loss``.

    Prefer this over ``pass_at_n_weight(exp(ℓ))`` near p = 1: log(1 − p) comes
    from log1mexp(ℓ), which keeps 1 − p to full relative precision where
    rounding p = e^ℓ would not. Detached.
    """
    n = check_int(n, "n", minimum=1)
    logp_in = as_tensor(logp, "logp")
    logp_c = _check_logp(logp_in).detach()
    with torch.no_grad():
        return _pass_at_n_weight(_log1mexp(logp_c), n).to(_result_dtype(logp_in.dtype))


# ---------------------------------------------------------------------------
# Majority vote, fixed threshold (docs/math.md §2; CAT eqs. 7, 15–16, App. A.6, I.2, I.4)


def consensus_threshold(n: int, fraction: float) -> int:
    """Vote threshold k = ⌈ρ·N⌉ clamped to [1, N] for consensus fraction ρ (CAT App. I.4).

    ρ is read as the decimal it prints as (0.1 is 1/10), so ⌈0.1·30⌉ = 3, not
    the 4 that binary floating point gives. CAT App. I.4: ρ = 0.4, N = 64 → 26 votes.
    """
    n = check_int(n, "n", minimum=1)
    check_real(fraction, "fraction", low=0, high=1, low_open=True)
    # A float (numpy's included) as the decimal Python prints for it; an int or Fraction exactly.
    rho = Fraction(fraction) if isinstance(fraction, numbers.Rational) else Fraction(repr(float(fraction)))
    return min(n, max(1, math.ceil(rho * n)))


def _binomial_log_terms(logp: Tensor, log_q: Tensor, n: int, shift: Tensor | float) -> Tensor:
    """log[C(N, j) p^{j−shift} q^{N−j}] for j = 0..N along a new last axis."""
    j = torch.arange(n + 1, dtype=logp.dtype, device=logp.device)
    return _log_binomials(n, logp) + _mul_log(j - shift, logp[..., None]) + _mul_log(n - j, log_q[..., None])


def _log_upper_tail_over_pk(logp: Tensor, log_q: Tensor, n: int, k: Tensor) -> Tensor:
    """log(B/p^k) = log Σ_{j≥k} C(N,j) p^{j−k} q^{N−j}: the tail summed with p^k factored out.

    Exact for every p; accurate where the upper tail is the small side
    (p < k/(N+1)), and finite at p = 0 (where it is log C(N, k)).
    """
    k_last = k[..., None]
    j = torch.arange(n + 1, dtype=logp.dtype, device=logp.device)
    terms = _binomial_log_terms(logp, log_q, n, shift=k_last)
    return torch.logsumexp(torch.where(j >= k_last, terms, -math.inf), dim=-1)


def _log_one_minus_lower_tail(logp: Tensor, log_q: Tensor, n: int, k: Tensor) -> Tensor:
    """log B = log(1 − P[Bin(N,p) < k]); accurate where the lower tail is the small side (p ≥ k/(N+1))."""
    k_last = k[..., None]
    j = torch.arange(n + 1, dtype=logp.dtype, device=logp.device)
    terms = _binomial_log_terms(logp, log_q, n, shift=0.0)
    return _log1mexp(torch.logsumexp(torch.where(j < k_last, terms, -math.inf), dim=-1))


def majority_loss(logp: Tensor, n: int, k: int) -> Tensor:
    """Majority-vote loss −log B(p), B(p) = P[Binomial(N, p) ≥ k] (CAT eq. 15); d loss/dℓ = −w(p).

    Each side of p* = k/(N+1) sums the smaller tail [paper code, docs/math.md §2].
    Below p*: log B = kℓ + log Σ_{j≥k} C(N,j)p^{j−k}q^{N−j} (finite for ℓ = −1e4,
    gradient → −k). From p* up: log B = log(1 − P[Bin < k]). At ℓ = 0 the loss
    is 0 with gradient −w(1) (−N for k = N, else 0). Each branch runs on a safe
    input where it is not selected: the factored sum is finite at any finite
    ℓ < 0, and at p* itself P[Bin < k] is about 1/2, safely below 1.
    """
    n = check_int(n, "n", minimum=1)
    if isinstance(k, Tensor):
        raise ValueError("k must be an int for majority_loss (per-row thresholds are for the weights)")
    logp_c = _check_logp(logp)
    k_tensor = _check_threshold(k, n, logp_c.shape, logp_c.device)
    k = int(k)
    threshold = math.log(k / (n + 1))
    certain = logp_c == 0
    lower = logp_c < threshold
    logp_lower = torch.where(lower, logp_c, threshold - 1.0)
    logp_upper = torch.where(lower | certain, threshold, logp_c)
    log_b_lower = k * logp_lower + _log_upper_tail_over_pk(logp_lower, _log1mexp(logp_lower), n, k_tensor)
    log_b_upper = _log_one_minus_lower_tail(logp_upper, _log1mexp(logp_upper), n, k_tensor)
    certain_loss = -(float(n) if k == n else 0.0) * logp_c
    loss = torch.where(certain, certain_loss, -torch.where(lower, log_b_lower, log_b_upper))
    return loss.to(_result_dtype(logp.dtype))


def _majority_weight(logp: Tensor, log_q: Tensor, n: int, k: Tensor) -> Tensor:
    """w = k·C(N,k)·p^k q^{N−k}/B(p) in log space, in the compute dtype (no gradient).

    log w = log k + log C(N,k) + (N−k) log q − log(B/p^k): below the threshold
    log(B/p^k) is the factored tail sum, so p^k never appears and w(0) = k.
    """
    lower = logp < torch.log(k / (n + 1))
    log_b_over_pk = torch.where(
        lower,
        _log_upper_tail_over_pk(logp, log_q, n, k),
        _log_one_minus_lower_tail(logp, log_q, n, k) - _mul_log(k, logp),
    )
    log_comb_k = _log_binomials(n, logp)[k.long()]
    return torch.exp(torch.log(k) + log_comb_k + _mul_log(n - k, log_q) - log_b_over_pk)


def majority_weight(p: Tensor | float, n: int, k: int | Tensor) -> Tensor:
    """Majority SFT weight p·B′(p)/B(p) = k·C(N,k)·p^k(1−p)^{N−k}/B(p) (CAT eq. 16).

    w(0) = k; w(1) = N if k = N else 0. (CAT's printed Table 1 drops the k and
    the 1/B; eq. 16 keeps them, as here.) k may be per-row: see
    ``_check_threshold``. Detached.
    """
    n = check_int(n, "n", minimum=1)
    p_in = as_tensor(p, "p")
    p_c = _check_probability(p_in, "p")
    k_tensor = _check_threshold(k, n, p_c.shape, p_c.device)
    with torch.no_grad():
        return _majority_weight(torch.log(p_c), torch.log1p(-p_c), n, k_tensor).to(_result_dtype(p_in.dtype))


def majority_weight_from_logp(logp: Tensor | float, n: int, k: int | Tensor) -> Tensor:
    """``majority_weight`` at p = e^ℓ, from ℓ (keeps 1 − p accurate near p = 1). Detached."""
    n = check_int(n, "n", minimum=1)
    logp_in = as_tensor(logp, "logp")
    logp_c = _check_logp(logp_in).detach()
    k_tensor = _check_threshold(k, n, logp_c.shape, logp_c.device)
    with torch.no_grad():
        return _majority_weight(logp_c, _log1mexp(logp_c), n, k_tensor).to(_result_dtype(logp_in.dtype))


# ---------------------------------------------------------------------------
# DCO batch refill and variance inflation


def dco_keep_mask(weights: Tensor, eps: float = 0.01) -> Tensor:
    """DCO refill filter (DCO §5.1, App. B): True where F ≥ eps, i.e. the example stays.

    The trainer replaces the examples marked False with fresh ones so the batch
    keeps its size; DCO App. B uses eps = 0.01.
    """
    if not isinstance(weights, Tensor):
        raise ValueError("weights must be a tensor")
    _check_no_nan(weights, "weights")
    eps = check_real(eps, "eps", low=0)
    return weights >= eps


def variance_inflation(weight: Tensor) -> Tensor:
    """Variance inflation VI = w² of a strategy weight (CAT App. A.6, eq. 18).

    Pass@N: VI → 1 as p → 0; majority: VI → k² (CAT eqs. 20, 22–23).
    """
    if not isinstance(weight, Tensor):
        raise ValueError("weight must be a tensor")
    _check_no_nan(weight, "weight")
    return weight.square()


# ---------------------------------------------------------------------------
# Contrastive margin (CAT App. A.7.2–A.7.3)


def _check_logits_and_labels(logits: Tensor, labels: Tensor, ignore_index: object) -> tuple[Tensor, Tensor]:
    """(valid, gold) of aligned logits (B, T, V) and labels (B, T): the supervised positions, and
    the labels with ignored positions set to token 0 (safe to gather, masked out by ``valid``)."""
    if not isinstance(logits, Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (B, T, V)")
    if not isinstance(labels, Tensor) or labels.is_floating_point() or tuple(labels.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"labels must be an integer tensor of shape {tuple(logits.shape[:2])}")
    ignore_index = check_int(ignore_index, "ignore_index", minimum=-(2**63))
    vocab = logits.shape[-1]
    if vocab < 2:
        raise ValueError(f"logits must have a vocabulary of at least 2 tokens, got {vocab}")
    valid = labels != ignore_index
    if bool(((labels[valid] < 0) | (labels[valid] >= vocab)).any()):
        raise ValueError(f"labels must lie in [0, {vocab}) or equal ignore_index={ignore_index}")
    return valid, labels.masked_fill(~valid, 0)


def _sequence_token_mean(token_loss: Tensor, valid: Tensor) -> Tensor:
    """Mean of (B, T) token losses over each sequence's supervised tokens; 0 for a sequence with none."""
    token_loss = torch.where(valid, token_loss, 0.0)  # also keeps ignored positions out of the gradient
    return token_loss.sum(dim=-1) / valid.sum(dim=-1).clamp(min=1)


def _sample_rivals_at(
    logits: Tensor, positions: tuple[Tensor, ...], gold: Tensor, num_rivals: int, generator: torch.Generator | None
) -> Tensor:
    """Rivals at the given positions of logits (..., V): positions index the leading dims (as from
    ``nonzero(as_tuple=True)``), gold holds the gold token at each → (len(gold), K).

    Only ``_RIVAL_SAMPLING_ROWS`` rows are gathered (as float32 or wider) at a
    time, and logits is never reshaped (a reshape of a sliced, non-contiguous
    logits tensor would copy all of it).
    """
    sampling_dtype = _result_dtype(logits.dtype)
    chunks = []
    with torch.no_grad():
        for start in range(0, gold.numel(), _RIVAL_SAMPLING_ROWS):
            chunk = slice(start, start + _RIVAL_SAMPLING_ROWS)
            chunk_logits = logits.detach()[tuple(index[chunk] for index in positions)].to(sampling_dtype)
            masked = chunk_logits.scatter(-1, gold[chunk, None], -math.inf)
            probs = torch.softmax(masked, dim=-1)
            chunks.append(torch.multinomial(probs, num_rivals, replacement=True, generator=generator))
    return torch.cat(chunks) if chunks else gold.new_empty((0, num_rivals))


def sample_rivals(
    logits: Tensor, gold: Tensor, num_rivals: int = 4, generator: torch.Generator | None = None
) -> Tensor:
    """Draw ``num_rivals`` rival tokens per position from softmax(logits) with the gold token masked.

    logits (..., V), gold (...) → rivals (..., K), detached. Draws are iid with
    replacement [choice: the margin loss is then a Monte Carlo average over the
    masked softmax, and V − 1 < K is allowed]; the gold token has probability 0
    and is never drawn. The softmax runs in at least float32, in chunks of
    rows to bound memory.
    """
    num_rivals = check_int(num_rivals, "num_rivals", minimum=1)
    if logits.shape[-1] < 2:
        raise ValueError(f"logits must have a vocabulary of at least 2 tokens, got {logits.shape[-1]}")
    if tuple(gold.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"gold must have shape {tuple(logits.shape[:-1])}, got {tuple(gold.shape)}")
    positions = torch.ones_like(gold, dtype=torch.bool).nonzero(as_tuple=True)
    rivals = _sample_rivals_at(logits, positions, gold.reshape(-1), num_rivals, generator)
    return rivals.reshape(*gold.shape, num_rivals)


def contrastive_margin_loss(
    logits: Tensor,
    labels: Tensor,
    num_rivals: int = 4,
    generator: torch.Generator | None = None,
    ignore_index: int = -100,
) -> Tensor:
    """Pairwise contrastive margin loss per sequence (CAT App. A.7.2–A.7.3, eq. 27).

    For each gold token y_t, K rivals r_1..r_K are drawn from softmax(z_t) with
    y_t masked (``sample_rivals``; the draw is detached), and the token loss is
    (1/K) Σ_k −log σ(z_{y_t} − z_{r_k}); gradients flow through both logits.
    Returns the mean over each sequence's non-ignored tokens, shape (B,); a
    sequence with no such token gets 0 [choice]. logits (B, T, V) must already
    be aligned with labels (B, T): the caller shifts. The result is in the
    logits' dtype promoted to at least float32.
    """
    num_rivals = check_int(num_rivals, "num_rivals", minimum=1)
    valid, gold = _check_logits_and_labels(logits, labels, ignore_index)

    # Rivals are drawn for supervised positions only: ignored ones neither cost
    # a softmax nor consume the generator.
    positions = valid.nonzero(as_tuple=True)
    rivals = torch.zeros(*labels.shape, num_rivals, dtype=torch.long, device=labels.device)
    rivals[positions] = _sample_rivals_at(logits, positions, gold[positions], num_rivals, generator)
    result_dtype = _result_dtype(logits.dtype)
    gold_logit = logits.gather(-1, gold[..., None]).to(result_dtype)
    rival_logit = logits.gather(-1, rivals).to(result_dtype)
    token_loss = functional.softplus(rival_logit - gold_logit).mean(dim=-1)  # −log σ(z_gold − z_rival)
    return _sequence_token_mean(token_loss, valid)


def _greedy_rivals_at(logits: Tensor, positions: tuple[Tensor, ...], gold: Tensor) -> Tensor:
    """argmax_{v ≠ gold} z_v at the given positions of logits (..., V) → (len(gold),), detached.

    Positions index the leading dims (as from ``nonzero(as_tuple=True)``). The gold
    token is masked in a copy of ``_RIVAL_SAMPLING_ROWS`` rows at a time, never of
    the whole (B, T, V) logits. Among equal rival logits the first index wins
    (``torch.argmax``): any of them gives the same margin.
    """
    chunks = []
    with torch.no_grad():
        for start in range(0, gold.numel(), _RIVAL_SAMPLING_ROWS):
            chunk = slice(start, start + _RIVAL_SAMPLING_ROWS)
            chunk_logits = logits.detach()[tuple(index[chunk] for index in positions)]
            chunks.append(chunk_logits.scatter(-1, gold[chunk, None], -math.inf).argmax(dim=-1))
    return torch.cat(chunks) if chunks else gold.new_empty((0,))


def contrastive_hinge_loss(
    logits: Tensor, labels: Tensor, target_margin: float = 1.0, ignore_index: int = -100
) -> Tensor:
    """Hinge contrastive margin loss per sequence against the greedy rival (CAT App. A.7.2, eqs. 24 and 26).

    At each gold token y_t, the margin over the strongest rival (CAT eq. 24, "greedy
    rival") is m_t = z_{y_t,t} − max_{v ≠ y_t} z_{v,t}, and the token loss is the hinge
    of eq. 26 with target margin γ:

        loss_t = max(0, γ − m_t)

    It is zero once the gold logit leads every other token by at least γ; below that its
    gradient is −1 on the gold logit and +1 on the greedy rival's (the rival is chosen
    under no_grad; the max is differentiated as the gather of its argmax), none on any
    other logit. [choice] CAT prints eq. 26 as a statement about whole sequences; it is
    applied here per gold token, with eq. 24's token margin, and averaged over each
    sequence's non-ignored tokens (as ``contrastive_margin_loss``): shape (B,), 0 for a
    sequence with no supervised token. No sampling: the loss is deterministic. logits
    (B, T, V) must already be aligned with labels (B, T): the caller shifts. The result
    is in the logits' dtype promoted to at least float32. docs/math.md §2.6.
    """
    target_margin = check_real(target_margin, "target_margin", low=0, low_open=True, finite=True)
    valid, gold = _check_logits_and_labels(logits, labels, ignore_index)
    positions = valid.nonzero(as_tuple=True)
    rival = torch.zeros_like(gold)  # ignored positions keep token 0: masked out of the mean
    rival[positions] = _greedy_rivals_at(logits, positions, gold[positions])
    result_dtype = _result_dtype(logits.dtype)
    gold_logit = logits.gather(-1, gold[..., None]).squeeze(-1).to(result_dtype)
    rival_logit = logits.gather(-1, rival[..., None]).squeeze(-1).to(result_dtype)
    token_loss = functional.relu(target_margin - (gold_logit - rival_logit))
    return _sequence_token_mean(token_loss, valid)


def contrastive_hybrid_loss(token_ce: Tensor, margin: Tensor, mix: float = 0.5) -> Tensor:
    """Hybrid objective (1 − mix)·CE + mix·margin per sequence; CAT App. A.7.3 uses mix = 0.5.

    token_ce is the per-sequence token-mean cross-entropy and margin the output
    of ``contrastive_margin_loss``, both of shape (B,).
    """
    mix = check_real(mix, "mix", low=0, high=1)
    if token_ce.shape != margin.shape:
        raise ValueError(
            f"token_ce and margin must have the same shape, got {tuple(token_ce.shape)} and {tuple(margin.shape)}"
        )
    return (1.0 - mix) * token_ce + mix * margin


# ---------------------------------------------------------------------------
# CAT for RL (docs/math.md §3; CAT App. B.2, B.7, C, J.3, K.2)
#
# Each weight w multiplies the GRPO-Z advantage, A_i = w_i · A_i^{GRPO-Z}
# (CAT App. C.1); the weights are detached and clipped at ``clip``.


def empirical_success_probability(correct_counts: Tensor | int, group_size: int) -> Tensor:
    """Laplace-smoothed group accuracy p = (c + 1)/(n + 2) (CAT App. B.7.2, eq. 79).

    One probability per prompt. Dtype: correct_counts' if floating, else the
    default dtype.
    """
    group_size = check_int(group_size, "group_size", minimum=1)
    counts = _check_counts(correct_counts, "correct_counts", upper=group_size)
    dtype = counts.dtype if counts.is_floating_point() else torch.get_default_dtype()
    return (counts.to(dtype) + 1) / (group_size + 2)


def sequence_success_probability(logp: Tensor) -> Tensor:
    """p = exp(clamp(ℓ, −50, 0)) clamped to [1e−10, 1 − 1e−10] (CAT App. J.3, eq. 96). Detached.

    The e^{−50} floor lies below 1e−10, so the second clamp decides; both are
    kept as printed. Computed in float64 whatever the input's precision: near
    p = 1 the weights depend on 1 − p, and float32 would round 1 − 1e−10 (and any
    p above 1 − 6e−8) to 1, the weights to 0 or to values off by up to ~50%.
    """
    if not isinstance(logp, Tensor) or not logp.is_floating_point():
        raise ValueError("logp must be a floating-point tensor")
    _check_logp(logp)
    logp = logp.detach().to(torch.float64)
    p = torch.exp(logp.clamp(_SEQUENCE_LOGP_FLOOR, 0.0))
    return p.clamp(_SEQUENCE_P_MIN, _SEQUENCE_P_MAX)


def dynamic_majority_threshold(n: int, c_max: int | Tensor, group_size: int) -> int | Tensor:
    """Vote threshold from the strongest wrong answer in a rollout group (CAT eqs. 100–101, App. K.2).

    k = max(2, min(⌊N/2⌋ + 1, ⌊N·c_max/n⌋ + 1)): one vote more than the
    projected rival count at budget N, capped at a strict majority. c_max is
    the count of the most frequent wrong answer among the n = group_size
    rollouts. For N = 1 the result is 1 [choice: the formula's floor of 2
    would exceed N]. Returns an int for an int c_max, a long tensor otherwise.
    """
    n = check_int(n, "n", minimum=1)
    group_size = check_int(group_size, "group_size", minimum=1)
    strict_majority = n // 2 + 1
    if isinstance(c_max, Tensor):
        counts = _check_counts(c_max, "c_max", upper=group_size).long()
        projected = torch.div(n * counts, group_size, rounding_mode="floor") + 1
        return projected.clamp(max=strict_majority).clamp(min=2).clamp(max=n)
    counts = check_int(c_max, "c_max", minimum=0)
    if counts > group_size:
        raise ValueError(f"c_max must be <= group_size, got c_max={counts}, group_size={group_size}")
    return min(n, max(2, min(strict_majority, n * counts // group_size + 1)))


def _power_weight(log_x: Tensor, n: int) -> Tensor:
    """N·x^{N−1} from log x (0⁰ = 1): the raw Pass@N weight at x = 1 − p, the Best-of-N weight at x = q."""
    return n * torch.exp(_mul_log(n - 1, log_x))


def cat_pass_at_n_rl_weight(p: Tensor, n: int, log_weighted: bool = False, clip: float = 50.0) -> Tensor:
    """CAT Pass@N RL weight, clipped at ``clip`` (CAT App. B.2.1 eq. 54, B.7.1 eq. 75, J.3 eq. 98).

    Raw: w = N(1−p)^{N−1} = dP_N/dp. Log-weighted (normalised): w = F(N, p), the
    SFT weight, which trades the raw weight's N² variance for an attenuation
    bias on hard prompts (CAT App. B.7.1).
    """
    n = check_int(n, "n", minimum=1)
    clip = check_real(clip, "clip", low=0, low_open=True)
    p_in = as_tensor(p, "p")
    p_c = _check_probability(p_in, "p")
    with torch.no_grad():
        log_q = torch.log1p(-p_c)
        weight = _pass_at_n_weight(log_q, n) if log_weighted else _power_weight(log_q, n)
        return weight.clamp(max=clip).to(_result_dtype(p_in.dtype))


def cat_majority_rl_weight(
    p: Tensor, n: int, k: int | Tensor, log_weighted: bool = False, clip: float = 50.0
) -> Tensor:
    """CAT majority-vote RL weight, clipped at ``clip`` (CAT App. B.2.2, B.6.3 eq. 70).

    Raw: w = B′(p) = N·C(N−1, k−1)·p^{k−1}(1−p)^{N−k}, in log space. Log-weighted:
    the SFT weight ``majority_weight``. k may be per-row (a dynamic threshold per
    prompt from ``dynamic_majority_threshold``): see ``_check_threshold``.
    """
    n = check_int(n, "n", minimum=1)
    clip = check_real(clip, "clip", low=0, low_open=True)
    p_in = as_tensor(p, "p")
    p_c = _check_probability(p_in, "p")
    k_tensor = _check_threshold(k, n, p_c.shape, p_c.device)
    with torch.no_grad():
        logp, log_q = torch.log(p_c), torch.log1p(-p_c)
        if log_weighted:
            weight = _majority_weight(logp, log_q, n, k_tensor)
        else:
            log_comb = _log_binomials(n - 1, p_c)[(k_tensor - 1).long()]
            weight = n * torch.exp(log_comb + _mul_log(k_tensor - 1, logp) + _mul_log(n - k_tensor, log_q))
        return weight.clamp(max=clip).to(_result_dtype(p_in.dtype))


def cat_best_of_n_rl_weight(q: Tensor, n: int, clip: float = 50.0) -> Tensor:
    """CAT Best-of-N RL weight w = N·q^{N−1}, clipped at ``clip`` (CAT App. B.2.3 eq. 57–58).

    q is the estimated probability that another sample scores strictly lower
    (in-batch rank, eq. 108, or a reward history, eqs. 80, 105).
    """
    n = check_int(n, "n", minimum=1)
    clip = check_real(clip, "clip", low=0, low_open=True)
    q_in = as_tensor(q, "q")
    q_c = _check_probability(q_in, "q")
    with torch.no_grad():
        weight = _power_weight(torch.log(q_c), n)
        return weight.clamp(max=clip).to(_result_dtype(q_in.dtype))
