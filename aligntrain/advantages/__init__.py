"""Advantage rules for strategy-aware RL on rollout groups (docs/math.md §3).

Entry point: ``compute_advantages(rule, rewards, **context_and_options)``. Each
rule is a typed options model in a registry (``list_rules()``, ``get_rule(name)``,
``RULES``); the training layer checks a variant once with ``parse_rule`` before
training. docs/advantages.md has every rule's formula, source, scale and bias.
"""

# Importing the rule modules registers their rules.
from aligntrain.advantages import baselines, best_of_n, cat, leave_one_out, tea  # noqa: F401
from aligntrain.advantages.registry import (
    CONTEXT_KEYS,
    RULES,
    RuleContext,
    RuleOptions,
    compute_advantages,
    get_rule,
    list_rules,
    parse_rule,
    register_rule,
)
from aligntrain.advantages.state import MajorityThresholdState, RewardHistory
from aligntrain.advantages.tea import expected_max_standard_normal, tail_constants

__all__ = [
    "CONTEXT_KEYS",
    "RULES",
    "MajorityThresholdState",
    "RewardHistory",
    "RuleContext",
    "RuleOptions",
    "compute_advantages",
    "expected_max_standard_normal",
    "get_rule",
    "list_rules",
    "parse_rule",
    "register_rule",
    "tail_constants",
]
