"""Problem registry: every task the pipeline can train and evaluate on.

A problem generates its data rows, a pretraining corpus for the tiny base model,
and scores completions. Rows are plain dicts (they go straight into parquet and
Hugging Face ``datasets``); every problem's rows have at least ``id`` (stable
str), ``prompt`` (the text generation continues) and ``completion`` (the gold
completion, for SFT). A problem is an entry of the one registry pattern
(:mod:`aligntrain.options`): an ``Options`` class implementing ``Problem``, its
typed options as fields (``problem.options`` in params.yaml: e.g. a hub problem's
data sources, the chat problem's reward model; ``problem:`` holds what every
problem shares), registered in ``PROBLEMS`` below.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from aligntrain.options import Registry
from aligntrain.problems.arith import ArithProblem
from aligntrain.problems.chat import ChatProblem
from aligntrain.problems.code import CodeProblem
from aligntrain.problems.code_contests import CodeContestsProblem
from aligntrain.problems.competition_math import MathProblem
from aligntrain.problems.gsm8k import Gsm8kProblem
from aligntrain.problems.hydro import HydroProblem
from aligntrain.problems.lean import LeanProblem
from aligntrain.problems.rewrite import RewriteProblem


class Grade(Protocol):
    """One graded completion (``aligntrain.grading.Verdict`` for verifiable problems)."""

    answer: str | None  # the extracted final answer text
    answer_class: Hashable | None  # what majority vote groups by; None = unparseable
    correct: bool
    reward: float


@runtime_checkable
class Problem(Protocol):
    """What the pipeline needs from a problem.

    ``binary_rewards``: rewards are 0/1 (pass@k and majority vote apply); False
    for continuous rewards (best-of-N / max@k). ``batched_rewards``: RL scores a
    batch at a time through ``grade_batch`` (a reward model). ``levels``: the difficulty
    levels ``generate_splits`` accepts. ``stop_text``: the text that ends a
    completion (the sampler may stop there; the tokenizer's EOS also does).
    A problem whose answer classes need the row sets the class variable
    ``answer_class_needs_row = True`` (``code``: a class is a program's behaviour on
    the row's tests, from ``grade``); params then refuse RL rules that need answers.
    """

    name: str
    binary_rewards: bool
    batched_rewards: bool
    levels: tuple[int, ...]
    stop_text: str

    def generate_splits(
        self, sizes: Mapping[str, int], levels: Sequence[int], seed: int
    ) -> dict[str, list[dict[str, Any]]]:
        """Rows per split ({"train": n, "validation": n, "test": n}), splits disjoint."""
        ...

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        """``n`` texts for pretraining the base model, disjoint from validation/test."""
        ...

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """The completion's reward against the row (1.0/0.0 when binary)."""
        ...

    def answer_class(self, completion: str) -> Hashable | None:
        """The class majority vote groups the completion in; None = unparseable."""
        ...

    def grade(self, completion: str, row: Mapping[str, Any]) -> Grade:
        """Answer, answer class, correctness and reward of one completion."""
        ...

    def grade_batch(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[Grade]:
        """``grade`` of each (completion, row) pair: the one reward interface (a reward model scores in batches)."""
        ...

    def gold_class(self, row: Mapping[str, Any]) -> Hashable | None:
        """The answer class of the row's gold answer (compared with ``answer_class``)."""
        ...

    def validate_row(self, row: Mapping[str, Any]) -> None:
        """Raise ValueError naming the row's id and the bad field if malformed."""
        ...

    def save_rows(self, rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
        """Validate and write rows to parquet atomically."""
        ...

    def load_rows(self, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """Read and validate rows written by ``save_rows``."""
        ...


PROBLEMS: Registry = Registry("problem")
PROBLEMS.register(ArithProblem)
PROBLEMS.register(HydroProblem)
PROBLEMS.register(MathProblem)
PROBLEMS.register(Gsm8kProblem)
PROBLEMS.register(ChatProblem)
PROBLEMS.register(CodeProblem)
PROBLEMS.register(CodeContestsProblem)
PROBLEMS.register(RewriteProblem)
PROBLEMS.register(LeanProblem)


def get_problem(name: str) -> Problem:
    """The problem registered as ``name`` (with its default options); ValueError listing the known ones."""
    return PROBLEMS.parse(name)
