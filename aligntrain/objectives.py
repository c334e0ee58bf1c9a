"""The registry of training objectives a variant can name in params.yaml.

Each entry is a pydantic model of the objective's options; the model knows how
to turn what the SFT trainer computed for a batch (a :class:`ScoredBatch`) into
per-sample losses, and which inputs it needs (docs/math.md §2). Adding an objective
= adding a class here with ``@register_objective``; no stage, flow or config
code changes.

What an objective tells the trainer (class variables and hooks):

- ``uses_trl_loss``: TRL's own token-mean CE, the trainer unchanged (``ce``).
- ``needs_logits``: the full (B, T, V) logits instead of TRL's fused LM head,
  which returns only the label tokens' log-probabilities (``contrastive``).
- ``sample_loss(batch)``: per-sample losses; for a sequence-level objective
  this is ``loss(seq_logp)`` of the summed log-probability ℓ.
- ``weight(seq_logp)``: the detached weight w(p) of a loss whose gradient is
  w(p)·∇(−ℓ), logged as ``strategy_weight``; None where there is none.
- ``candidates_per_step(batch_size)`` and ``select(seq_logp, batch_size, answer_p)``:
  an objective that filters examples (DCO refill) draws more candidates than it
  trains on and picks the batch from their ℓ (or their p̂).
- ``answer_samples``: > 0 asks the trainer for p̂, the share of that many completions
  sampled from the current model whose final answer is the gold one (``dco_a``);
  it arrives as ``ScoredBatch.answer_p``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import ConfigDict, Field, StrictInt, ValidationInfo, field_validator, model_validator

from aligntrain.options import Options, Real, Registry

if TYPE_CHECKING:
    import torch
    from torch import Tensor

OBJECTIVES: Registry[ObjectiveOptions] = Registry("objective")


def register_objective(cls: type[ObjectiveOptions]) -> type[ObjectiveOptions]:
    return OBJECTIVES.register(cls)


def get_objective(name: str) -> type[ObjectiveOptions]:
    return OBJECTIVES.get(name)


@dataclass(frozen=True)
class ScoredBatch:
    """What the SFT trainer computed for one batch of B sequences, positions already shifted.

    Position t holds the prediction of ``labels[:, t]``; ignored labels (prompt,
    padding) are −100.
    """

    #: (B, T) log π(label_t | prefix), 0 where the label is ignored.
    token_logp: Tensor
    #: (B, T) True where the label is supervised.
    label_mask: Tensor
    #: (B, T) the labels, −100 where ignored.
    labels: Tensor
    #: (B, T, V) logits, only for an objective with ``needs_logits``.
    logits: Tensor | None = None
    #: Seeded from the trainer's seed and the step: the only randomness an objective may use.
    generator: torch.Generator | None = None
    #: (B,) p̂ per sequence, only for an objective with ``answer_samples`` > 0.
    answer_p: Tensor | None = None

    @property
    def seq_logp(self) -> Tensor:
        """ℓ = log π(y|x), the summed completion log-probability per sequence, (B,)."""
        return self.token_logp.sum(dim=-1)

    @property
    def token_ce(self) -> Tensor:
        """Token-mean cross-entropy per sequence, (B,); 0 for a sequence with no supervised token."""
        return -self.seq_logp / self.label_mask.sum(dim=-1).clamp(min=1)


class ObjectiveOptions(Options):
    """Base of every objective's options. ``kind`` says which trainer runs it.

    As in :mod:`aligntrain.config`: floats finite (:data:`~aligntrain.options.Real`), integers StrictInt.
    """

    kind: ClassVar[Literal["none", "sft", "rl"]]
    #: True: TRL's SFT loss (token-mean CE) runs unchanged and no hook below is called.
    uses_trl_loss: ClassVar[bool] = False
    #: True: the objective trains on proof steps: the training stage gives it the problem's step rows
    #: (``Problem.step_rows_of``), whatever form the study prepared.
    trains_on_steps: ClassVar[bool] = False
    #: True: the trainer computes the full logits (memory B·T·V) rather than TRL's fused LM head.
    needs_logits: ClassVar[bool] = False

    @property
    def answer_samples(self) -> int:
        """> 0: the trainer samples this many completions per example to estimate p̂ (``ScoredBatch.answer_p``)."""
        return 0

    def loss(self, seq_logp: Tensor) -> Tensor:  # pragma: no cover - overridden
        raise TypeError(f"objective {self.name!r} has no sequence loss")

    def sample_loss(self, batch: ScoredBatch) -> Tensor:
        """Per-sample losses (B,); the trainer averages them. Default: ``loss(ℓ)``."""
        return self.loss(batch.seq_logp)

    def weight(self, seq_logp: Tensor) -> Tensor | None:
        """Detached w(p) with loss gradient w(p)·∇(−ℓ), for logging; None if the loss has no such form."""
        return None

    def sample_weight(self, batch: ScoredBatch) -> Tensor | None:
        """The logged ``strategy_weight`` of a batch: ``weight(ℓ)`` unless the weight comes from elsewhere."""
        return self.weight(batch.seq_logp.detach())

    def candidates_per_step(self, batch_size: int) -> int:
        """Examples the trainer draws per optimizer step; ``select`` keeps ``batch_size`` of them."""
        return batch_size

    def select(self, seq_logp: Tensor, batch_size: int, answer_p: Tensor | None = None) -> tuple[Tensor, int]:
        """Indices of the candidates to train on, and how many of them the objective would rather not keep.

        Default: the first ``batch_size`` candidates, all wanted.
        """
        import torch

        return torch.arange(min(batch_size, seq_logp.numel()), device=seq_logp.device), 0


@register_objective
class NoTraining(ObjectiveOptions):
    """Evaluate the warm-up checkpoint as it is (the reference point of the study)."""

    name = "none"
    kind = "none"


@register_objective
class CrossEntropy(ObjectiveOptions):
    """Continued token-mean cross-entropy: TRL's own SFT loss, weight 1 (docs/math.md §2)."""

    name = "ce"
    kind = "sft"
    uses_trl_loss = True


@register_objective
class PassAtN(ObjectiveOptions):
    """Pass@N / DCO: loss −log(1 − (1−p)^N), weight F(N, p) (docs/math.md §2; CAT eq. 6, DCO eq. 3).

    DCO refill (DCO §5.1, App. B; ``refill_eps`` > 0): an example whose
    F(N, p) < ε is replaced by a fresh one, so the batch keeps its size.
    [choice] The trainer draws B + ⌈refill_factor·B⌉ candidates per step from
    the shuffled training stream, scores them in one no-grad forward, and
    trains on the first B (in stream order) with F ≥ ε. If fewer than B pass,
    the batch is topped up with the failing candidates of highest F, so it
    keeps its size; their F < ε keeps their gradient small (DCO itself keeps
    the batch size only "approximately fixed", App. B). Unselected candidates
    are skipped, not queued: the stream stays a pure function of the seed, so
    resuming from a checkpoint is exact. Cost: a no-grad forward over all
    candidates each step. See docs/decisions.md, "DCO refill".
    """

    name = "pass_at_n"
    kind = "sft"
    budget: StrictInt = Field(16, ge=1, description="Test-time budget N (attempts of pass@N) the model is trained for.")
    refill_eps: Real = Field(
        0.0, ge=0, le=1, description="DCO refill threshold ε on F(N, p) (DCO App. B: 0.01); 0: no refill."
    )
    refill_factor: Real = Field(
        1.0, gt=0, description="Extra candidates drawn per step for the refill, as a multiple of the batch size."
    )

    @field_validator("refill_factor")
    @classmethod
    def _refill_factor_needs_refill(cls, factor: float, info: ValidationInfo) -> float:
        # Runs only when refill_factor is given explicitly: without refill it would do nothing.
        if info.data.get("refill_eps", 1.0) == 0:
            raise ValueError("refill_factor applies only with refill_eps > 0")
        return factor

    def loss(self, seq_logp):
        from aligntrain.losses import pass_at_n_loss

        return pass_at_n_loss(seq_logp, self.budget)

    def weight(self, seq_logp):
        from aligntrain.losses import pass_at_n_weight_from_logp

        return pass_at_n_weight_from_logp(seq_logp.detach(), self.budget)

    def candidates_per_step(self, batch_size: int) -> int:
        if self.refill_eps == 0:
            return batch_size
        # The factor read as the decimal it prints as: 0.7·10 is 7 extra, not ceil(7.000000000000001).
        return batch_size + math.ceil(Fraction(repr(self.refill_factor)) * batch_size)

    def select(self, seq_logp, batch_size, answer_p=None):
        """DCO refill on F(N, p) of the candidates (:func:`refill_selection`)."""
        return refill_selection(self.weight(seq_logp), self.refill_eps, batch_size)


def refill_selection(weight: Tensor, eps: float, batch_size: int) -> tuple[Tensor, int]:
    """DCO refill: the first ``batch_size`` candidates with F ≥ ε, then the failing ones of highest F.

    Also returns how many of the first ``batch_size`` candidates failed (the
    examples the refill replaced).
    """
    import torch

    from aligntrain.losses import dco_keep_mask

    keep = dco_keep_mask(weight, eps)
    passing = keep.nonzero().squeeze(-1)
    failing = (~keep).nonzero().squeeze(-1)
    failing_by_weight = failing[torch.argsort(weight[failing], descending=True, stable=True)]
    chosen = torch.cat([passing, failing_by_weight])[:batch_size]
    return chosen, int((~keep[:batch_size]).sum())


@register_objective
class StepDCO(PassAtN):
    """DCO_step: each proof step's loss −log(1 − (1−p_s)^{N_step}), weight F(N_step, p_s) (DCO §5.3; docs/math.md §2.8).

    DCO §5.3 ("Rethinking Fine-Tuning when Scaling Test-Time Compute", arXiv:2502.07154)
    regularises every step's confidence p_s = π(t_s | s_s) of a gold proof with DCO's
    factor of eq. 4 at a per-step budget N_step, the branching factor the search at
    test time explores. A step is a prompt/completion row (problem ``rewrite`` with
    ``train_rows: steps``: the goal and the tactics applied so far → the next tactic),
    so its ℓ is log p_s and DCO_step *is* ``pass_at_n`` on step rows with N = N_step:
    this entry is ``PassAtN`` under its own name, with ``budget`` read as N_step and a
    default from DCO Table 2's sweep (N_step in 1, 4, 8, 16, 32). N_step = 1 is CE
    (F = 1). The refill (``refill_eps``, DCO App. B) drops steps with F(N_step, p_s) < ε,
    not whole proofs. It always trains on step rows: the training stage splits a study's
    proof rows into them (``trains_on_steps``), so that one study holds DCO_step and
    naive DCO on a whole proof, F(N, Π_s p_s): ``pass_at_n`` on the proof rows, whose ℓ
    is Σ_s log p_s by the chain rule.
    """

    name = "dco_step"
    trains_on_steps = True
    budget: StrictInt = Field(
        4,
        ge=1,
        description="Per-step budget N_step (DCO §5.3): the branching factor each proof step is trained for; "
        "1 is cross-entropy. Train on step rows.",
    )


@register_objective
class ApproximateDCO(ObjectiveOptions):
    """DCO_a: F(N, p̂)·(−ℓ) with p̂ the answer's probability marginalised over sampled chains of thought (DCO §5.4).

    With a chain of thought the gold completion's own probability p(y|x) says little of
    how often the model reaches the gold *answer*; DCO §5.4 estimates that marginal by
    Monte Carlo instead: each step the trainer samples ``samples`` completions of every
    candidate from the current model (transformers ``generate``, the ``hf`` backend) and
    p̂ = the share whose final answer is the gold completion's (the problem's answer
    classes). The loss is F(N, p̂)·(−ℓ) with F detached, so its gradient is DCO's
    F(N, p̂)·∇(−ℓ) on the gold chain of thought (DCO eq. 4). Refill as DCO App. B:
    candidates with F(N, p̂) < ``refill_eps`` (default 0.01) are replaced, as for
    ``pass_at_n`` (:func:`refill_selection`). Cost: ``samples`` generations per candidate
    per step. [choice] p̂ without smoothing: F(N, 0) = 1 (plain CE) for a candidate the
    model never solves, F(N, 1) = 0 for one it always solves.
    """

    name = "dco_a"
    kind = "sft"
    budget: StrictInt = Field(16, ge=1, description="Test-time budget N (attempts of pass@N) the model is trained for.")
    samples: StrictInt = Field(
        8, ge=1, description="Completions sampled per example and step to estimate p̂ (the Monte Carlo size m)."
    )
    temperature: Real = Field(1.0, gt=0, description="Sampling temperature of those completions.")
    refill_eps: Real = Field(
        0.01, ge=0, le=1, description="Refill threshold ε on F(N, p̂) (DCO App. B: 0.01); 0: no refill."
    )
    refill_factor: Real = Field(
        1.0, gt=0, description="Extra candidates drawn per step for the refill, as a multiple of the batch size."
    )

    @property
    def answer_samples(self) -> int:
        return self.samples

    def answer_weight(self, answer_p: Tensor) -> Tensor:
        """F(N, p̂), detached (DCO eq. 4)."""
        from aligntrain.losses import pass_at_n_weight

        return pass_at_n_weight(answer_p.detach(), self.budget)

    def sample_loss(self, batch: ScoredBatch) -> Tensor:
        if batch.answer_p is None:
            raise ValueError("dco_a needs batch.answer_p (the trainer estimates it when answer_samples > 0)")
        return self.answer_weight(batch.answer_p).to(batch.seq_logp.dtype) * (-batch.seq_logp)

    def sample_weight(self, batch: ScoredBatch) -> Tensor | None:
        return None if batch.answer_p is None else self.answer_weight(batch.answer_p)

    def candidates_per_step(self, batch_size: int) -> int:
        if self.refill_eps == 0:
            return batch_size
        return batch_size + math.ceil(Fraction(repr(self.refill_factor)) * batch_size)

    def select(self, seq_logp, batch_size, answer_p=None):
        if answer_p is None:
            raise ValueError("dco_a selects its batch on p̂: answer_p is needed")
        return refill_selection(self.answer_weight(answer_p), self.refill_eps, batch_size)


@register_objective
class MajorityVote(ObjectiveOptions):
    """CAT majority-vote SFT: loss −log P[Binomial(N, p) ≥ k] (docs/math.md §2; CAT eqs. 7, 15–16).

    Weight p·B′(p)/B(p) = k·C(N,k)·p^k(1−p)^{N−k}/B(p); w(0) = k. The threshold
    is either ``k`` or ``consensus`` ρ with k = ⌈ρN⌉ (CAT App. I.4), exactly one.
    """

    name = "majority"
    kind = "sft"
    budget: StrictInt = Field(16, ge=1, description="Test-time budget N: votes cast.")
    k: StrictInt | None = Field(
        None, ge=1, description="Votes the gold answer needs, 1 <= k <= budget (or give consensus)."
    )
    # validate_default: the "neither k nor consensus" check must also run when consensus is absent.
    consensus: Real | None = Field(
        None,
        gt=0,
        le=1,
        validate_default=True,
        description="Consensus fraction ρ in (0, 1]: k = ceil(ρ·budget) (or give k).",
    )

    @field_validator("k")
    @classmethod
    def _k_at_most_budget(cls, k: int | None, info: ValidationInfo) -> int | None:
        budget = info.data.get("budget")  # absent when budget itself failed validation
        if k is not None and budget is not None and k > budget:
            raise ValueError(f"k must be <= budget, got k={k}, budget={budget}")
        return k

    @field_validator("consensus", mode="after")
    @classmethod
    def _exactly_one_threshold(cls, consensus: float | None, info: ValidationInfo) -> float | None:
        # k is None both when it was not given and when it failed validation: only
        # "k given and valid" counts as given here, so an invalid k is reported once.
        k_given = info.data.get("k") is not None
        if consensus is not None and k_given:
            raise ValueError("give either k or consensus, not both")
        if consensus is None and not k_given and "k" in info.data:
            raise ValueError("the threshold is missing: give k (votes) or consensus (fraction of budget)")
        return consensus

    @property
    def threshold(self) -> int:
        """The vote threshold k."""
        from aligntrain.losses import consensus_threshold

        return self.k if self.k is not None else consensus_threshold(self.budget, self.consensus)

    def loss(self, seq_logp):
        from aligntrain.losses import majority_loss

        return majority_loss(seq_logp, self.budget, self.threshold)

    def weight(self, seq_logp):
        from aligntrain.losses import majority_weight_from_logp

        return majority_weight_from_logp(seq_logp.detach(), self.budget, self.threshold)


@register_objective
class ContrastiveMargin(ObjectiveOptions):
    """Hybrid mix·margin + (1 − mix)·CE per sequence (CAT App. A.7.2–A.7.3; docs/math.md §2.6).

    The margin term has two forms (``form``). ``log_sigmoid`` (CAT App. A.7.3, the
    authors' code): ``num_rivals`` rival tokens per gold token drawn from the softmax
    with the gold token masked, (1/K) Σ −log σ(z_gold − z_rival)
    (``losses.contrastive_margin_loss``; uses the trainer's per-step generator).
    ``hinge`` (CAT eqs. 24 and 26): max(0, γ − m_t) with m_t the gold logit's lead
    over the greedy (strongest) rival and γ = ``target_margin``
    (``losses.contrastive_hinge_loss``; no sampling). Both need the full logits.
    [choice] The CE term is the token-mean per sequence (the margin's reduction too),
    so that both terms are per-sample and the batch mean weighs sequences equally.
    An option of the other form must keep its default (it would have no effect).
    """

    name = "contrastive"
    kind = "sft"
    needs_logits = True
    form: Literal["log_sigmoid", "hinge"] = Field(
        "log_sigmoid",
        description="Margin term: sampled pairwise −log σ (CAT App. A.7.3) or hinge on the greedy rival (CAT eq. 26).",
    )
    num_rivals: StrictInt = Field(4, ge=1, description="log_sigmoid: rivals K sampled per gold token (CAT's code: 4).")
    target_margin: Real = Field(
        1.0, gt=0, description="hinge: target margin γ of max(0, γ − m_t) on logits (CAT eq. 26)."
    )
    mix: Real = Field(0.5, ge=0, le=1, description="Weight of the margin term; 1 − mix goes to CE (CAT: 0.5).")

    @model_validator(mode="after")
    def _options_of_the_form(self) -> ContrastiveMargin:
        # Compared with the defaults (not "was it given"), so a dumped and re-read config stays valid.
        unused = {"hinge": "num_rivals", "log_sigmoid": "target_margin"}[self.form]
        if getattr(self, unused) != type(self).model_fields[unused].default:
            raise ValueError(f"{unused} has no effect with form {self.form!r}: leave it at its default")
        return self

    def sample_loss(self, batch: ScoredBatch) -> Tensor:
        from aligntrain.losses import contrastive_hinge_loss, contrastive_hybrid_loss, contrastive_margin_loss

        if batch.logits is None:
            raise ValueError("contrastive needs batch.logits (the trainer computes them when needs_logits is set)")
        if self.form == "hinge":
            margin = contrastive_hinge_loss(batch.logits, batch.labels, self.target_margin)
        else:
            margin = contrastive_margin_loss(batch.logits, batch.labels, self.num_rivals, batch.generator)
        return contrastive_hybrid_loss(batch.token_ce, margin, self.mix)


@register_objective
class ReinforcementLearning(ObjectiveOptions):
    """RL from the warm-up checkpoint with an advantage rule of :mod:`aligntrain.advantages`.

    Written flat: ``{objective: rl, rule: pkpo, budget: 4}``: every key but ``rule``,
    ``loss_type`` and ``num_generations`` is an option of the rule (docs/math.md §3), typed
    by the rule's own options model. Sampling and schedule are the study's shared ``rl``
    section (matched compute across RL variants), and so is the group size unless the
    variant sets its own; :meth:`aligntrain.config.Params.rl_config` joins the two into the
    one :class:`~aligntrain.config.RLConfig` the trainer consumes.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    name = "rl"
    kind = "rl"
    rule: str = Field(description="Advantage rule name (`aligntrain list rules`).")
    loss_type: Literal["dapo", "dr_grpo", "grpo", "bnpo"] | None = Field(
        None, description="TRL loss reduction; None: dr_grpo for rule dr_grpo, else TRL's default (dapo)."
    )
    num_generations: int | None = Field(
        None,
        ge=2,
        strict=True,
        description="This variant's group size n (rollouts per prompt); None: the study's rl.num_generations. "
        "rl.batch_size (completions a step) stays shared, so a larger group sees fewer prompts a step at the same "
        "sampling compute: TEA's group-size comparison (Table 4, n = 16, 32, 64).",
    )

    @model_validator(mode="after")
    def _rule_options_are_valid(self) -> ReinforcementLearning:
        self.rule_config  # noqa: B018 - parses the rule's options (ValueError naming the option)
        return self

    @property
    def rule_config(self):
        """The rule with its options, parsed by its own options model."""
        from aligntrain.advantages import parse_rule

        return parse_rule(self.rule, self.model_extra or {})
