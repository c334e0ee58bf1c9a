"""DCO_step (DCO §5.3, arXiv:2502.07154): the per-step weight F(N_step, p_s), the objective entry, the refill on
steps, and the naive whole-proof form F(N, Π_s p_s).

The references are written here from the formula, in Python's ``decimal`` at 50 digits, not by calling
``aligntrain.losses``:

    F(N, p) = N p (1 − p)^(N−1) / (1 − (1 − p)^N),    loss = −log(1 − (1 − p)^N)
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
import torch

from aligntrain.objectives import OBJECTIVES, PassAtN, StepDCO, get_objective

# A 3-step gold proof: the log-probabilities ℓ_s = log π(t_s | state_s) of its steps. Binary fractions, so the
# float64 inputs are exactly these decimals.
STEP_LOGP = ("-0.125", "-0.75", "-2.5")


def _hand_weight(logp: str, n: int) -> Decimal:
    """F(N, e^ℓ) = N p q^(N−1) / (1 − q^N) at 50 digits."""
    with localcontext() as ctx:
        ctx.prec = 50
        p = Decimal(logp).exp()
        q = 1 - p
        return n * p * q ** (n - 1) / (1 - q**n)


def _hand_loss(logp: str, n: int) -> Decimal:
    """−log(1 − q^N) at 50 digits."""
    with localcontext() as ctx:
        ctx.prec = 50
        q = 1 - Decimal(logp).exp()
        return -((1 - q**n).ln())


def _close(value: float, reference: Decimal, rel: float = 1e-13) -> bool:
    return abs(Decimal(value) - reference) <= Decimal(rel) * abs(reference)


@pytest.mark.parametrize("n_step", [2, 4, 8, 32])
def test_each_step_is_weighted_by_its_own_dco_factor(n_step):
    objective = StepDCO(budget=n_step)
    logp = torch.tensor([float(x) for x in STEP_LOGP], dtype=torch.float64)
    weights = objective.weight(logp)
    for s, step in enumerate(STEP_LOGP):
        assert _close(float(weights[s]), _hand_weight(step, n_step)), (s, float(weights[s]), _hand_weight(step, n_step))


def test_step_weights_at_n_step_4_by_hand():
    """The three numbers themselves, so that a wrong formula on both sides cannot pass."""
    weights = StepDCO(budget=4).weight(torch.tensor([-0.125, -0.75, -2.5], dtype=torch.float64))
    # F(4, e^-0.125), F(4, e^-0.75), F(4, e^-2.5) from the formula above in decimal at 50 digits
    expected = [
        "0.0057280120687115728574559000841495385310582435555443",
        "0.30086524739832300931374499120866442197056775699374",
        "0.87541609123661797653886485589785258069929382209837",
    ]
    for got, want in zip(weights.tolist(), expected, strict=True):
        assert _close(got, Decimal(want), rel=1e-14), (got, want)
    # and the hand function agrees with those digits
    for step, want in zip(STEP_LOGP, expected, strict=True):
        assert _close(float(_hand_weight(step, 4)), Decimal(want), rel=1e-14)


@pytest.mark.parametrize("n_step", [2, 4, 16])
def test_step_loss_and_its_gradient_match_the_formula(n_step):
    objective = StepDCO(budget=n_step)
    logp = torch.tensor([float(x) for x in STEP_LOGP], dtype=torch.float64, requires_grad=True)
    loss = objective.loss(logp)
    for s, step in enumerate(STEP_LOGP):
        assert _close(float(loss.detach()[s]), _hand_loss(step, n_step), rel=1e-12)
    loss.sum().backward()
    for s, step in enumerate(STEP_LOGP):  # d loss_s / dℓ_s = −F(N_step, p_s)
        assert _close(-float(logp.grad[s]), _hand_weight(step, n_step), rel=1e-12)


def test_n_step_1_is_cross_entropy():
    objective = StepDCO(budget=1)
    logp = torch.tensor([-1e-9, -0.125, -0.75, -2.5, -40.0, -2000.0], dtype=torch.float64, requires_grad=True)
    weights = objective.weight(logp.detach())
    assert torch.equal(weights, torch.ones_like(weights))  # exactly 1, not nearly
    loss = objective.loss(logp)
    torch.testing.assert_close(loss, -logp.detach(), rtol=1e-12, atol=0)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -torch.ones_like(logp), rtol=1e-12, atol=0)


def test_naive_dco_weights_the_whole_proof_by_the_product_of_step_probabilities():
    """Naive DCO (DCO §5.3): one F(N, Π_s p_s) for the proof; ℓ_proof = Σ_s ℓ_s = −3.375."""
    proof_logp = torch.tensor([sum(float(x) for x in STEP_LOGP)], dtype=torch.float64)
    for n in (4, 64, 4096):
        assert _close(float(PassAtN(budget=n).weight(proof_logp)[0]), _hand_weight("-3.375", n))
    # the proof's weight is not the product or the mean of the step weights
    step = StepDCO(budget=4).weight(torch.tensor([float(x) for x in STEP_LOGP], dtype=torch.float64))
    proof = float(PassAtN(budget=4).weight(proof_logp)[0])
    assert abs(proof - float(step.prod())) > 0.1 and abs(proof - float(step.mean())) > 0.1


def test_dco_step_is_pass_at_n_under_its_own_name():
    assert get_objective("dco_step") is StepDCO and issubclass(StepDCO, PassAtN)
    assert "dco_step" in OBJECTIVES.names()
    objective = OBJECTIVES.parse("dco_step", {})
    assert (objective.kind, objective.budget, objective.refill_eps) == ("sft", 4, 0.0)
    logp = torch.linspace(-6, -1e-3, 25, dtype=torch.float64)
    for n in (1, 4, 32):
        torch.testing.assert_close(StepDCO(budget=n).loss(logp), PassAtN(budget=n).loss(logp), rtol=0, atol=0)
        torch.testing.assert_close(StepDCO(budget=n).weight(logp), PassAtN(budget=n).weight(logp), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"budget": 0}, "budget"),
        ({"budget": 4.0}, "budget"),
        ({"refill_eps": 1.5}, "refill_eps"),
        ({"refill_factor": 2.0}, "refill_factor applies only with refill_eps > 0"),
        ({"n_step": 4}, "unknown option"),
    ],
)
def test_dco_step_refuses_bad_options(options, says):
    with pytest.raises(ValueError, match=says):
        OBJECTIVES.parse("dco_step", options)


def test_refill_replaces_confident_steps_not_whole_proofs():
    """DCO App. B's refill on F(N_step, p_s): the candidate step with F < ε gives its place to the next one."""
    objective = OBJECTIVES.parse("dco_step", {"budget": 4, "refill_eps": 0.01})
    assert objective.candidates_per_step(3) == 6
    # step ℓ: the second is near-certain, F(4, e^-0.001) ≈ 4e-9 < 0.01; the others keep F > 0.01
    logp = torch.tensor([-1.0, -0.001, -2.0, -0.5, -3.0, -0.25], dtype=torch.float64)
    assert _hand_weight("-0.001", 4) < Decimal("1e-8")
    chosen, replaced = objective.select(logp, 3)
    assert chosen.tolist() == [0, 2, 3] and replaced == 1


# ---------------------------------------------------------------------------
# Step rows are the chain-rule factors of the proof row (rewrite problem, character model)


def _completion_logp(model, tokenizer, prompt: str, completion: str) -> float:
    """log π(completion | prompt), summed over the completion's characters (no EOS)."""
    ids = tokenizer(prompt + completion, return_tensors="pt").input_ids
    start = len(tokenizer(prompt).input_ids)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
    targets = ids[0, 1:]
    return float(logp[torch.arange(start - 1, len(targets)), targets[start - 1 :]].sum())


def test_proof_logp_is_the_sum_of_its_step_logps():
    from aligntrain.models.tiny import build_char_tokenizer, build_tiny_llama
    from aligntrain.problems import rewrite

    expression = "74-11+(65-10)-(84+84-18*9)"  # level 4: seven steps
    proof = rewrite.proof_row(expression, 4)
    steps = rewrite.step_rows(expression, 4)
    tokenizer = build_char_tokenizer([proof["prompt"] + proof["completion"]])
    model = build_tiny_llama(
        tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_length=256, seed=0
    ).double()
    model.eval()
    step_logps = [_completion_logp(model, tokenizer, r["prompt"], r["completion"]) for r in steps]
    proof_logp = _completion_logp(model, tokenizer, proof["prompt"], proof["completion"])
    assert len(step_logps) == 7
    assert proof_logp == pytest.approx(sum(step_logps), rel=1e-12, abs=1e-12)
    # so naive DCO on the proof row is F(N, Π_s p_s), and DCO_step weighs each step row by its own p_s
    weights = StepDCO(budget=4).weight(torch.tensor(step_logps, dtype=torch.float64))
    assert weights.shape == (7,) and bool(((weights > 0) & (weights <= 1)).all())
