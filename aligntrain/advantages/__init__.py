"""Advantage rules for strategy-aware RL on rollout groups (FORMULAS §3).

Entry point: ``compute_advantages(rule, rewards, **context_and_options)``. Rules
are registered by name (``list_rules()``, ``get_rule(name)``); the training layer
checks a variant with ``validate_rule_options`` before training. See
docs/advantages.md for every rule's formula, source, scale and bias.
"""

# Importing the rule modules registers their rules.
from aligntrain.advantages import baselines, best_of_n, cat, leave_one_out, tea  # noqa: F401
from aligntrain.advantages.registry import (
    CONTEXT_KEYS,
    RuleContext,
    RuleSpec,
    compute_advantages,
    get_rule,
    list_rules,
    register_rule,
    validate_rule_options,
)
from aligntrain.advantages.state import MajorityThresholdState, RewardHistory
from aligntrain.advantages.tea import expected_max_standard_normal, tail_constants

__all__ = [
    "CONTEXT_KEYS",
    "MajorityThresholdState",
    "RewardHistory",
    "RuleContext",
    "RuleSpec",
    "compute_advantages",
    "expected_max_standard_normal",
    "get_rule",
    "list_rules",
    "register_rule",
    "tail_constants",
    "validate_rule_options",
]
