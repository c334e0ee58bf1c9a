"""Answer classes of a rollout group, counted per group on (G, n) tensors.

Used by the majority-vote rules (Tang LOO maj@k, CAT majority). Which class is
correct is read from the rewards [choice, documented in docs/advantages.md]: an
answer class is correct iff its rollouts have reward 1. Rollouts of the same
class with different rewards, or an unparseable rollout (class ``None``) with
reward 1, are contradictory input and raise ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class AnswerClasses:
    """Per-group answer classes. Slot ``n`` (the last) is the unparseable class."""

    #: (G, n) long: class slot of each rollout, in [0, n) for answers, n for None
    ids: Tensor
    #: (G, n + 1) long: rollouts per slot
    counts: Tensor
    #: (G, n + 1) bool: slot is a correct answer (never the unparseable slot)
    correct: Tensor


def answer_class_ids(answers: Sequence[Sequence[Any]] | Tensor, shape: tuple[int, int], device) -> Tensor:
    """(G, n) long class slots: equal answers of a group share a slot in [0, n); None → n.

    ``answers`` is either G lists of n hashable answers, or an integer tensor of
    class ids with −1 for unparseable (any other ids; they are re-indexed per group).
    """
    n = shape[1]
    if isinstance(answers, Tensor):
        return _dense_ids(answers.to(device=device, dtype=torch.long), n)
    rows = []
    for group in answers:
        slots: dict[Any, int] = {}
        try:
            rows.append([n if a is None else slots.setdefault(a, len(slots)) for a in group])
        except TypeError as error:
            raise ValueError(f"answers must be hashable (answer classes): {error}") from None
    return torch.tensor(rows, dtype=torch.long, device=device)


def _dense_ids(ids: Tensor, n: int) -> Tensor:
    """Re-index arbitrary integer ids per row to [0, n) by rank; negative ids → n."""
    ordered, order = ids.sort(dim=1)
    new_value = torch.ones_like(ordered, dtype=torch.bool)
    new_value[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    dense_sorted = new_value.long().cumsum(dim=1) - 1
    dense = torch.empty_like(dense_sorted).scatter_(1, order, dense_sorted)
    return dense.masked_fill(ids < 0, n)


def answer_classes(answers: Sequence[Sequence[Any]] | Tensor, rewards: Tensor) -> AnswerClasses:
    """Count each group's answer classes and mark the correct ones (reward 1)."""
    groups, n = rewards.shape
    ids = answer_class_ids(answers, (groups, n), rewards.device)
    counts = torch.zeros(groups, n + 1, dtype=torch.long, device=rewards.device)
    counts.scatter_add_(1, ids, torch.ones_like(ids))
    correct_counts = torch.zeros_like(counts).scatter_add_(1, ids, (rewards > 0).long())
    mixed = (correct_counts != 0) & (correct_counts != counts)
    if bool(mixed[:, :n].any()):
        group = int(mixed[:, :n].any(dim=1).nonzero()[0])
        raise ValueError(
            f"answers and rewards disagree: rollouts with the same answer class have different rewards (group {group})"
        )
    if bool((correct_counts[:, n] > 0).any()):
        group = int((correct_counts[:, n] > 0).nonzero()[0])
        raise ValueError(f"answers and rewards disagree: an unparseable answer (None) has reward 1 (group {group})")
    return AnswerClasses(ids=ids, counts=counts, correct=correct_counts > 0)
