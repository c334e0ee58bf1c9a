"""Registry of advantage rules and the one entry point ``compute_advantages`` (docs/math.md §3).

A *rule* maps a batch of rollout groups (rewards of shape (G, n): G prompts, n
rollouts each) plus optional context to detached advantages of the same shape.
The trainer's policy loss is ``−(1/n) Σ_i A_i log π(y_i)`` per prompt, so a rule
that claims to be unbiased for an objective J satisfies
``E[(1/n) Σ_i A_i ∇log π(y_i)] = ∇J`` exactly (the *scale convention*).

Each rule is a :class:`RuleOptions` model registered with ``@register_rule``
(the pattern of :mod:`aligntrain.options`, shared with the objectives and the
problems): its fields are the rule's typed, documented options; its class
variables say what it estimates, whether it accepts only binary rewards and
which context it needs; ``advantages(rewards, context)`` computes. A variant is
checked once, before training, by :func:`parse_rule`.

Context keys (keyword arguments of :func:`compute_advantages` that are not options):

``answers``
    G lists of n hashable answer classes (``None`` = unparseable), or an integer
    tensor (G, n) of class ids with −1 for unparseable.
``logps``
    Tensor (G, n): summed rollout log-probabilities (≤ 0).
``history``
    A :class:`~aligntrain.advantages.state.RewardHistory`. It is queried *before*
    this batch is added; ``compute_advantages`` then appends the batch's rewards
    (at ``step``) whenever a history is passed, whatever the rule.
``step``
    Training step (int ≥ 0): the time stamp of the history items.
``threshold_state``
    A :class:`~aligntrain.advantages.state.MajorityThresholdState` holding the EMA
    of the dynamic majority threshold across steps; the rule updates it in place.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from aligntrain.advantages.state import MajorityThresholdState, RewardHistory
from aligntrain.options import Options, Registry

CONTEXT_KEYS: tuple[str, ...] = ("answers", "logps", "history", "step", "threshold_state")


@dataclass(frozen=True)
class RuleContext:
    """Per-call context of a rule; see the module docstring for each key."""

    answers: Sequence[Sequence[Any]] | Tensor | None = None
    logps: Tensor | None = None
    history: RewardHistory | None = None
    step: int | None = None
    threshold_state: MajorityThresholdState | None = None


class RuleOptions(Options):
    """Base of every advantage rule: the fields are its options, the class variables what it is.

    ``unbiased_for`` names the objective J the rule is an unbiased gradient
    estimator of, at the scale convention (docs/math.md §3), or is ``None`` when
    the rule is biased (its docstring says how).
    """

    unbiased_for: ClassVar[str | None] = None
    #: True: rewards must be in {0, 1} (pass@k, majority vote)
    binary_rewards_only: ClassVar[bool] = False
    #: context keys the rule always needs (:meth:`context_needed` adds option-dependent ones)
    requires: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.requires) - set(CONTEXT_KEYS)
        if unknown:
            name = cls.__dict__.get("name", cls.__name__)
            raise ValueError(f"rule {name!r}: requires unknown context {sorted(unknown)}")

    def advantages(self, rewards: Tensor, context: RuleContext) -> Tensor:  # pragma: no cover - overridden
        """Advantages (G, n) of ``rewards`` (G, n); called without gradient tracking, context checked."""
        raise NotImplementedError

    def context_needed(self) -> frozenset[str]:
        """The context keys this rule needs with these options."""
        return frozenset(self.requires)

    def check_group_size(self, group_size: int) -> None:
        """Raise ValueError when the options do not fit groups of ``group_size`` rollouts (>= 2 already checked)."""

    def check_fits(self, *, group_size: int | None = None, binary_rewards: bool | None = None) -> None:
        """ValueError naming the rule when it cannot run on groups of ``group_size`` or on the problem's rewards.

        ``binary_rewards``: whether the problem's rewards are in {0, 1} (None: unknown, not checked).
        """
        if group_size is not None:
            if not is_int(group_size) or group_size < 2:
                raise ValueError(
                    f"rule {self.name!r}: group_size (rollouts per prompt) must be an integer >= 2, got {group_size!r}"
                )
            try:
                self.check_group_size(int(group_size))
            except ValueError as err:
                raise ValueError(f"rule {self.name!r}: {err}") from None
        if self.binary_rewards_only and binary_rewards is False:
            raise ValueError(
                f"rule {self.name!r} needs binary rewards in {{0, 1}} but the problem's rewards are continuous"
            )


RULES: Registry[RuleOptions] = Registry("advantage rule")
#: class decorator: ``@register_rule class MyRule(RuleOptions): name = "my_rule"; ...``
register_rule = RULES.register


def list_rules() -> list[str]:
    return RULES.names()


def get_rule(name: str) -> type[RuleOptions]:
    return RULES.get(name)


def parse_rule(
    rule: str | RuleOptions,
    options: Mapping[str, Any] | None = None,
    *,
    group_size: int | None = None,
    binary_rewards: bool | None = None,
) -> RuleOptions:
    """The rule with its options validated and checked against the group size and the problem's rewards.

    ``rule``: a name (``options`` are then its options) or an already parsed rule.
    Raises ValueError naming the rule and each offending option.
    """
    if not isinstance(rule, (str, RuleOptions)):
        raise ValueError(f"a rule is a name or a RuleOptions, got {type(rule).__name__}")
    if isinstance(rule, RuleOptions):
        if options:
            raise ValueError(f"rule {rule.name!r} is already parsed: pass no options, got {sorted(options)}")
        parsed = rule
    else:
        parsed = RULES.parse(rule, options)
    parsed.check_fits(group_size=group_size, binary_rewards=binary_rewards)
    return parsed


def compute_advantages(
    rule: str | RuleOptions,
    rewards: Tensor,
    *,
    answers: Sequence[Sequence[Any]] | Tensor | None = None,
    logps: Tensor | None = None,
    history: RewardHistory | None = None,
    step: int | None = None,
    threshold_state: MajorityThresholdState | None = None,
    **options: Any,
) -> Tensor:
    """Detached advantages (G, n) of ``rule`` for ``rewards`` (G, n), same dtype and device.

    ``rule``: a rule name, with its options as the other keyword arguments, or a
    parsed :class:`RuleOptions`. When ``history`` is given it is queried first and
    then this batch's rewards are appended to it at ``step`` (or at the step after
    its last one when ``step`` is None).
    """
    name = rule.name if isinstance(rule, RuleOptions) else rule
    spec = get_rule(name)
    check_rewards(rewards, name)
    parsed = parse_rule(rule, options, group_size=rewards.shape[1])
    if spec.binary_rewards_only and not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError(f"rule {name!r}: rewards must be binary (0 or 1) for this rule")
    context = RuleContext(answers=answers, logps=logps, history=history, step=step, threshold_state=threshold_state)
    check_context(context, parsed.context_needed(), rewards, name)

    work_dtype = torch.promote_types(rewards.dtype, torch.float32)
    with torch.no_grad():
        advantages = parsed.advantages(rewards.detach().to(work_dtype), context)
    if history is not None:
        history.append(rewards, step)
    return advantages.detach().to(rewards.dtype)


# --------------------------------------------------------------------------- input checks


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_rewards(rewards: Any, rule: str) -> None:
    if not isinstance(rewards, Tensor):
        raise ValueError(f"rewards must be a torch.Tensor of shape (G, n), got {type(rewards).__name__}")
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape (G, n), got shape {tuple(rewards.shape)}")
    if rewards.shape[0] == 0 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must be non-empty (no empty groups), got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a floating-point tensor, got dtype {rewards.dtype}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"rule {rule!r}: rewards group size n must be >= 2 (a group rule needs at least two "
            f"rollouts per prompt), got n = {rewards.shape[1]}"
        )
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contain NaN or inf")


#: how each context key is checked when a rule needs it or it is passed
_LOGP_TOLERANCE = 1e-6


def check_context(context: RuleContext, needed: frozenset[str], rewards: Tensor, rule: str) -> None:
    for key in sorted(needed):
        if getattr(context, key) is None:
            raise ValueError(f"rule {rule!r} with these options needs context {key!r}")
    shape = tuple(rewards.shape)
    if context.logps is not None:
        logps = context.logps
        if not isinstance(logps, Tensor) or tuple(logps.shape) != shape:
            got = tuple(logps.shape) if isinstance(logps, Tensor) else type(logps).__name__
            raise ValueError(f"logps must be a tensor of the rewards' shape {shape}, got {got}")
        if not bool(torch.isfinite(logps).all()):
            raise ValueError("logps contain NaN or inf")
        if bool((logps > _LOGP_TOLERANCE).any()):
            raise ValueError("logps must be <= 0 (sequence probability p = exp(logps) outside [0, 1])")
    if context.answers is not None:
        check_answers_shape(context.answers, shape)
    if context.history is not None and not isinstance(context.history, RewardHistory):
        raise ValueError(f"history must be a RewardHistory, got {type(context.history).__name__}")
    if context.step is not None and (not is_int(context.step) or context.step < 0):
        raise ValueError(f"step must be an integer >= 0, got {context.step!r}")
    if context.threshold_state is not None and not isinstance(context.threshold_state, MajorityThresholdState):
        raise ValueError(
            f"threshold_state must be a MajorityThresholdState, got {type(context.threshold_state).__name__}"
        )


def check_answers_shape(answers: Any, shape: tuple[int, int]) -> None:
    if isinstance(answers, Tensor):
        if tuple(answers.shape) != shape or answers.is_floating_point() or answers.is_complex():
            raise ValueError(
                f"answers as a tensor must be integer class ids of the rewards' shape {shape}, "
                f"got {answers.dtype} {tuple(answers.shape)}"
            )
        return
    if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence) or len(answers) != shape[0]:
        raise ValueError(f"answers must be a list of G = {shape[0]} lists of n = {shape[1]} answers")
    for g, group in enumerate(answers):
        if isinstance(group, (str, bytes)) or not isinstance(group, Sequence) or len(group) != shape[1]:
            raise ValueError(f"answers[{g}] must be a list of n = {shape[1]} answers")
