"""Oracle-gradient cosine diagnostic (docs/math.md §4): oracle advantages, score vectors, cosines.

References are independent of the code under test: brute-force enumeration of all
N-tuples of draws (exact ``Fraction`` arithmetic or float64), central finite
differences of a softmax policy's value, a per-sample autograd loop over the whole
model, finite differences on one parameter, and explicitly materialised gradients.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.advantages import compute_advantages
from aligntrain.diagnostics.oracle_gradient import (
    BATCH_COSINE_COLUMNS,
    COSINE_COLUMNS,
    BatchGradients,
    PromptPool,
    best_of_n_oracle_advantage,
    best_of_n_value,
    draw_group,
    forced_vote_oracle_advantage,
    gram_matrix,
    last_block_scores,
    majority_oracle_advantage,
    oracle_gradient_cosines,
    oracle_gradient_study,
    pass_at_n_oracle_advantage,
    pass_at_n_sensitivities,
    summarize_cosines,
)

# --------------------------------------------------------------------------- brute-force references


def all_draws(pool_size: int, n: int) -> np.ndarray:
    """Every ordered N-tuple of pool indices (pool_size**n × n)."""
    return np.array(list(itertools.product(range(pool_size), repeat=n)), dtype=np.int64).reshape(-1, n)


def softmax_value(theta: np.ndarray, draws: np.ndarray, payoff: np.ndarray) -> float:
    """V(θ) = Σ_tuples Π_j π_{t_j} · payoff(tuple), π = softmax(θ): N iid draws from the policy."""
    pi = np.exp(theta - theta.max())
    pi /= pi.sum()
    return float(np.prod(pi[draws], axis=1) @ payoff)


def softmax_gradient_fd(draws: np.ndarray, payoff: np.ndarray, pool_size: int, step: float = 1e-5) -> np.ndarray:
    """Central finite differences of V at θ = 0 (the uniform, i.e. empirical, policy)."""
    grad = np.empty(pool_size)
    for k in range(pool_size):
        e = np.zeros(pool_size)
        e[k] = step
        grad[k] = (softmax_value(e, draws, payoff) - softmax_value(-e, draws, payoff)) / (2 * step)
    return grad


def plurality_win(labels: tuple, correct_label) -> float:
    """Expected success of a plurality vote; None never votes; ties broken uniformly."""
    votes = [a for a in labels if a is not None]
    if not votes:
        return 0.0
    counts = {a: votes.count(a) for a in set(votes)}
    top = max(counts.values())
    winners = [a for a, c in counts.items() if c == top]
    return (correct_label in winners) / len(winners)


def forced_vote_by_enumeration(probabilities: dict, n: int, win) -> tuple[dict, float]:
    """a_j = N·P(win | one draw forced to j) and P, by enumerating class tuples (CAT eq. 65)."""
    classes = list(probabilities)

    def expected(prefix: tuple, free: int) -> float:
        return sum(
            np.prod([probabilities[c] for c in rest]) * win(prefix + rest)
            for rest in itertools.product(classes, repeat=free)
        )

    return {j: n * expected((j,), n - 1) for j in classes}, expected((), n)


# --------------------------------------------------------------------------- (a) oracle = softmax gradient


def test_best_of_n_oracle_is_the_softmax_gradient_with_ties():
    rewards = np.array([0.3, 1.0, 0.3, -0.5, 2.0, 1.0])
    n = 3
    draws = all_draws(rewards.size, n)
    fd = softmax_gradient_fd(draws, rewards[draws].max(axis=1), rewards.size)
    oracle = best_of_n_oracle_advantage(rewards, n)
    np.testing.assert_allclose(fd, oracle / rewards.size, rtol=1e-7, atol=1e-10)
    assert oracle[0] == oracle[2] and oracle[1] == oracle[5]  # ties: exactly equal
    assert abs(oracle.mean()) < 1e-14  # Σ π_i A*_i = 0


def test_pass_at_n_oracle_is_the_softmax_gradient():
    correct = np.array([1, 0, 0, 1, 0, 0], dtype=bool)
    n = 4
    draws = all_draws(correct.size, n)
    fd = softmax_gradient_fd(draws, correct[draws].any(axis=1).astype(float), correct.size)
    oracle = pass_at_n_oracle_advantage(correct, n)
    np.testing.assert_allclose(fd, oracle / correct.size, rtol=1e-7, atol=1e-10)
    assert abs(oracle.mean()) < 1e-15


def test_pass_at_n_sensitivities_match_the_forced_vote_identity_by_finite_differences():
    # P as the homogeneous degree-N polynomial in (w_wrong, w_correct): Σ over class tuples.
    n, p = 5, 0.3

    def success(w: np.ndarray) -> float:
        return sum(np.prod(w[list(t)]) * (1 in t) for t in itertools.product((0, 1), repeat=n))

    w = np.array([1 - p, p])
    step = 1e-6
    fd = [(success(w + step * e) - success(w - step * e)) / (2 * step) for e in np.eye(2)]
    np.testing.assert_allclose(pass_at_n_sensitivities(p, n), fd, rtol=1e-8)
    # and the oracle is a_class − N·P
    correct = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0], dtype=bool)  # p̂ = 0.2
    a_wrong, a_correct = pass_at_n_sensitivities(0.2, n)
    expected = np.where(correct, a_correct, a_wrong) - n * (1 - 0.8**n)
    np.testing.assert_allclose(pass_at_n_oracle_advantage(correct, n), expected, rtol=1e-12, atol=1e-15)


def test_majority_oracle_from_forced_vote_sensitivities_is_the_softmax_gradient():
    labels = ["7", "7", "3", "3", "3", None, "5"]  # "7" is correct; None is unparseable
    n = 3
    draws = all_draws(len(labels), n)
    payoff = np.array([plurality_win(tuple(labels[i] for i in t), "7") for t in draws])
    fd = softmax_gradient_fd(draws, payoff, len(labels))

    classes = ["7", "3", None, "5"]
    probabilities = {c: labels.count(c) / len(labels) for c in classes}
    sensitivities, value = forced_vote_by_enumeration(probabilities, n, lambda t: plurality_win(t, "7"))
    class_index = np.array([classes.index(a) for a in labels])
    oracle = majority_oracle_advantage(class_index, [sensitivities[c] for c in classes], value, n)
    np.testing.assert_allclose(fd, oracle / len(labels), rtol=1e-7, atol=1e-10)
    assert abs(oracle.mean()) < 1e-14
    assert majority_oracle_advantage is forced_vote_oracle_advantage


# --------------------------------------------------------------------------- (b) exact values by enumeration


def exact_best_of_n(rewards: list[Fraction], n: int) -> tuple[Fraction, list[Fraction]]:
    """V_N and A*_k = N(E[max(r_k, M_{N−1})] − V_N) by enumerating all tuples, in Fractions."""
    size = len(rewards)
    value = sum(max(rewards[i] for i in t) for t in itertools.product(range(size), repeat=n)) / size**n
    others = list(itertools.product(range(size), repeat=n - 1))
    expected_max = [sum(max([r, *(rewards[i] for i in t)]) for t in others) / len(others) for r in rewards]
    return value, [n * (e - value) for e in expected_max]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=5),
    st.integers(min_value=1, max_value=4),
)
def test_best_of_n_value_and_oracle_equal_exhaustive_enumeration(numerators, n):
    rewards = [Fraction(k, 4) for k in numerators]  # small integers: many ties
    value, oracle = exact_best_of_n(rewards, n)
    floats = [float(r) for r in rewards]
    assert best_of_n_value(floats, n) == pytest.approx(float(value), abs=1e-12)
    np.testing.assert_allclose(best_of_n_oracle_advantage(floats, n), [float(a) for a in oracle], atol=1e-12)


def test_best_of_n_oracle_survives_a_large_offset_and_n_equal_one_is_centring():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=50)
    np.testing.assert_allclose(best_of_n_oracle_advantage(rewards, 1), rewards - rewards.mean(), atol=1e-14)
    np.testing.assert_allclose(
        best_of_n_oracle_advantage(rewards + 1e6, 128), best_of_n_oracle_advantage(rewards, 128), atol=1e-8
    )


def test_oracle_inputs_are_validated():
    with pytest.raises(ValueError, match="rewards"):
        best_of_n_oracle_advantage([], 3)
    with pytest.raises(ValueError, match="n"):
        best_of_n_oracle_advantage([1.0, 2.0], 0)
    with pytest.raises(ValueError, match="correct"):
        pass_at_n_oracle_advantage([0.5, 1.0], 2)
    with pytest.raises(ValueError, match="class_index_per_sample"):
        forced_vote_oracle_advantage([0, 2], [1.0, 2.0], 0.5, 2)
    with pytest.raises(ValueError, match="value"):
        forced_vote_oracle_advantage([0, 1], [1.0, 2.0], 1.5, 2)


def test_pass_at_n_oracle_of_a_uniform_pool_is_zero():
    assert not np.any(pass_at_n_oracle_advantage([1, 1, 1], 8))
    assert not np.any(pass_at_n_oracle_advantage([0, 0, 0], 8))


# --------------------------------------------------------------------------- (c) cosines from the Gram matrix


def random_pool(size: int = 12, width: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(size, width)), rng.normal(size=size).round(1)


def test_gram_cosines_equal_explicit_gradients():
    scores, rewards = random_pool()
    oracle = best_of_n_oracle_advantage(rewards, 4)
    frame = oracle_gradient_cosines(
        scores @ scores.T, oracle, rewards, [("grpo", {})], group_sizes=[3, 6], seeds=[0, 1, 2], stream=5
    )
    assert list(frame.columns) == COSINE_COLUMNS and (frame["status"] == "ok").all()
    g_star = scores.T @ oracle / rewards.size
    for row in frame.itertuples():
        group = draw_group(rewards.size, row.n, row.seed, stream=5)
        advantages = rewards[group] - rewards[group].mean()
        g = sum(a * scores[i] for a, i in zip(advantages, group)) / row.n
        expected = g @ g_star / np.linalg.norm(g) / np.linalg.norm(g_star)
        assert row.cosine == pytest.approx(expected, abs=1e-12)


def test_centred_scores_equal_explicit_gradients_of_centred_score_vectors():
    scores, rewards = random_pool()
    oracle = best_of_n_oracle_advantage(rewards, 4)
    frame = oracle_gradient_cosines(
        scores @ scores.T, oracle, rewards, [("loo_pass_at_k", {})], [5], [0, 1, 2, 3], center_scores=True
    )
    centred = scores - scores.mean(axis=0)
    g_star = centred.T @ oracle / rewards.size
    for row in frame[frame["status"] == "ok"].itertuples():
        group = draw_group(rewards.size, row.n, row.seed)
        r = rewards[group]
        advantages = [row.n * (r.max() - np.delete(r, i).max()) for i in range(row.n)]  # Tang et al. eq. 2
        g = sum(a * centred[i] for a, i in zip(advantages, group)) / row.n
        assert row.cosine == pytest.approx(g @ g_star / np.linalg.norm(g) / np.linalg.norm(g_star), abs=1e-12)
    assert (frame["status"] == "ok").sum() >= 2


def test_cosine_is_one_when_the_rule_reproduces_the_oracle_and_invariant_to_scale():
    scores, rewards = random_pool(size=10)
    gram = scores @ scores.T
    oracle = best_of_n_oracle_advantage(rewards, 1)  # = r − mean(r): GRPO on the whole pool
    rules = [("grpo", {}), ("rloo", {})]  # rloo = n/(n−1)·grpo
    whole = oracle_gradient_cosines(gram, oracle, rewards, rules, [10], [0, 1], replace=False)
    np.testing.assert_allclose(whole["cosine"], 1.0, atol=1e-12)
    sub = oracle_gradient_cosines(gram, oracle, rewards, rules, [4], [0, 1, 2], replace=False)
    scaled = oracle_gradient_cosines(gram, 7.3 * oracle, rewards, rules, [4], [0, 1, 2], replace=False)
    grpo, rloo = (sub[sub["rule"] == r]["cosine"].to_numpy() for r in ("grpo", "rloo"))
    np.testing.assert_allclose(grpo, rloo, atol=1e-12)
    np.testing.assert_allclose(sub["cosine"], scaled["cosine"], atol=1e-12)
    assert np.all(grpo < 1 - 1e-6)


def test_skipped_rules_zero_advantages_and_fresh_state():
    scores, rewards = random_pool(size=16)
    gram = scores @ scores.T
    oracle = best_of_n_oracle_advantage(rewards, 8)
    rules = [
        ("chow_bon", {"budget": 8}),  # binary rewards only
        ("pkpo", {"budget": 8}),  # budget <= n only
        ("cat_best_of_n", {"budget": 8, "quantile": "history"}),  # fresh, empty history: q = 1/2
        ("grpo_z", {}),
    ]
    frame = oracle_gradient_cosines(gram, oracle, rewards, rules, [4, 8], [0, 1, 2])
    by_rule = {rule: group for rule, group in frame.groupby("rule")}
    chow = by_rule["chow_bon(budget=8)"]
    assert (chow["status"] == "skipped").all() and chow["reason"].str.contains("binary").all()
    pkpo = by_rule["pkpo(budget=8)"]
    assert (pkpo[pkpo["n"] == 4]["status"] == "skipped").all()
    assert (pkpo[pkpo["n"] == 8]["status"] != "skipped").all()  # (a tied maximum gives zeros)
    # an empty history gives equal CAT weights: after batch normalisation it is GRPO-Z
    cat = by_rule["cat_best_of_n(budget=8, quantile='history')"]["cosine"].to_numpy()
    np.testing.assert_allclose(cat, by_rule["grpo_z"]["cosine"].to_numpy(), atol=1e-10)
    with pytest.raises(ValueError, match="unknown option"):
        oracle_gradient_cosines(gram, oracle, rewards, [("grpo", {"k": 2})], [4], [0])


def test_missing_context_is_skipped_and_all_zero_groups_are_nan():
    scores, _ = random_pool(size=10)
    correct = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=float)
    oracle = pass_at_n_oracle_advantage(correct, 4)
    frame = oracle_gradient_cosines(
        scores @ scores.T, oracle, correct, [("rloo", {}), ("loo_maj_at_k", {})], [2], list(range(30))
    )
    rloo = frame[frame["rule"] == "rloo"]
    drew_none = np.array([not correct[draw_group(10, 2, s)].any() for s in range(30)])
    drew_all = np.array([correct[draw_group(10, 2, s)].all() for s in range(30)])
    assert drew_none.any() and (~drew_none).any()
    zero = drew_none | drew_all
    assert (rloo["status"].to_numpy()[zero] == "zero_advantages").all()
    assert rloo["cosine"].to_numpy()[zero].tolist() == [pytest.approx(np.nan, nan_ok=True)] * zero.sum()
    assert np.isfinite(rloo["cosine"].to_numpy()[~zero]).all()
    maj = frame[frame["rule"] == "loo_maj_at_k"]
    assert (maj["status"] == "skipped").all() and maj["reason"].str.contains("answers").all()
    summary = summarize_cosines(frame).set_index("rule")
    assert summary.loc["rloo", "nan_share"] == pytest.approx(zero.mean())
    assert summary.loc["loo_maj_at_k", "skipped"] == 30 and np.isnan(summary.loc["loo_maj_at_k", "mean"])


def test_zero_oracle_and_cancelled_gradients_are_reported():
    scores, _ = random_pool(size=6)
    scores[1] = scores[0]  # a duplicated completion: equal score vectors
    gram = scores @ scores.T
    ones = np.ones(6)
    frame = oracle_gradient_cosines(gram, pass_at_n_oracle_advantage(ones, 4), ones, [("grpo", {})], [3], [0])
    assert frame["status"].tolist() == ["zero_oracle"] and np.isnan(frame["cosine"][0])
    # indices 0 and 1 drawn with opposite advantages: g = S_0 − S_1 = 0
    rewards = np.array([1.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    seed = next(s for s in range(500) if sorted(draw_group(6, 2, s, replace=False)) == [0, 1])
    oracle = np.arange(6.0) - 2.5  # g* ≠ 0
    frame = oracle_gradient_cosines(gram, oracle, rewards, [("grpo", {})], [2], [seed], replace=False)
    assert frame["status"].tolist() == ["zero_gradient"]


def test_summarize_cosines_mean_stderr_and_nan_share():
    frame = pd.DataFrame(
        {
            "rule": ["a"] * 5 + ["b"] * 2,
            "n": [4] * 7,
            "seed": [0, 1, 2, 3, 4, 0, 1],
            "cosine": [0.1, 0.5, 0.3, np.nan, 0.7, np.nan, np.nan],
            "status": ["ok", "ok", "ok", "zero_advantages", "ok", "skipped", "skipped"],
            "reason": ["", "", "", "", "", "why", "why"],
        }
    )
    summary = summarize_cosines(frame).set_index("rule")
    values = np.array([0.1, 0.5, 0.3, 0.7])
    assert summary.loc["a", "mean"] == pytest.approx(values.mean())
    assert summary.loc["a", "stderr"] == pytest.approx(values.std(ddof=1) / 2)
    assert summary.loc["a", "nan_share"] == pytest.approx(0.2) and summary.loc["a", "count"] == 4
    assert summary.loc["b", "reason"] == "why" and summary.loc["b", "skipped"] == 2


# --------------------------------------------------------------------------- (d) score vectors on a tiny Llama


def loop_scores(model, tokenizer, prompts, completions, layer: int) -> torch.Tensor:
    """Reference: one full teacher-forced forward and autograd pass per completion."""
    params = list(model.model.layers[layer].parameters())
    rows = []
    for prompt, completion in zip(prompts, completions):
        prompt_ids = tokenizer(prompt)["input_ids"]
        ids = torch.tensor([prompt_ids + completion])
        logp = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
        total = sum(logp[len(prompt_ids) - 1 + j, t] for j, t in enumerate(completion))
        rows.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(total, params)]))
    return torch.stack(rows)


def sequence_logp(model, tokenizer, prompt, completion) -> float:
    prompt_ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt_ids + completion])).logits[0], dim=-1)
    return float(sum(logp[len(prompt_ids) - 1 + j, t] for j, t in enumerate(completion)))


def random_completions(tokenizer, count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    low, high = 4, len(tokenizer)  # skip pad/bos/eos/unk, then end with EOS
    eos = tokenizer.eos_token_id
    return [rng.integers(low, high, size=rng.integers(0, 9)).tolist() + [eos] for _ in range(count)]


@pytest.mark.parametrize("layer", [-1, 0])
def test_scores_match_a_per_sample_autograd_loop(tiny_model, arith_rows, layer):
    model, tokenizer = tiny_model
    model.double()
    prompts = [r["prompt"] for r in arith_rows["train"][:7]]
    assert len({len(p) for p in prompts}) > 1  # padding is exercised
    completions = random_completions(tokenizer, 7, seed=1)
    model.train()
    scores = last_block_scores(model, tokenizer, prompts, completions, layer=layer, batch_size=3)
    assert model.training  # the mode is restored
    model.eval()
    reference = loop_scores(model, tokenizer, prompts, completions, layer)
    assert scores.shape == reference.shape and scores.dtype == torch.float64
    torch.testing.assert_close(scores, reference, rtol=1e-9, atol=1e-11)


def float64_rms_norm(self, hidden_states):
    """RMSNorm without transformers' float32 upcast, so a float64 model is float64 throughout."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


@pytest.mark.parametrize(
    "name, index", [("self_attn.q_proj.weight", (3, 5)), ("post_attention_layernorm.weight", (7,))]
)
def test_scores_match_finite_differences_on_one_parameter(tiny_model, arith_rows, monkeypatch, name, index):
    # Llama's RMSNorm computes in float32 even in a float64 model; its rounding (~1e-7)
    # would swamp a finite difference, so the norm is replaced by a float64 one.
    from transformers.models.llama import modeling_llama

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", float64_rms_norm)
    model, tokenizer = tiny_model
    model.double().eval()
    prompt = arith_rows["train"][0]["prompt"]
    completions = random_completions(tokenizer, 3, seed=2)
    scores = last_block_scores(model, tokenizer, prompt, completions)
    offset = 0
    for param_name, param in model.model.layers[-1].named_parameters():
        if param_name == name:
            break
        offset += param.numel()
    column = offset + int(np.ravel_multi_index(index, tuple(param.shape)))
    step = 1e-5  # truncation ~step² f‴/6 and rounding ~1e-16·|log π|/step: both ~1e-10
    for i, completion in enumerate(completions):
        values = []
        for sign in (1, -1):
            with torch.no_grad():
                param[index] += sign * step
            values.append(sequence_logp(model, tokenizer, prompt, completion))
            with torch.no_grad():
                param[index] -= sign * step
        fd = (values[0] - values[1]) / (2 * step)
        assert abs(fd) > 1e-5  # a parameter that matters
        assert float(scores[i, column]) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_float32_scores_and_input_checks(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    model.eval()
    prompt = arith_rows["train"][1]["prompt"]
    completions = random_completions(tokenizer, 5, seed=3)
    scores = last_block_scores(model, tokenizer, prompt, completions, batch_size=2)
    reference = loop_scores(model, tokenizer, [prompt] * 5, completions, -1)
    torch.testing.assert_close(scores, reference, rtol=1e-4, atol=1e-5)
    explicit_gram = (reference @ reference.T).double().numpy()
    np.testing.assert_allclose(gram_matrix(scores), explicit_gram, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="completions"):
        last_block_scores(model, tokenizer, prompt, [[], [5]])
    with pytest.raises(ValueError, match="prompts"):
        last_block_scores(model, tokenizer, [prompt, prompt], completions)
    with pytest.raises(ValueError, match="layer"):
        last_block_scores(model, tokenizer, prompt, completions, layer=5)


def test_study_runs_per_prompt_with_its_own_stream(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    model.eval()
    pools = []
    for p, row in enumerate(arith_rows["train"][:2]):
        completions = random_completions(tokenizer, 8, seed=10 + p)
        rewards = np.random.default_rng(p).integers(0, 2, size=8).astype(float)
        rewards[:2] = (0.0, 1.0)  # both outcomes present
        oracle = pass_at_n_oracle_advantage(rewards, 4)
        pools.append(PromptPool(row["id"], row["prompt"], completions, rewards, {"pass": oracle, "other": -oracle}))
    study = oracle_gradient_study(model, tokenizer, pools, [("rloo", {})], [4], [0, 1], center_scores=(False, True))
    frame = study.per_prompt
    assert list(study.batch.columns) == BATCH_COSINE_COLUMNS and len(study.batch) == 8  # 2 targets × 2 × 2 seeds
    assert list(frame.columns) == ["prompt_id", "target", "centered", *COSINE_COLUMNS] and len(frame) == 16
    flipped = frame[frame.target == "other"].cosine.to_numpy()
    np.testing.assert_allclose(flipped, -frame[frame.target == "pass"].cosine.to_numpy())
    raw = frame[(frame.target == "pass") & ~frame.centered]
    second = raw[raw["prompt_id"] == pools[1].prompt_id].reset_index(drop=True)
    scores = last_block_scores(model, tokenizer, pools[1].prompt, pools[1].completion_ids)
    alone = oracle_gradient_cosines(
        gram_matrix(scores), pools[1].oracle_advantages["pass"], pools[1].rewards, [("rloo", {})], [4], [0, 1], stream=1
    )
    pd.testing.assert_frame_equal(second[COSINE_COLUMNS], alone)


# --------------------------------------------------------------------------- (e) unbiased rules aim at g*


def expected_coefficients(rule: str, rewards: np.ndarray, n: int, answers=None, **options) -> np.ndarray:
    """E[c] over all M**n groups drawn with replacement, c = (1/n) bincount(group, A)."""
    draws = all_draws(rewards.size, n)
    group_answers = None if answers is None else [[answers[i] for i in t] for t in draws]
    kwargs = {} if answers is None else {"answers": group_answers}
    advantages = compute_advantages(rule, torch.tensor(rewards[draws]), **kwargs, **options).numpy()
    weights = np.zeros((draws.shape[0], rewards.size))
    np.add.at(weights, (np.arange(draws.shape[0])[:, None], draws), advantages / n)
    return weights.mean(axis=0)


def centred(coefficients: np.ndarray) -> np.ndarray:
    """The coefficients' action on centred scores S_i − S̄ (a constant shift acts as 0)."""
    return coefficients - coefficients.mean()


def test_unbiased_rules_average_to_the_oracle_gradient_exactly():
    """E[g] = g* on centred scores for the rule unbiased for the oracle's objective (scale convention).

    On raw scores the rules whose advantages do not sum to 0 per group add a multiple
    of the pool's mean score; rloo's sum to 0, so it matches even uncentred.
    """
    rewards = np.array([0.5, 2.0, 0.5, -1.0])
    loo = expected_coefficients("loo_pass_at_k", rewards, 3)
    np.testing.assert_allclose(centred(loo), best_of_n_oracle_advantage(rewards, 3) / 4, atol=1e-12)
    assert loo.mean() > 0.1  # so centring matters for this rule
    pkpo = expected_coefficients("pkpo", rewards, 3, budget=2)
    np.testing.assert_allclose(centred(pkpo), best_of_n_oracle_advantage(rewards, 2) / 4, atol=1e-12)
    correct = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(
        expected_coefficients("rloo", correct, 3), pass_at_n_oracle_advantage(correct, 1) / 5, atol=1e-12
    )
    labels = ["7", "3", "3", None, "7"]
    classes = ["7", "3", None]
    sensitivities, value = forced_vote_by_enumeration(
        {c: labels.count(c) / 5 for c in classes}, 3, lambda t: plurality_win(t, "7")
    )
    class_index = [classes.index(a) for a in labels]
    oracle = forced_vote_oracle_advantage(class_index, [sensitivities[c] for c in classes], value, 3)
    rewards = np.array([float(a == "7") for a in labels])
    np.testing.assert_allclose(
        centred(expected_coefficients("loo_maj_at_k", rewards, 3, answers=labels)), oracle / 5, atol=1e-12
    )


def test_rloo_cosine_to_the_pass_at_1_oracle_grows_towards_one_with_n():
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(40, 60))
    correct = np.zeros(40)
    correct[:12] = 1.0
    oracle = pass_at_n_oracle_advantage(correct, 1)
    frame = oracle_gradient_cosines(scores @ scores.T, oracle, correct, [("rloo", {})], [4, 1024], list(range(20)))
    summary = summarize_cosines(frame).set_index("n")
    assert summary.loc[1024, "mean"] > 0.95 and summary.loc[1024, "nan_share"] == 0
    assert summary.loc[4, "mean"] < summary.loc[1024, "mean"] - 0.2 and summary.loc[4, "nan_share"] > 0


def test_scores_of_a_gpt2_model_match_a_per_sample_autograd_loop(tiny_model, arith_rows):
    """ProtGPT2's architecture (GPT-2: blocks in ``h``, final ``ln_f``, tuple outputs) scores as Llama does."""
    from aligntrain.standins import tiny_causal_lm

    _, tokenizer = tiny_model
    model = tiny_causal_lm("gpt2", tokenizer).double().eval()  # GPT-2 has dropout: the reference runs without
    prompts = [r["prompt"] for r in arith_rows["train"][:5]]
    completions = random_completions(tokenizer, 5, seed=3)
    scores = last_block_scores(model, tokenizer, prompts, completions, batch_size=2)
    params = list(model.transformer.h[-1].parameters())
    rows = []
    for prompt, completion in zip(prompts, completions, strict=True):
        prompt_ids = tokenizer(prompt)["input_ids"]
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt_ids + completion])).logits[0], dim=-1)
        total = sum(logp[len(prompt_ids) - 1 + j, t] for j, t in enumerate(completion))
        rows.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(total, params)]))
    torch.testing.assert_close(scores, torch.stack(rows), rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------- batch level


def orthonormal_pools(success: list[int], size: int) -> tuple[list[PromptPool], list[torch.Tensor]]:
    """Prompts whose items have orthonormal score vectors in disjoint coordinates (D = B·M).

    Prompt p has ``success[p]`` correct items of ``size``; its pass@1 oracle is r − p̂.
    """
    pools, scores = [], []
    eye = torch.eye(len(success) * size, dtype=torch.float64)
    for p, c in enumerate(success):
        rewards = np.array([1.0] * c + [0.0] * (size - c))
        oracle = pass_at_n_oracle_advantage(rewards, 1)
        np.testing.assert_allclose(oracle, rewards - c / size)
        pools.append(PromptPool(f"p{p}", "x", [[1]] * size, rewards, {"pass1": oracle}))
        scores.append(eye[p * size : (p + 1) * size])
    return pools, scores


def test_batch_cosine_sees_how_grpo_z_weighs_prompts():
    """Orthonormal scores, pass@1 oracle, large groups: the limits are known in closed form.

    dr_grpo (r − r̄) estimates (n−1)/n·g*_p on every prompt: batch cosine → 1. GRPO-Z
    divides prompt p by σ_p = √(p̂(1−p̂)), and ‖g*_p‖² = σ_p²/M, so its batch cosine →
    Σσ_p / (√B · √Σσ_p²) = 0.9609 for p̂ = 1/12 and 1/2. Per prompt both → 1: a prompt's
    own scale is invisible there.
    """
    pools, scores = orthonormal_pools([1, 6], 12)
    batch = BatchGradients(pools, [("dr_grpo", {}), ("grpo_z", {})], [4096], [0, 1, 2])
    for p, s in enumerate(scores):
        batch.add(p, s)
    frame = batch.frame()
    assert (frame.status == "ok").all()
    sigma = np.sqrt([1 / 12 * 11 / 12, 1 / 4])
    expected_grpo_z = sigma.sum() / (np.sqrt(2) * np.sqrt((sigma**2).sum()))
    assert expected_grpo_z == pytest.approx(0.9609, abs=1e-4)
    by_rule = frame.groupby("rule").cosine.mean()
    assert by_rule["dr_grpo"] > 0.995
    assert by_rule["grpo_z"] == pytest.approx(expected_grpo_z, abs=0.01)
    for p, (pool, s) in enumerate(zip(pools, scores)):
        alone = oracle_gradient_cosines(
            gram_matrix(s), pool.oracle_advantages["pass1"], pool.rewards, [("grpo_z", {})], [4096], [0], stream=p
        )
        assert alone.cosine.iloc[0] > 0.995


def test_a_batch_of_one_prompt_is_the_per_prompt_cosine(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    model.eval()
    row = arith_rows["train"][0]
    completions = random_completions(tokenizer, 10, seed=4)
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    pool = PromptPool(row["id"], row["prompt"], completions, rewards, {"pass": pass_at_n_oracle_advantage(rewards, 4)})
    rules = [("rloo", {}), ("loo_pass_at_k", {}), ("cat_pass_at_n", {"budget": 4})]
    scores = last_block_scores(model, tokenizer, row["prompt"], completions)
    batch = BatchGradients([pool], rules, [4, 8], [0, 1, 2], center_scores=(False, True))
    batch.add(0, scores)
    got = batch.frame()
    for centered in (False, True):
        want = oracle_gradient_cosines(
            gram_matrix(scores),
            pool.oracle_advantages["pass"],
            rewards,
            rules,
            [4, 8],
            [0, 1, 2],
            center_scores=centered,
        )
        mine = got[got.centered == centered].reset_index(drop=True)
        np.testing.assert_allclose(mine.cosine, want.cosine, rtol=1e-5, atol=1e-6)
        assert list(mine.status) == list(want.status)


def test_batch_checks_its_inputs():
    pools, scores = orthonormal_pools([1, 2], 4)
    with pytest.raises(ValueError, match="same oracle targets"):
        BatchGradients([pools[0], PromptPool("q", "x", [[1]] * 4, pools[1].rewards, {})], [("grpo", {})], [2], [0])
    batch = BatchGradients(pools, [("grpo", {})], [2], [0])
    batch.add(0, scores[0])
    with pytest.raises(ValueError, match="already added"):
        batch.add(0, scores[0])
    with pytest.raises(ValueError, match="never added"):
        batch.frame()
    with pytest.raises(ValueError, match=r"\(4, D\)"):
        batch.add(1, scores[1][:3])
