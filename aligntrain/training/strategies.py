"""The registry of training objectives a variant can name in params.yaml.

Each entry is a pydantic model of the objective's options; the model knows how
to turn a batch of summed completion log-probabilities into per-sample losses
and detached weights (FORMULAS §2). Adding an objective = adding a class here
with ``@register_objective``; no stage, flow or config code changes.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

OBJECTIVES: dict[str, type[ObjectiveOptions]] = {}


def register_objective(cls: type[ObjectiveOptions]) -> type[ObjectiveOptions]:
    if cls.name in OBJECTIVES:
        raise ValueError(f"objective {cls.name!r} registered twice")
    OBJECTIVES[cls.name] = cls
    return cls


def get_objective(name: str) -> type[ObjectiveOptions]:
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}; known: {sorted(OBJECTIVES)}") from None


class ObjectiveOptions(BaseModel):
    """Base of every objective's options. ``kind`` says which trainer runs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: ClassVar[str]
    kind: ClassVar[Literal["none", "sft", "rl"]]
    #: True when the loss is a per-sequence function of the summed log-probability
    #: (the trainer then computes ``loss(seq_logp)``); False for token-mean CE.
    sequence_level: ClassVar[bool] = True

    def loss(self, seq_logp):  # pragma: no cover - overridden
        raise TypeError(f"objective {self.name!r} has no sequence loss")

    def weight(self, seq_logp):  # pragma: no cover - overridden
        raise TypeError(f"objective {self.name!r} has no weight")


@register_objective
class NoTraining(ObjectiveOptions):
    """Evaluate the warm-up checkpoint as it is (the reference point of the study)."""

    name = "none"
    kind = "none"


@register_objective
class CrossEntropy(ObjectiveOptions):
    """Continued token-mean cross-entropy: TRL's own SFT loss, weight 1 (FORMULAS §2)."""

    name = "ce"
    kind = "sft"
    sequence_level = False


@register_objective
class PassAtN(ObjectiveOptions):
    """Pass@N / DCO: loss −log(1 − (1−p)^N), weight F(N, p) (FORMULAS §2; CAT eq. 6, DCO eq. 3)."""

    name = "pass_at_n"
    kind = "sft"
    n: int = Field(16, ge=1, description="Test-time budget N the model is trained for.")

    def loss(self, seq_logp):
        from aligntrain.objectives import pass_at_n_loss

        return pass_at_n_loss(seq_logp, self.n)

    def weight(self, seq_logp):
        from aligntrain.objectives import pass_at_n_weight_from_logp

        return pass_at_n_weight_from_logp(seq_logp.detach(), self.n)


@register_objective
class ReinforcementLearning(ObjectiveOptions):
    """RL from the warm-up checkpoint with an advantage rule of :mod:`aligntrain.advantages`.

    Written flat: ``{objective: rl, rule: pkpo, k: 4}``: every key but ``rule`` and
    ``loss_type`` is an option of the rule (FORMULAS §3). Group size, sampling and
    schedule are the study's shared ``rl`` section (matched compute across RL
    variants); the rule's options are checked against them by
    :class:`aligntrain.config.Params` before any stage runs.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    name = "rl"
    kind = "rl"
    rule: str = Field(description="Advantage rule name (aligntrain.advantages.list_rules()).")
    loss_type: Literal["dapo", "dr_grpo", "grpo", "bnpo"] | None = Field(
        None, description="TRL loss reduction; None: dr_grpo for rule dr_grpo, else TRL's default (dapo)."
    )

    @property
    def rule_options(self) -> dict:
        return dict(self.model_extra or {})
