"""Instruction following scored by a reward model ("chat"): UltraFeedback and hh-rlhf helpful prompts.

TEA's setting ("What should post-training optimize? A test-time scaling law
perspective", arXiv 2605.10716, §4.1 and App. B.2): a prompt, a free-text
response, a continuous reward from a sequence-classification reward model
(:mod:`aligntrain.rewards`), best-of-N (max@k) as the test-time strategy. There is
no gold answer: ``answer`` is "", majority vote does not apply, and a response is
``correct`` when its reward clears ``correct_above`` (so pass@k stays defined;
None: never).

Data sets (docs/data.md; :mod:`aligntrain.problems.hub` for sources and loading):

- ``UltraFeedback``: HuggingFaceH4/ultrafeedback_binarized, files
  ``data/<split>-*.parquet`` (splits train_prefs, test_prefs, train_sft, test_sft,
  train_gen, test_gen), columns ``prompt`` (str), ``prompt_id`` and ``chosen`` (the
  conversation as ``[{role, content}, ...]``, user first, the preferred reply last).
- ``hh-rlhf``: Anthropic/hh-rlhf, subsets (folders) such as ``helpful-base``, files
  ``<subset>/<split>.jsonl.gz`` (train, test), column ``chosen``: the dialogue as
  text, ``"\\n\\nHuman: ...\\n\\nAssistant: ..."`` turns.

Rows [choice]: single-turn. The prompt is the first user turn as the data set
writes it (an instruct model's chat template renders it: ``model.chat_template``),
the gold completion the first assistant reply of the ``chosen`` side (the warm-up's
SFT target), one level (1). A record whose first user turn or first reply is
empty is skipped (counted). Ids are ``chat-L1-<16 hex digits of the prompt>``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from aligntrain.options import Real
from aligntrain.problems import rows
from aligntrain.problems.hub import DataRowError, Format, HubProblem, SkipRow, Source, text_field
from aligntrain.rewards import RewardModel, RewardModelConfig

NAME = "chat"
LEVELS = (1,)
ULTRAFEEDBACK = Format("UltraFeedback", ("prompt", "chosen"), "data/{split}-*.parquet", key="prompt_id")
HH_RLHF = Format("hh-rlhf", ("chosen",), "{subset}/{split}.jsonl.gz")
#: pinned commits (taken from public code that reads them; check them on the hub before a paper run)
ULTRAFEEDBACK_DATASET, ULTRAFEEDBACK_REVISION = (
    "HuggingFaceH4/ultrafeedback_binarized",
    "3949bf5f8c17c394422ccfab0c31ea9c20bdeb85",
)
HH_RLHF_DATASET, HH_RLHF_REVISION = "Anthropic/hh-rlhf", "09be8c5bbc57cb3887f3a9732ad6aa7ec602a1fa"

_TURN = re.compile(r"\n\n(Human|Assistant): ")


@dataclass(frozen=True)
class ChatGrade:
    """A scored response: no answer or class (majority vote does not apply), the reward model's score."""

    answer: None
    answer_class: None
    correct: bool
    reward: float


def first_exchange_of_dialogue(text: str) -> tuple[str, str]:
    """(first Human turn, first Assistant reply) of an hh-rlhf dialogue; ValueError when it has none."""
    parts = _TURN.split(text)
    # parts: [before, role, content, role, content, ...]
    turns = list(zip(parts[1::2], parts[2::2], strict=True))
    if len(turns) < 2 or turns[0][0] != "Human" or turns[1][0] != "Assistant":
        raise ValueError("is not a dialogue starting '\\n\\nHuman: ... \\n\\nAssistant: ...'")
    return turns[0][1].strip(), turns[1][1].strip()


def first_exchange_of_messages(messages: Any, where: str) -> tuple[str, str]:
    """(first user turn, first assistant reply) of a ``[{role, content}, ...]`` conversation."""
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise DataRowError(f"{where}: field 'chosen' must be a list of {{role, content}} messages")
    roles = [m.get("role") for m in messages]
    if len(messages) < 2 or roles[:2] != ["user", "assistant"]:
        raise DataRowError(f"{where}: field 'chosen' must start with a user turn then an assistant turn, got {roles}")
    user, reply = messages[0].get("content"), messages[1].get("content")
    if not isinstance(user, str) or not isinstance(reply, str):
        raise DataRowError(f"{where}: field 'chosen' has a message whose content is not a str")
    return user.strip(), reply.strip()


class ChatProblem(HubProblem):
    """Prompts answered in free text, scored by a reward model (UltraFeedback, hh-rlhf helpful); continuous rewards."""

    name: ClassVar[str] = NAME
    levels: ClassVar[tuple[int, ...]] = LEVELS
    binary_rewards: ClassVar[bool] = False
    batched_rewards: ClassVar[bool] = True
    formats: ClassVar[dict[str, Format]] = {"UltraFeedback": ULTRAFEEDBACK, "hh-rlhf": HH_RLHF}
    default_format: ClassVar[str] = "UltraFeedback"

    train: Source = Field(
        Source(dataset=ULTRAFEEDBACK_DATASET, revision=ULTRAFEEDBACK_REVISION, split="train_prefs"),
        description="Source of the train split (default: UltraFeedback binarized train_prefs).",
    )
    test: Source = Field(
        Source(dataset=ULTRAFEEDBACK_DATASET, revision=ULTRAFEEDBACK_REVISION, split="test_prefs"),
        description="Source of the test split (default: UltraFeedback binarized test_prefs).",
    )
    reward_model: RewardModelConfig = Field(
        ..., description="The reward model that scores responses (aligntrain.rewards.RewardModelConfig)."
    )
    correct_above: Real | None = Field(
        None, description="A response is 'correct' when its reward exceeds this (pass@k); None: never."
    )

    _scorer: RewardModel | None = PrivateAttr(None)

    @property
    def scorer(self) -> RewardModel:
        """The reward model, loaded on first use (parsing the parameters loads nothing)."""
        if self._scorer is None:
            self._scorer = RewardModel(self.reward_model)
        return self._scorer

    def to_row(self, fmt: Format, record: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A record as a single-turn row (module docstring)."""
        if fmt is HH_RLHF:
            try:
                prompt, reply = first_exchange_of_dialogue(text_field(record, "chosen", where))
            except ValueError as err:
                raise DataRowError(f"{where}: field 'chosen' {err}") from None
        else:
            text_field(record, "prompt", where)
            prompt, reply = first_exchange_of_messages(record.get("chosen"), where)
        if not prompt or not reply:
            raise SkipRow("an empty first user turn or reply")
        return make_chat_row(prompt, reply)

    def ungradable_reason(self, row: Mapping[str, Any]) -> str | None:
        """None: a reward model scores any response; there is no gold answer to parse."""
        return None

    # ----------------------------------------------------------------- grading

    def grade_batch(self, completions: Sequence[str], rows_: Sequence[Mapping[str, Any]]) -> list[ChatGrade]:
        """The reward model's score of every (row's prompt, completion) pair, in batches; NaN = unscorable."""
        scores = self.scorer.score([r["prompt"] for r in rows_], list(completions))
        return [self._grade(score) for score in scores]

    def grade(self, completion: str, row: Mapping[str, Any]) -> ChatGrade:
        return self.grade_batch([completion], [row])[0]

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        return self.grade(completion, row).reward

    def _grade(self, score: float) -> ChatGrade:
        correct = self.correct_above is not None and math.isfinite(score) and score > self.correct_above
        return ChatGrade(None, None, correct, score)

    def answer_class(self, completion: str) -> None:
        """None: majority vote does not apply to free text."""
        return None

    def gold_class(self, row: Mapping[str, Any]) -> None:
        """None: there is no gold answer."""
        return None

    def validate_row(self, row: Mapping[str, Any]) -> None:
        """Fields and types, a non-empty prompt and completion, no answer, the id from the prompt."""
        bad = rows.check_row_shape(row, self.name, self.levels)
        if not row["prompt"].strip():
            raise bad("prompt", "is empty")
        if not row["completion"].strip():
            raise bad("completion", "is empty")
        if row["answer"] != "":
            raise bad("answer", "must be '' (a chat row has no gold answer)")
        if row["id"] != f"{NAME}-L1-{rows.text_digest(row['prompt'])}":
            raise bad("id", f"is not '{NAME}-L1-<hash of the prompt>'")


def make_chat_row(prompt: str, reply: str) -> dict[str, Any]:
    """A chat row: the prompt as it is, the reply as the gold completion, no answer."""
    return {
        "id": f"{NAME}-L1-{rows.text_digest(prompt)}",
        "level": 1,
        "prompt": prompt,
        "completion": reply,
        "answer": "",
    }
