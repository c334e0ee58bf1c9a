"""Registry of advantage rules and the one entry point ``compute_advantages`` (FORMULAS §3).

A *rule* maps a batch of rollout groups (rewards of shape (G, n): G prompts, n
rollouts each) plus optional context to detached advantages of the same shape.
The trainer's policy loss is ``−(1/n) Σ_i A_i log π(y_i)`` per prompt, so a rule
that claims to be unbiased for an objective J satisfies
``E[(1/n) Σ_i A_i ∇log π(y_i)] = ∇J`` exactly (the *scale convention*).

Each rule registers a frozen :class:`RuleSpec` with its option defaults, the
context it needs, whether it accepts only binary rewards, and a check of its
option values, so that the training layer can reject a bad variant *before*
training (:func:`validate_rule_options`).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import torch
from torch import Tensor

from aligntrain.advantages.state import MajorityThresholdState, RewardHistory

CONTEXT_KEYS: tuple[str, ...] = ("answers", "logps", "history", "step", "threshold_state")


@dataclass(frozen=True)
class RuleContext:
    """Per-call context of a rule; see the module docstring for each key."""

    answers: Sequence[Sequence[Any]] | Tensor | None = None
    logps: Tensor | None = None
    history: RewardHistory | None = None
    step: int | None = None
    threshold_state: MajorityThresholdState | None = None


class RuleFn(Protocol):
    def __call__(self, rewards: Tensor, context: RuleContext, **options: Any) -> Tensor: ...


OptionCheck = Callable[[str, Mapping[str, Any], int], None]
ContextNeeds = Callable[[Mapping[str, Any]], frozenset[str]]


@dataclass(frozen=True)
class RuleSpec:
    """What the training layer needs to know about a rule before it runs.

    ``unbiased_for`` names the objective J the rule is an unbiased gradient
    estimator of, at the scale convention of FORMULAS §3, or is ``None`` when the
    rule is biased (its docstring says how).
    """

    name: str
    fn: RuleFn
    defaults: Mapping[str, Any]
    unbiased_for: str | None = None
    binary_rewards_only: bool = False
    required_context: frozenset[str] = frozenset()
    #: extra context needed for particular option values (e.g. ``logps`` when
    #: ``p_source="sequence"``)
    context_for_options: ContextNeeds | None = None
    #: raises ValueError naming the rule and the option; arguments: (rule, options, n)
    check_options: OptionCheck | None = None
    description: str = ""

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overridden by ``options``; unknown option names raise ValueError."""
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"rule {self.name!r}: unknown option(s) {unknown}; "
                f"its options are {sorted(self.defaults)}"
            )
        return {**self.defaults, **options}

    def context_needed(self, options: Mapping[str, Any]) -> frozenset[str]:
        extra = self.context_for_options(options) if self.context_for_options else frozenset()
        return self.required_context | extra


_RULES: dict[str, RuleSpec] = {}


def register_rule(
    name: str,
    *,
    defaults: Mapping[str, Any] | None = None,
    unbiased_for: str | None = None,
    binary_rewards_only: bool = False,
    requires: Sequence[str] = (),
    context_for_options: ContextNeeds | None = None,
    check_options: OptionCheck | None = None,
) -> Callable[[RuleFn], RuleFn]:
    """Decorator registering ``fn(rewards, context, **options) -> advantages`` as ``name``."""
    unknown = set(requires) - set(CONTEXT_KEYS)
    if unknown:
        raise ValueError(f"rule {name!r}: requires unknown context {sorted(unknown)}")

    def decorate(fn: RuleFn) -> RuleFn:
        if name in _RULES:
            raise ValueError(f"rule {name!r} registered twice")
        doc = (fn.__doc__ or "").strip()
        _RULES[name] = RuleSpec(
            name=name,
            fn=fn,
            defaults=MappingProxyType(dict(defaults or {})),
            unbiased_for=unbiased_for,
            binary_rewards_only=binary_rewards_only,
            required_context=frozenset(requires),
            context_for_options=context_for_options,
            check_options=check_options,
            description=doc.splitlines()[0] if doc else "",
        )
        return fn

    return decorate


def list_rules() -> list[str]:
    return sorted(_RULES)


def get_rule(name: str) -> RuleSpec:
    try:
        return _RULES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown advantage rule {name!r}; known rules: {list_rules()}") from None


def validate_rule_options(
    rule: str,
    group_size: int,
    options: Mapping[str, Any] | None = None,
    binary_rewards: bool | None = None,
) -> dict[str, Any]:
    """Check a variant's rule, options and group size before training; return the resolved options.

    ``binary_rewards``: whether the problem's rewards are in {0, 1} (None = unknown,
    not checked). Raises ValueError naming the rule and the offending option.
    """
    spec = get_rule(rule)
    if not is_int(group_size) or group_size < 2:
        raise ValueError(
            f"rule {rule!r}: group_size (rollouts per prompt) must be an integer >= 2, got {group_size!r}"
        )
    if spec.binary_rewards_only and binary_rewards is False:
        raise ValueError(
            f"rule {rule!r} needs binary rewards in {{0, 1}} but the problem's rewards are continuous"
        )
    resolved = spec.resolve_options(options or {})
    if spec.check_options is not None:
        spec.check_options(rule, resolved, int(group_size))
    return resolved


def compute_advantages(
    rule: str,
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

    Keyword arguments other than the context keys are the rule's options (see
    ``get_rule(rule).defaults``). When ``history`` is given it is queried first and
    then this batch's rewards are appended to it at ``step`` (or at the step after
    its last one when ``step`` is None).
    """
    spec = get_rule(rule)
    check_rewards(rewards, rule)
    n = rewards.shape[1]
    resolved = validate_rule_options(rule, n, options)
    if spec.binary_rewards_only and not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError(f"rule {rule!r}: rewards must be binary (0 or 1) for this rule")
    context = RuleContext(
        answers=answers, logps=logps, history=history, step=step, threshold_state=threshold_state
    )
    check_context(context, spec.context_needed(resolved), rewards, rule)

    work_dtype = torch.promote_types(rewards.dtype, torch.float32)
    with torch.no_grad():
        advantages = spec.fn(rewards.detach().to(work_dtype), context, **resolved)
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
    if context.threshold_state is not None and not isinstance(
        context.threshold_state, MajorityThresholdState
    ):
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


# --------------------------------------------------------------------------- option checks
# Small validators composed by the rules' ``check_options`` functions.


def require_int(
    rule: str, name: str, value: Any, low: int, high: int | None = None, high_label: str = ""
) -> None:
    """``high_label`` names the upper bound in the message, e.g. "n (group size)"."""
    if high is None:
        bound = f">= {low}"
    else:
        bound = f"in [{low}, {high}]" + (f", i.e. <= {high_label}" if high_label else "")
    if not is_int(value) or value < low or (high is not None and value > high):
        raise ValueError(f"rule {rule!r}: option {name} must be an integer {bound}, got {value!r}")


def require_bool(rule: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"rule {rule!r}: option {name} must be True or False, got {value!r}")


def require_choice(rule: str, name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"rule {rule!r}: option {name} must be one of {list(choices)}, got {value!r}")


def require_real(
    rule: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else f"{'(' if low_open else '['}{low}"
        hi = "" if high is None else f"{high}{')' if high_open else ']'}"
        where = f"in {lo or '(-inf'}, {hi or 'inf)'}"
        raise ValueError(f"rule {rule!r}: option {name} must be a real number {where}, got {value!r}")

