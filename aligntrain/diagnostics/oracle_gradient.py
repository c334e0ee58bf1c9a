"""Oracle-gradient cosine diagnostic (docs/math.md §4 "Oracle advantage and gradient cosine"; TEA §4.6).

A stored pool of M completions of one prompt is treated as the *empirical policy*:
the uniform distribution over its M items. For a test-time strategy with value
V(π) (best-of-N, pass@N, majority vote over N iid draws) the exact policy gradient
on that policy is

    g* = (1/M) Σ_i A*_i S_i,   S_i = ∇_θ log π(y_i|x),

with the *oracle advantage* A*_i of item i: ∂V/∂θ_k = π_k A*_k for a softmax over
the pool, and Σ_i π_i A*_i = 0. A training rule's gradient from a group of n items
drawn from the pool is g = (1/n) Σ_j A_j S_{i_j}; the diagnostic is cos(g, g*), on the
parameters of one transformer block (the last by default, as TEA §4.6).

Layout, one home per formula:

- oracle advantages: :func:`best_of_n_oracle_advantage` (with :func:`best_of_n_value`),
  :func:`pass_at_n_oracle_advantage` (with :func:`pass_at_n_sensitivities`) and
  :func:`forced_vote_oracle_advantage` (alias :func:`majority_oracle_advantage`) for any
  strategy whose forced-vote sensitivities a_j are known;
- score vectors: :func:`last_block_scores` (per-completion gradients, M × D) and
  :func:`gram_matrix` (G = S Sᵀ): every gradient here is S-weighted, g = Sᵀc, so
  g·g′ = cᵀ G c′ and no group gradient is ever materialised;
- cosines: :func:`oracle_gradient_cosines` (one prompt; rules × group sizes × seeds)
  and :func:`summarize_cosines` (mean, standard error and NaN share over prompts × seeds);
- batch level: :class:`BatchGradients` sums every prompt's gradients into one batch
  gradient per rule (advantages computed on the whole batch of prompts at once, as in
  training) against the batch's oracle Σ_p g*_p: the view where weights *across*
  prompts (CAT) show; one prompt's scores at a time, D-vectors summed;
- driver: :func:`oracle_gradient_study` over :class:`PromptPool` items (one model), both views.

Choices where the spec is silent are marked *[choice]* in the docstrings.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import ArrayLike
from torch import Tensor
from torch.func import functional_call, grad, vmap

from aligntrain.advantages import (
    MajorityThresholdState,
    RewardHistory,
    compute_advantages,
    parse_rule,
)
from aligntrain.diagnostics import forced_vote
from aligntrain.estimators import mean_and_stderr
from aligntrain.validation import (
    check_finite_vector,
    check_int,
    check_int_sequence,
    check_probability,
    is_int,
)

__all__ = [
    "BATCH_COSINE_COLUMNS",
    "COSINE_COLUMNS",
    "BatchGradients",
    "OracleGradientStudy",
    "PromptPool",
    "best_of_n_oracle_advantage",
    "best_of_n_value",
    "draw_group",
    "forced_vote_oracle_advantage",
    "gram_matrix",
    "last_block_scores",
    "majority_oracle_advantage",
    "oracle_gradient_cosines",
    "oracle_gradient_study",
    "pass_at_n_oracle_advantage",
    "pass_at_n_sensitivities",
    "rule_label",
    "summarize_cosines",
]


# --------------------------------------------------------------------------- input checks (aligntrain.validation)


def _binary_vector(values: ArrayLike, name: str) -> np.ndarray:
    array = check_finite_vector(values, name)
    if not np.all((array == 0) | (array == 1)):
        raise ValueError(f"{name} must be binary (booleans or 0/1)")
    return array.astype(bool)


# --------------------------------------------------------------------------- oracle advantages


def best_of_n_value(rewards: ArrayLike, n: int) -> float:
    """V_N = E[max of N iid draws from the pool] = Σ_i r_(i)[(i/M)^N − ((i−1)/M)^N] (docs/math.md §4).

    Draws are *with* replacement (the pool is the empirical policy), unlike the
    evaluation estimator ``aligntrain.estimators.max_at_k`` (without replacement).
    The formula's one home is ``forced_vote``'s best-of-N strategy.
    """
    r = check_finite_vector(rewards, "rewards")
    dist = forced_vote.reward_distribution(r)
    return forced_vote.strategy_value(dist.probs, check_int(n, "n", minimum=1), "best_of_n", rewards=dist.rewards)


def best_of_n_oracle_advantage(rewards: ArrayLike, n: int) -> np.ndarray:
    """A*(r_i) = N·(E[max(r_i, M_{N−1})] − V_N) for every pool item (docs/math.md §4).

    M_{N−1} is the maximum of N−1 iid draws from the pool's empirical CDF; by the
    forced-vote identity N·E[max(r_j, M_{N−1})] is the sensitivity a_j of
    ``forced_vote``'s best-of-N strategy, so A* = a_{value(y)} − N·V_N, and equal
    rewards get exactly equal advantages. N = 1 gives r − mean(r).
    Σ_i A*_i = 0 and ∂V_N/∂θ_k = π_k A*_k for a softmax over the pool. Rewards are
    shifted by their maximum first (A* is shift-invariant), so a large common
    offset costs no precision in the difference.
    """
    r = check_finite_vector(rewards, "rewards")
    n = check_int(n, "n", minimum=1)
    dist = forced_vote.reward_distribution(r - r.max())
    kwargs = {"rewards": dist.rewards, "method": "exact"}
    sensitivities = forced_vote.forced_vote_sensitivities(dist.probs, n, "best_of_n", **kwargs)
    value = forced_vote.strategy_value(dist.probs, n, "best_of_n", rewards=dist.rewards)
    return (sensitivities - n * value)[dist.sample_outcomes]


def pass_at_n_sensitivities(success_rate: float, n: int) -> tuple[float, float]:
    """Forced-vote sensitivities (a_wrong, a_correct) of pass@N (docs/math.md §4, CAT eqs. 35–37).

    a_j = N·P(success | one of the N draws is forced to class j): a correct draw always
    succeeds, so a_correct = N; a wrong one needs one of the other N−1 draws correct,
    so a_wrong = N·(1 − (1 − p)^{N−1}).
    """
    n = check_int(n, "n", minimum=1)
    all_others_wrong = (1.0 - check_probability(success_rate, "success_rate")) ** (n - 1)
    return n * (1.0 - all_others_wrong), float(n)


def pass_at_n_oracle_advantage(correct: ArrayLike, n: int) -> np.ndarray:
    """A*(y) = a_{class(y)} − N·P with p̂ the pool's success rate and P = 1 − (1 − p̂)^N (docs/math.md §4).

    Evaluated in the cancellation-free closed form: correct items get N(1 − p̂)^N,
    wrong ones −N p̂ (1 − p̂)^{N−1} (equal to a − N·P with the sensitivities of
    :func:`pass_at_n_sensitivities`). A pool that is all correct or all wrong gives
    A* = 0. Note: per prompt the vector is proportional to A* for N = 1 (r − p̂), so
    the *direction* of g* does not depend on N for binary rewards; only its size does.
    """
    is_correct = _binary_vector(correct, "correct")
    n = check_int(n, "n", minimum=1)
    p = float(is_correct.mean())
    q = 1.0 - p
    return np.where(is_correct, n * q**n, -n * p * q ** (n - 1))


def forced_vote_oracle_advantage(
    class_index_per_sample: ArrayLike, class_sensitivities: ArrayLike, value: float, n: int
) -> np.ndarray:
    """A*(y_i) = a_{class(y_i)} − N·P for any strategy over N iid draws (docs/math.md §4, CAT eq. 65).

    ``class_sensitivities[j]`` is a_j = N·P(win | one of the N draws is forced to class
    j) on the pool's empirical class distribution; ``value`` is P, the strategy's
    success probability there; ``class_index_per_sample[i]`` ∈ [0, len(a)) is item i's
    class. *[choice]* Unparseable completions are a class like any other (they are
    drawn but never win); the caller gives them an index and their sensitivity.
    The sensitivities and P are computed elsewhere (majority vote:
    ``aligntrain.diagnostics.forced_vote``); with exact ones, Σ_i A*_i = 0 (Euler's
    identity for the degree-N polynomial P); with Monte Carlo ones it holds only
    approximately.
    """
    classes = np.asarray(class_index_per_sample)
    sensitivities = check_finite_vector(class_sensitivities, "class_sensitivities")
    n = check_int(n, "n", minimum=1)
    if classes.ndim != 1 or classes.size == 0 or not np.issubdtype(classes.dtype, np.integer):
        raise ValueError("class_index_per_sample must be a non-empty one-dimensional integer array")
    if classes.min() < 0 or classes.max() >= sensitivities.size:
        raise ValueError(f"class_index_per_sample must lie in [0, len(class_sensitivities) = {sensitivities.size})")
    return sensitivities[classes] - n * check_probability(value, "value")


#: Majority vote is one forced-vote strategy; the lead wires its a_j from ``forced_vote``.
majority_oracle_advantage = forced_vote_oracle_advantage


# --------------------------------------------------------------------------- score vectors


class _BlockInputs(Exception):
    """Raised by the capture hook to stop the forward pass at the differentiated block."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__()
        self.args, self.kwargs = args, kwargs


def _block_inputs(model: Any, block: Any, input_ids: Tensor) -> tuple[Tensor, dict[str, Any]]:
    """The hidden states and keyword inputs (rotary embeddings, mask, …) that ``block`` receives.

    The layers below the block run without gradients; the pass stops at the block.
    """

    def capture(_module: Any, args: tuple, kwargs: dict) -> None:
        raise _BlockInputs(args, kwargs)

    handle = block.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)
    except _BlockInputs as inputs:
        kwargs = dict(inputs.kwargs)
        return (inputs.args[0] if inputs.args else kwargs.pop("hidden_states")), kwargs
    finally:
        handle.remove()
    raise RuntimeError("the forward pass never reached the differentiated block")


def _token_sequences(
    tokenizer: Any, prompts: str | Sequence[str] | Sequence[Sequence[int]], count: int
) -> list[list[int]]:
    """Prompt token ids per completion; a single prompt is shared by all ``count`` completions.

    Text prompts are encoded with ``tokenizer(prompt)["input_ids"]``, as
    ``sample_completions`` does (BOS included).
    """
    if isinstance(prompts, str):
        prompts = [prompts] * count
    if len(prompts) != count:
        raise ValueError(f"prompts must be one prompt or one per completion ({count}), got {len(prompts)}")
    encoded = [tokenizer(p)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("prompts must not be empty (the first completion token needs a context)")
    return encoded


def decoder_layers(decoder: Any) -> list[Any]:
    """The transformer blocks of a decoder: ``layers`` (Llama, Mistral, Qwen) or ``h`` (GPT-2, ProtGPT2)."""
    for name in ("layers", "h"):
        if hasattr(decoder, name):
            return list(getattr(decoder, name))
    raise ValueError(f"{type(decoder).__name__} has neither `layers` nor `h`: an architecture this diagnostic lacks")


def final_norm(decoder: Any) -> Any:
    """The norm after the last block: ``norm`` (Llama, Mistral, Qwen) or ``ln_f`` (GPT-2)."""
    for name in ("norm", "ln_f"):
        if hasattr(decoder, name):
            return getattr(decoder, name)
    raise ValueError(f"{type(decoder).__name__} has neither `norm` nor `ln_f`: an architecture this diagnostic lacks")


def _split_layers(model: Any, layer: int) -> tuple[Any, list[Any]]:
    """The differentiated decoder layer and the layers above it."""
    layers = decoder_layers(model.get_decoder())
    if not is_int(layer) or not -len(layers) <= layer < len(layers):
        raise ValueError(f"layer must be an integer index into the model's {len(layers)} decoder layers, got {layer!r}")
    index = int(layer) % len(layers)
    return layers[index], layers[index + 1 :]


def _hidden(out: Any) -> Tensor:
    """A block's hidden states: the tensor itself, or the first element of the tuple some blocks return."""
    return out[0] if isinstance(out, tuple) else out


def _split_batched(kwargs: Mapping[str, Any], batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Block keyword inputs with a leading batch dimension (vmapped) versus shared ones.

    Tuples (rotary ``position_embeddings``) count as batched when all their tensors are.
    """
    batched, shared = {}, {}
    for key, value in kwargs.items():
        parts = value if isinstance(value, tuple) else (value,)
        is_batched = all(isinstance(t, Tensor) and t.ndim > 0 and t.shape[0] == batch for t in parts)
        (batched if is_batched else shared)[key] = value
    return batched, shared


def last_block_scores(
    model: Any,
    tokenizer: Any,
    prompts: str | Sequence[str] | Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    layer: int = -1,
    batch_size: int = 64,
) -> Tensor:
    """Score vectors S (M × D): row i is ∇ log π(y_i|x_i) w.r.t. decoder layer ``layer``'s parameters.

    log π(y|x) is summed over the completion's tokens (EOS included, as
    ``Completion.token_ids`` stores it) at temperature 1. Columns follow
    ``decoder_layers(model.get_decoder())[layer].named_parameters()``, each parameter
    flattened, in that order. ``layer = -1`` (default) is the last transformer block,
    where TEA §4.6 measures its cosines. ``prompts`` is one prompt (text or ids) for
    all completions or one per completion. Rows have the model's dtype.

    Method (fast, exact): per chunk of ``batch_size`` sequences, sorted by length to
    limit padding, the layers below ``layer`` run once without gradients (a forward
    pre-hook captures the block's inputs and stops the pass); then
    ``vmap(grad(...))`` over the chunk runs the block, the layers above it, the final
    norm and the LM head per sequence with ``torch.func.functional_call``. Sequences
    are right-padded and need no attention mask: causal attention never lets a real
    token see the padding after it. The model is put in eval mode for the call.
    """
    if not completions:
        raise ValueError("completions must be non-empty")
    if any(len(c) == 0 for c in completions):
        raise ValueError("completions must each hold at least one token id (EOS included)")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    prompt_ids = _token_sequences(tokenizer, prompts, len(completions))
    block, above = _split_layers(model, layer)
    head, norm = model.get_output_embeddings(), final_norm(model.get_decoder())
    block_params = {name: p.detach() for name, p in block.named_parameters()}
    width = sum(p.numel() for p in block_params.values())
    device = next(model.parameters()).device
    dtype = next(block.parameters()).dtype
    pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0

    sequences = [list(p) + list(c) for p, c in zip(prompt_ids, completions)]
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    scores = torch.empty(len(sequences), width, dtype=dtype, device=device)

    def sequence_logp(
        params: dict[str, Tensor], hidden: Tensor, targets: Tensor, weights: Tensor, batched: dict, shared: dict
    ) -> Tensor:
        # One sequence: batched inputs lost their batch dimension under vmap; restore it.
        def one(value: Any) -> Any:
            return tuple(t.unsqueeze(0) for t in value) if isinstance(value, tuple) else value.unsqueeze(0)

        kwargs = {**shared, **{k: one(v) for k, v in batched.items()}}
        out = _hidden(functional_call(block, params, (hidden.unsqueeze(0),), kwargs))
        for upper in above:
            out = _hidden(upper(out, **kwargs))
        logits = head(norm(out))[0]
        token_logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return (token_logp * weights).sum()

    per_sequence_grad = vmap(grad(sequence_logp), in_dims=(None, 0, 0, 0, 0, None))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            length = len(sequences[chunk[-1]])
            ids = torch.full((len(chunk), length), pad, dtype=torch.long)
            weights = torch.zeros(len(chunk), length, dtype=dtype)
            for row, i in enumerate(chunk):
                ids[row, : len(sequences[i])] = torch.tensor(sequences[i])
                # logits at position t predict token t+1: weight the completion's predictions.
                weights[row, len(prompt_ids[i]) - 1 : len(sequences[i]) - 1] = 1.0
            ids, weights = ids.to(device), weights.to(device)
            targets = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)  # last column has weight 0
            hidden, kwargs = _block_inputs(model, block, ids)
            batched, shared = _split_batched(kwargs, len(chunk))
            # torch.func.grad ignores an outer no_grad, which keeps the frozen
            # parameters above the block from recording a graph around it.
            with torch.no_grad(), warnings.catch_warnings():
                # sdpa has no vmap batching rule on CPU; the fallback loop is correct.
                warnings.filterwarnings("ignore", message="There is a performance drop")
                grads = per_sequence_grad(block_params, hidden, targets, weights, batched, shared)
            rows, column = torch.tensor(chunk, device=device), 0
            for g in grads.values():  # one column slice per parameter: no concatenated copy
                size = g[0].numel()
                scores[:, column : column + size].index_copy_(0, rows, g.reshape(len(chunk), size))
                column += size
    finally:
        model.train(was_training)
    return scores


def gram_matrix(scores: Tensor) -> np.ndarray:
    """G = S Sᵀ (M × M) as float64: the inner products of all score vectors.

    *[choice]* The product runs in the scores' dtype (float32 for a float32 model:
    relative error ~1e−6, ample for cosines) and is then converted.
    """
    if not isinstance(scores, Tensor) or scores.ndim != 2 or scores.shape[0] == 0:
        raise ValueError("scores must be a non-empty (M, D) tensor")
    return (scores @ scores.T).double().cpu().numpy()


# --------------------------------------------------------------------------- cosines

#: Columns of :func:`oracle_gradient_cosines`' frame. ``status`` is ``ok``, ``zero_advantages``
#: (the rule gave all-zero advantages: cosine NaN), ``zero_gradient`` (non-zero advantages
#: whose gradient cancels, e.g. on duplicated completions), ``zero_oracle`` (g* = 0) or
#: ``skipped`` (the rule does not apply; ``reason`` says why).
COSINE_COLUMNS = ["rule", "rule_name", "n", "seed", "cosine", "status", "reason"]

#: ‖g‖ below this fraction of Σ_i |c_i|·max_i ‖S_i‖ counts as a cancelled (zero) gradient:
#: float32 Gram entries carry ~1e−6 relative error, so smaller norms are rounding noise.
_ZERO_GRADIENT_RELATIVE = 1e-5


def rule_label(rule: str, options: Mapping[str, Any]) -> str:
    """``name`` or ``name(k=v, …)``, options sorted: the ``rule`` column of the frames."""
    if not options:
        return rule
    return f"{rule}({', '.join(f'{k}={options[k]!r}' for k in sorted(options))})"


def _fresh_context(
    needed: frozenset[str], indices: np.ndarray, answers: Sequence[Hashable] | None, logps: np.ndarray | None
) -> dict[str, Any]:
    """Context for one group: pool columns subset to the group, *fresh* state objects.

    *[choice]* State-carrying rules see a new, empty history / threshold EMA on every
    group (there is no training run to accumulate it). An empty history gives
    q = 1/2, so ``cat_best_of_n`` with a history quantile reduces to GRPO-Z here.
    """
    makers = {
        "answers": lambda: [[answers[i] for i in indices]],
        "logps": lambda: torch.as_tensor(logps[indices], dtype=torch.float64).unsqueeze(0),
        "history": lambda: RewardHistory(decay=1.0),
        "step": lambda: 0,
        "threshold_state": lambda: MajorityThresholdState(),
    }
    return {key: makers[key]() for key in needed}


def _why_not_applicable(
    rule: str, options: Mapping[str, Any], n: int, binary: bool, available: frozenset[str]
) -> str | None:
    """None when the rule runs on groups of n from this pool, else the reason it is skipped."""
    try:
        parsed = parse_rule(rule, options, group_size=n, binary_rewards=binary)
    except ValueError as error:
        return str(error)
    missing = sorted(parsed.context_needed() - available)
    return f"rule {rule!r} needs {missing}, not given" if missing else None


def _gradient_norms(gram: np.ndarray, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """‖Sᵀc_s‖ for every row c_s, and whether it is a cancelled (numerically zero) gradient."""
    norms = np.sqrt(np.maximum(np.einsum("sm,sm->s", coefficients @ gram, coefficients), 0.0))
    largest_score = math.sqrt(max(float(np.max(np.diag(gram))), 0.0))
    return norms, norms <= _ZERO_GRADIENT_RELATIVE * np.abs(coefficients).sum(axis=1) * largest_score


def _cosines(gram: np.ndarray, coefficients: np.ndarray, oracle: np.ndarray) -> np.ndarray:
    """cos(Sᵀc_s, Sᵀc*) for every row c_s (c* = ``oracle``); NaN for a cancelled gradient."""
    norms, cancelled = _gradient_norms(gram, coefficients)
    oracle_norm = _gradient_norms(gram, oracle[None])[0][0]
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = coefficients @ (gram @ oracle) / (norms * oracle_norm)
    return np.where(cancelled, np.nan, np.clip(cosine, -1.0, 1.0))


def _group_coefficients(
    rule: str,
    options: Mapping[str, Any],
    groups: Sequence[np.ndarray],
    rewards: np.ndarray,
    answers: Sequence[Hashable] | None,
    logps: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Row s: c with g_s = Sᵀc = (1/n) Σ_j A_j S_{i_j} for group s (a repeated item adds up),
    and whether the rule's advantages on group s are all zero."""
    n = groups[0].size
    needed = parse_rule(rule, options, group_size=n).context_needed()
    coefficients = np.zeros((len(groups), rewards.size))
    all_zero = np.zeros(len(groups), dtype=bool)
    for row, indices in enumerate(groups):
        group_rewards = torch.as_tensor(rewards[indices], dtype=torch.float64).unsqueeze(0)
        context = _fresh_context(needed, indices, answers, logps)
        advantages = compute_advantages(rule, group_rewards, **context, **options)[0].numpy()
        coefficients[row] = np.bincount(indices, weights=advantages / n, minlength=rewards.size)
        all_zero[row] = not np.any(advantages)
    return coefficients, all_zero


def draw_group(pool_size: int, n: int, seed: int, stream: int = 0, replace: bool = True) -> np.ndarray:
    """Pool indices of the group of size n that ``oracle_gradient_cosines`` uses for (seed, stream).

    Seeded by ``numpy.random.default_rng([seed, n, stream])`` (seed and stream >= 0).
    """
    rng = np.random.default_rng([int(seed), int(n), int(stream)])
    return rng.choice(pool_size, size=n, replace=replace)


def oracle_gradient_cosines(
    gram: ArrayLike,
    oracle_adv: ArrayLike,
    rewards: ArrayLike,
    rules: Sequence[tuple[str, Mapping[str, Any]]],
    group_sizes: Sequence[int],
    seeds: Sequence[int],
    *,
    answers: Sequence[Hashable] | None = None,
    logps: ArrayLike | None = None,
    replace: bool = True,
    stream: int = 0,
    center_scores: bool = False,
) -> pd.DataFrame:
    """cos(g, g*) for every rule × group size n × seed on one prompt's pool (TEA §4.6).

    g* = (1/M) Σ_i A*_i S_i and g = (1/n) Σ_j A_j S_{i_j}, where the group i_1..i_n is
    drawn from the pool and A = ``compute_advantages(rule, rewards[group] (1 × n),
    **context, **options)``; both inner products come from ``gram`` (G = S Sᵀ).
    ``rules`` holds (registry name, options) pairs; ``answers`` (answer classes, None
    = unparseable) and ``logps`` are the pool's columns, subset to the group for the
    rules that need them.

    *[choice]* Groups are drawn *with* replacement by default (iid from the empirical
    policy, as the oracle assumes: an unbiased rule then has E[g] = g* exactly);
    ``replace=False`` subsamples without. The group of a (seed, n) is the same for
    every rule (paired comparison) and is seeded by (seed, n, ``stream``): give each
    prompt its own ``stream``. A rule that does not apply (binary-only rule on
    continuous rewards, an option invalid for this n, missing context) gets one
    ``skipped`` row per (n, seed) with the reason; all-zero advantages give a NaN
    cosine with status ``zero_advantages``. Columns: :data:`COSINE_COLUMNS`.

    ``center_scores`` *[choice, default off = TEA's protocol]*: the pool's mean score
    S̄ = (1/M) Σ_i S_i is not 0 (E_π[S] = 0 only over the whole policy), so a rule
    whose advantages do not sum to 0 on a group (``loo_pass_at_k``, ``bon_max_*``)
    picks up a component (1/n)(Σ_j A_j)·S̄ that g* (Σ_i A*_i = 0) does not have.
    ``center_scores=True`` uses S_i − S̄ (Gram H G H, H = I − 11ᵀ/M), the score
    function of a softmax over the pool: then every rule unbiased for the oracle's
    objective has E[g] = g* exactly. g* itself is the same either way.
    """
    gram = np.asarray(gram, dtype=np.float64)
    oracle = check_finite_vector(oracle_adv, "oracle_adv")
    reward_vector = check_finite_vector(rewards, "rewards")
    pool_size = reward_vector.size
    if gram.shape != (pool_size, pool_size) or not np.all(np.isfinite(gram)):
        raise ValueError(f"gram must be a finite ({pool_size}, {pool_size}) matrix, got shape {gram.shape}")
    if oracle.size != pool_size:
        raise ValueError(f"oracle_adv must have one value per pool item ({pool_size}), got {oracle.size}")
    if answers is not None and len(answers) != pool_size:
        raise ValueError(f"answers must have one entry per pool item ({pool_size}), got {len(answers)}")
    logp_vector = None if logps is None else check_finite_vector(logps, "logps")
    if logp_vector is not None and logp_vector.size != pool_size:
        raise ValueError(f"logps must have one value per pool item ({pool_size}), got {logp_vector.size}")
    for n in group_sizes:
        check_int(n, "group_sizes", minimum=2)
        if not replace and n > pool_size:
            raise ValueError(f"group_sizes must be <= the pool size {pool_size} (replace=False), got {n!r}")
    check_int_sequence(seeds, "seeds", minimum=0)
    for rule, options in rules:
        parse_rule(rule, options)  # an unknown rule or a bad option is a caller bug: raise

    if center_scores:
        gram = gram - gram.mean(axis=0, keepdims=True) - gram.mean(axis=1, keepdims=True) + gram.mean()
    binary = bool(np.all((reward_vector == 0) | (reward_vector == 1)))
    available = frozenset({"history", "step", "threshold_state"})
    available |= frozenset({"answers"} if answers is not None else ())
    available |= frozenset({"logps"} if logp_vector is not None else ())
    oracle_coefficients = oracle / pool_size
    oracle_is_zero = bool(_gradient_norms(gram, oracle_coefficients[None])[1][0])

    records: list[tuple] = []
    for rule, options in rules:
        label = rule_label(rule, options)
        for n in group_sizes:
            reason = _why_not_applicable(rule, options, n, binary, available)
            if reason is not None:
                records += [(label, rule, n, s, np.nan, "skipped", reason) for s in seeds]
                continue
            groups = [draw_group(pool_size, n, s, stream, replace) for s in seeds]
            coefficients, all_zero = _group_coefficients(rule, options, groups, reward_vector, answers, logp_vector)
            cosines = _cosines(gram, coefficients, oracle_coefficients)
            for seed, zero, cosine in zip(seeds, all_zero, cosines):
                status = (
                    "zero_oracle"
                    if oracle_is_zero
                    else "zero_advantages"
                    if zero
                    else "zero_gradient"
                    if np.isnan(cosine)
                    else "ok"
                )
                records.append((label, rule, n, seed, cosine if status == "ok" else np.nan, status, ""))
    return pd.DataFrame.from_records(records, columns=COSINE_COLUMNS)


def summarize_cosines(frame: pd.DataFrame, by: Sequence[str] = ("rule", "n")) -> pd.DataFrame:
    """Mean and standard error of the cosine per ``by`` group, over all its prompts × seeds.

    The standard error is std(ddof=1)/√count over the finite cosines (CAT's
    convention, ``aligntrain.estimators.mean_and_stderr``), treating prompt × seed
    cells as independent. ``nan_share`` is the share of non-skipped rows whose cosine
    is NaN (zero advantages, cancelled gradient or zero oracle); a group made only of
    skipped rows keeps its reason and NaN statistics. Columns: ``*by, mean, stderr,
    count, nan_share, skipped, reason``.
    """
    missing = sorted({*by, "cosine", "status", "reason"} - set(frame.columns))
    if missing:
        raise ValueError(f"frame is missing columns {missing}")
    rows = []
    for key, group in frame.groupby(list(by), sort=False):
        ran = group[group["status"] != "skipped"]
        finite = ran["cosine"].to_numpy(dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        mean, stderr = mean_and_stderr(finite) if finite.size else (np.nan, np.nan)
        reasons = group.loc[group["status"] == "skipped", "reason"].unique()
        rows.append(
            (
                *(key if isinstance(key, tuple) else (key,)),
                mean,
                stderr,
                int(finite.size),
                float(1.0 - finite.size / len(ran)) if len(ran) else np.nan,
                int(len(group) - len(ran)),
                "; ".join(reasons),
            )
        )
    columns = [*by, "mean", "stderr", "count", "nan_share", "skipped", "reason"]
    return pd.DataFrame.from_records(rows, columns=columns)


# --------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class PromptPool:
    """One prompt's pool for the study: M completions with their grades and oracle advantages.

    ``completion_ids`` are ``Completion.token_ids`` (EOS included);
    ``oracle_advantages`` maps a target strategy's name to its A* on the pool, from
    one of the ``*_oracle_advantage`` functions (best-of-N on ``rewards``, pass@N on
    correctness, majority from forced-vote sensitivities). ``answers`` / ``logps``
    are needed only by rules that use them.
    """

    prompt_id: Hashable
    prompt: str | Sequence[int]
    completion_ids: Sequence[Sequence[int]]
    rewards: Sequence[float]
    oracle_advantages: Mapping[str, Sequence[float]]
    answers: Sequence[Hashable] | None = None
    logps: Sequence[float] | None = None


#: Columns of the batch-level frame (:class:`BatchGradients`): one row per target, centring,
#: rule, n and seed; a seed is one batch (every prompt's group of that seed).
BATCH_COSINE_COLUMNS = ["target", "centered", *COSINE_COLUMNS]


class BatchGradients:
    """Batch-level cosines: cos(Σ_p g_p, Σ_p g*_p) over a batch made of every prompt of ``pools``.

    The training objective of a batch is the mean of its prompts' strategy values, so
    its oracle gradient is Σ_p g*_p (the 1/B drops out of a cosine); a rule's batch
    gradient is Σ_p (1/n) Σ_j A_{p,j} S_{p,i_j} with A computed by the rule on the
    (B × n) reward matrix in one call, as the trainer does (batch normalisation, and
    any weight that differs between prompts, act here). Per-prompt cosines cannot see
    how a rule weighs one prompt against another; this can. The groups are those of
    :func:`oracle_gradient_cosines` (prompt p: ``stream = p``), so the two views pair.

    Use: construct from the pools (advantages and coefficients are computed at once,
    no model needed), :meth:`add` each prompt's score matrix (any order, each once),
    then :meth:`frame`. Memory: one float64 D-vector per rule × n × seed × centring,
    plus one per target × centring. Centred scores S_i − S̄_p are obtained exactly by
    centring the coefficients (c − mean(c)), see ``center_scores`` of
    :func:`oracle_gradient_cosines`.
    """

    def __init__(
        self,
        pools: Sequence[PromptPool],
        rules: Sequence[tuple[str, Mapping[str, Any]]],
        group_sizes: Sequence[int],
        seeds: Sequence[int],
        *,
        replace: bool = True,
        center_scores: Sequence[bool] = (False,),
    ) -> None:
        if not pools:
            raise ValueError("pools must be non-empty")
        check_int_sequence(seeds, "seeds", minimum=0)
        for rule, options in rules:
            parse_rule(rule, options)  # an unknown rule or a bad option is a caller bug: raise
        self._pools = list(pools)
        self._centerings = tuple(bool(c) for c in center_scores)
        targets = {frozenset(pool.oracle_advantages) for pool in pools}
        if len(targets) != 1:
            raise ValueError("every pool must carry the same oracle targets")
        self._targets = sorted(next(iter(targets)))
        rewards = [check_finite_vector(pool.rewards, "rewards") for pool in pools]
        binary = all(bool(np.all((r == 0) | (r == 1))) for r in rewards)
        available = frozenset({"history", "step", "threshold_state"})
        if all(pool.answers is not None for pool in pools):
            available |= {"answers"}
        if all(pool.logps is not None for pool in pools):
            available |= {"logps"}
        # (label, rule, n, seed) → per-prompt coefficient vectors, or the reason the rule is skipped
        self._cells: list[tuple[str, str, int, int, list[np.ndarray] | None, str]] = []
        for rule, options in rules:
            label = rule_label(rule, options)
            for n in group_sizes:
                check_int(n, "group_sizes", minimum=2)
                reason = _why_not_applicable(rule, options, n, binary, available)
                for seed in seeds:
                    coefficients = None if reason else self._batch_coefficients(rule, options, n, seed, replace)
                    self._cells.append((label, rule, n, seed, coefficients, reason or ""))
        self._sums: dict[tuple[int, bool], Tensor] = {}
        self._oracle_sums: dict[tuple[str, bool], Tensor] = {}
        self._largest_score = 0.0
        self._added: set[int] = set()

    def _batch_coefficients(
        self, rule: str, options: Mapping[str, Any], n: int, seed: int, replace: bool
    ) -> list[np.ndarray]:
        """c_p for every prompt p: g_p = S_pᵀ c_p = (1/n) Σ_j A_{p,j} S_{p,i_j}, A from one batch call."""
        groups = [draw_group(len(pool.rewards), n, seed, stream, replace) for stream, pool in enumerate(self._pools)]
        needed = parse_rule(rule, options, group_size=n).context_needed()
        rewards = torch.as_tensor(
            np.stack([np.asarray(pool.rewards, dtype=np.float64)[g] for pool, g in zip(self._pools, groups)])
        )
        makers = {
            "answers": lambda: [[pool.answers[i] for i in g] for pool, g in zip(self._pools, groups)],
            "logps": lambda: torch.as_tensor(
                np.stack([np.asarray(pool.logps, dtype=np.float64)[g] for pool, g in zip(self._pools, groups)])
            ),
            "history": lambda: RewardHistory(decay=1.0),
            "step": lambda: 0,
            "threshold_state": lambda: MajorityThresholdState(),
        }
        context = {key: makers[key]() for key in needed}
        advantages = compute_advantages(rule, rewards, **context, **options).numpy()
        return [
            np.bincount(g, weights=a / n, minlength=len(pool.rewards))
            for pool, g, a in zip(self._pools, groups, advantages)
        ]

    def add(self, prompt: int, scores: Tensor) -> None:
        """Add prompt ``prompt``'s score matrix S_p (M_p × D) to every batch gradient."""
        if prompt in self._added:
            raise ValueError(f"prompt {prompt} was already added")
        pool = self._pools[prompt]
        if scores.ndim != 2 or scores.shape[0] != len(pool.rewards):
            raise ValueError(f"scores of prompt {prompt} must be ({len(pool.rewards)}, D), got {tuple(scores.shape)}")
        self._added.add(prompt)
        matrix = scores.detach().to(device="cpu", dtype=torch.float64)
        self._largest_score = max(self._largest_score, float(matrix.norm(dim=1).max()))

        def accumulate(store: dict, key: Hashable, coefficients: np.ndarray, centered: bool) -> None:
            if centered:  # (S − 1S̄ᵀ)ᵀc = Sᵀ(c − mean(c)): centring moves into the coefficients
                coefficients = coefficients - coefficients.mean()
            vector = torch.as_tensor(coefficients) @ matrix
            store[key] = vector if key not in store else store[key] + vector

        for centered in self._centerings:
            for target in self._targets:
                oracle = check_finite_vector(pool.oracle_advantages[target], "oracle_adv") / len(pool.rewards)
                accumulate(self._oracle_sums, (target, centered), oracle, centered)
            for cell, (*_, coefficients, _reason) in enumerate(self._cells):
                if coefficients is not None:
                    accumulate(self._sums, (cell, centered), coefficients[prompt], centered)

    def frame(self) -> pd.DataFrame:
        """The batch cosines, columns :data:`BATCH_COSINE_COLUMNS` (statuses as the per-prompt frame's)."""
        if len(self._added) != len(self._pools):
            raise ValueError(f"scores of {len(self._pools) - len(self._added)} prompt(s) were never added")
        records = []
        for target in self._targets:
            for centered in self._centerings:
                oracle = self._oracle_sums[(target, centered)]
                oracle_scale = sum(
                    float(np.abs(check_finite_vector(p.oracle_advantages[target], "oracle_adv")).sum()) / len(p.rewards)
                    for p in self._pools
                )
                oracle_is_zero = bool(oracle.norm() <= _ZERO_GRADIENT_RELATIVE * oracle_scale * self._largest_score)
                for cell, (label, rule, n, seed, coefficients, reason) in enumerate(self._cells):
                    if coefficients is None:
                        records.append((target, centered, label, rule, n, seed, np.nan, "skipped", reason))
                        continue
                    vector = self._sums[(cell, centered)]
                    scale = sum(float(np.abs(c).sum()) for c in coefficients) * self._largest_score
                    norm = float(vector.norm())
                    if oracle_is_zero:
                        status = "zero_oracle"
                    elif not any(np.any(c) for c in coefficients):
                        status = "zero_advantages"
                    elif norm <= _ZERO_GRADIENT_RELATIVE * scale:
                        status = "zero_gradient"
                    else:
                        status = "ok"
                    cosine = float(vector @ oracle) / (norm * float(oracle.norm())) if status == "ok" else np.nan
                    cosine = float(np.clip(cosine, -1.0, 1.0)) if status == "ok" else np.nan
                    records.append((target, centered, label, rule, n, seed, cosine, status, ""))
        return pd.DataFrame.from_records(records, columns=BATCH_COSINE_COLUMNS)


@dataclass(frozen=True)
class OracleGradientStudy:
    """The diagnostic's two views of one model: per prompt (TEA §4.6's protocol) and per batch of prompts."""

    per_prompt: pd.DataFrame  # prompt_id, target, centered, then COSINE_COLUMNS
    batch: pd.DataFrame  # BATCH_COSINE_COLUMNS: one batch of every prompt per seed


def oracle_gradient_study(
    model: Any,
    tokenizer: Any,
    pools: Sequence[PromptPool],
    rules: Sequence[tuple[str, Mapping[str, Any]]],
    group_sizes: Sequence[int],
    seeds: Sequence[int],
    *,
    layer: int = -1,
    batch_size: int = 64,
    replace: bool = True,
    center_scores: Sequence[bool] = (False,),
) -> OracleGradientStudy:
    """The diagnostic for one model: per prompt, scores → Gram → cosines; and the batch of all prompts.

    ``per_prompt`` columns: ``prompt_id``, ``target``, ``centered``, then
    :data:`COSINE_COLUMNS`. The score vectors are computed once per prompt and serve
    both views; prompt p uses ``stream = p`` (its position in ``pools``) so that the
    groups differ across prompts yet every run is deterministic, and every target
    sees the same groups. ``batch``: :class:`BatchGradients` over all of ``pools``
    (a seed is one batch). The other options are those of :func:`last_block_scores`
    and :func:`oracle_gradient_cosines`. Summarise either with :func:`summarize_cosines`.
    Memory: one prompt's scores at a time (M × D), plus the batch sums.
    """
    batch = BatchGradients(pools, rules, group_sizes, seeds, replace=replace, center_scores=center_scores)
    frames = []
    for stream, pool in enumerate(pools):
        scores = last_block_scores(
            model, tokenizer, pool.prompt, pool.completion_ids, layer=layer, batch_size=batch_size
        )
        batch.add(stream, scores)
        gram = gram_matrix(scores)
        for target, oracle in pool.oracle_advantages.items():
            for centered in center_scores:
                frame = oracle_gradient_cosines(
                    gram,
                    oracle,
                    pool.rewards,
                    rules,
                    group_sizes,
                    seeds,
                    answers=pool.answers,
                    logps=pool.logps,
                    replace=replace,
                    stream=stream,
                    center_scores=centered,
                )
                frame = frame.assign(prompt_id=pool.prompt_id, target=target, centered=centered)
                frames.append(frame[["prompt_id", "target", "centered", *COSINE_COLUMNS]])
    return OracleGradientStudy(per_prompt=pd.concat(frames, ignore_index=True), batch=batch.frame())
