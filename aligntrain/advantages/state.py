"""State that advantage rules carry across training steps (CAT, CAT App. B.7.2, L.2).

Both objects are owned by the trainer, created once per run and passed to
``compute_advantages`` as context on every step:

- :class:`RewardHistory` — FIFO buffer of recent rewards with their steps, for the
  global best-of-N quantile (``cat_best_of_n`` with ``quantile="history"`` or
  ``"time_weighted"``). ``compute_advantages`` appends each batch after the rule has
  queried it.
- :class:`MajorityThresholdState` — the EMA of the dynamic majority threshold
  (``cat_majority`` with ``threshold_ema``); the rule updates it in place.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor


class RewardHistory:
    """FIFO buffer of the last ``capacity`` rewards and the steps they were seen at (CAT eq. 105).

    ``decay`` is the factor γ ∈ (0, 1] of the time-weighted quantile (CAT eq. 80):
    item j counts with weight γ^(t − t_j) at step t. It is only used by
    ``quantile="time_weighted"``; ``quantile="history"`` weighs all items equally.
    Rewards are stored as float64 on the CPU, in the order they were appended
    (a batch is flattened row by row).
    """

    def __init__(self, capacity: int = 4000, decay: float | None = None) -> None:
        if not isinstance(capacity, numbers.Integral) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        if decay is not None and not (isinstance(decay, numbers.Real) and 0.0 < decay <= 1.0):
            raise ValueError(f"decay must be None or a real number in (0, 1], got {decay!r}")
        self.capacity = int(capacity)
        self.decay = None if decay is None else float(decay)
        self._rewards = torch.empty(0, dtype=torch.float64)
        self._steps = torch.empty(0, dtype=torch.int64)

    def __len__(self) -> int:
        return self._rewards.numel()

    @property
    def rewards(self) -> Tensor:
        """The stored rewards, oldest first (a read-only view)."""
        return self._rewards

    @property
    def steps(self) -> Tensor:
        """The step of each stored reward."""
        return self._steps

    @property
    def last_step(self) -> int | None:
        return int(self._steps[-1]) if len(self) else None

    def append(self, rewards: Tensor, step: int | None = None) -> None:
        """Add ``rewards`` (any shape, flattened) seen at ``step``; drop the oldest beyond capacity.

        ``step=None`` means the step after the last stored one (0 for an empty buffer).
        """
        if step is None:
            step = 0 if self.last_step is None else self.last_step + 1
        if not isinstance(step, numbers.Integral) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be an integer >= 0, got {step!r}")
        values = rewards.detach().reshape(-1).to("cpu", torch.float64)
        if not bool(torch.isfinite(values).all()):
            raise ValueError("rewards appended to the history contain NaN or inf")
        steps = torch.full_like(values, int(step), dtype=torch.int64)
        self._rewards = torch.cat([self._rewards, values])[-self.capacity :]
        self._steps = torch.cat([self._steps, steps])[-self.capacity :]


@dataclass
class MajorityThresholdState:
    """Running EMA k̄ of the dynamic majority threshold across steps (CAT App. B.7.2).

    ``value`` is None until the first update. ``update`` is called by
    ``cat_majority`` once per batch with the batch mean of the per-prompt dynamic
    thresholds k_t: k̄ ← β k̄ + (1 − β) k_t (the first update sets k̄ = k_t).
    """

    value: float | None = None
    updates: int = 0

    def update(self, batch_threshold: float, decay: float) -> float:
        if not math.isfinite(batch_threshold):
            raise ValueError(f"batch_threshold must be finite, got {batch_threshold!r}")
        if self.value is None:
            self.value = float(batch_threshold)
        else:
            self.value = decay * self.value + (1.0 - decay) * float(batch_threshold)
        self.updates += 1
        return self.value
