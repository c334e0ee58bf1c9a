"""Protein-style sequences scored by hydrophobicity ("hydro"): a continuous-reward problem.

The CAT paper's best-of-N experiments (CAT §3.3, App. L–M; docs/math.md §6)
on a character model small enough for CPU. A sequence is a string over the 20
amino acids ``ALPHABET``; its hydrophobicity h is the fraction of residues in
``HYDROPHOBIC`` = {A, I, L, M, F, W, Y, V} (``hydrophobicity``).

Three tasks, one per level [choice: levels, so evaluation reports each apart]:

=====  ==========  =========================================================
level  task        reward of the generated sequence (``valley_reward``,
                   ``complement_reward``; docs/math.md §6)
=====  ==========  =========================================================
1      valley      4·exp(−(h−0.35)²/0.05) + 12·exp(−(h−0.75)²/0.015)
                   − 2·1{0.45 < h < 0.60};  −5 if length < 10
2      complement  10·exp(−(h − (1−h_in))²/0.05)
                   − 2·1{|h − h_in| < 0.1 ∧ |h_in − 0.5| > 0.1};  −5 if length < 5
3      valley      4·exp(−(h−0.35)²/0.05) + 12·exp(−(h−j)²/0.015)
       family      − 2·1{0.45 < h < j − 0.15};  −5 if length < 10;
                   j from the prompt, on 0.65–0.90 (level 1 is j = 0.75)
=====  ==========  =========================================================

The valley task's reward ignores the prompt: a "trap" mode at h = 0.35 (R ≈ 4),
the penalised band 0.45 < h < 0.60, the "jackpot" near h = 0.75 (max ≈ 12.17).
The valley family (level 3) exists because level 1 is one task: its test prompts
differ only by their tag, so counting them as prompts counts one outcome many times.
A level-3 prompt names the jackpot's centre j (5 digits, j = digits/10⁵, uniform on
0.65000–0.90000), so its test prompts are distinct tasks drawn from one family, and
an interval over them is an interval over tasks; CAT's task is the member j = 0.75
(same trap, band and jackpot). Correct (reward > 8) means |h − j| < ≈ 0.078.
The complement task rewards h close to 1 − h_in, h_in the hydrophobicity of the
input sequence in the prompt, and penalises copying the input's h.

Text format [choice]; ``STOP_TEXT`` = "\\n" ends a completion::

    level 1  prompt "U:04271\\n"                     completion "SKDEGLTNRPHAQ…\\n"
    level 2  prompt "C:MKLVAILWGFTSDEKA…\\n"          completion "DEKRSTNQGPHC…\\n"
    level 3  prompt "V:74312\\n"  (j = 0.74312)       completion "LAVIWKDEFYM…\\n"

The valley prompt carries a 5-digit tag (00000–99999) that the reward ignores:
the pipeline keys rows by prompt and rejects a prompt found in two splits, so
every level-1 row needs its own prompt. "C" doubles as cysteine; the ":"
after it marks the task. The longest example (level 2) has 3 + 40 + 61 = 104
characters, within a 128-token context with room for longer generations.

Parsing completions (``parse_completion``) [choice]: only the text before the
first "\\n" counts (all of it when there is none, e.g. a sample cut at the
length cap). That line is a sequence only if every character is one of the 20
residue letters (upper case) and it has at most ``MAX_RESIDUES`` = 120 of them;
anything else — another character, "<unk>", a space, lower case, a runaway —
is unscorable and gets ``UNSCORABLE_REWARD`` = −5, the formulas' own floor for
a too-short sequence. Rejecting, not dropping, keeps junk characters from
being a free way to pad a sequence.

ProtGPT2's format (option ``sequence_format: protgpt2``) [choice]: ProtGPT2
(nferruz/ProtGPT2, the model of CAT Table 6) was trained on sequences laid out as
in FASTA files, a newline after every 60 residues, each
sequence ended by its end-of-text token ``END_OF_TEXT`` = "<|endoftext|>" (its
model card). Cut at the first newline, a model that keeps this habit could never
write more than 60 residues. In this format the newlines are layout inside the
sequence: the sample ends at END_OF_TEXT (or where the text ends: decoding drops
the token, and the sampler stops there), every "\\n" before it is removed, and
the rest must be residue letters, at most ``PROTGPT2_MAX_RESIDUES`` = 1000 of
them (more is a runaway; ProtGPT2's BPE tokens hold about 4 residues, so the
study's 160-token completions stop first). Removing newlines cannot pad a
sequence: h and the length count residues only. The rows are the same in both
formats: a gold sequence has at most 60 residues, one ProtGPT2 line, followed by
its newline. Prompts are unchanged.

Exact bands [choice]: h and h_in are fractions (``fractions.Fraction``), and the
penalty bands are decided in exact rational arithmetic, so a sequence on an
edge (h = 9/20 = 0.45) is outside the open band as the formula says; in binary
floats 0.3 − 0.2 < 0.1 would put |h − h_in| = 0.1 inside. The Gaussians are
evaluated in float64.

Correctness [choice]: ``correct`` = reward > ``CORRECT_REWARD`` = 8, for both
tasks, so pass@k stays meaningful. Valley: h in (0.6655, 0.8285), the jackpot
mode (the trap peaks at 4.0003). Complement: |h − (1−h_in)| < 0.1056 with no
copy penalty. Majority vote does not apply: ``answer_class`` and ``gold_class``
are always None.

Base law of sequences [choice] (``base_sequence``): length L uniform on 20–60;
a per-sequence hydrophobic rate p ~ Beta(14, 26) (mean 0.35, the trap); each
residue hydrophobic with probability p, uniform within its class (8
hydrophobic, 12 hydrophilic letters). Then h ~ Binomial(L, p)/L; measured on
``pretrain_corpus(20000, seed=0)``: mean 0.350, sd 0.107, 5/50/95 % quantiles
0.18/0.35/0.53, P(0.25 <= h < 0.45) = 65 %, P(0.45 < h < 0.6) = 16 %,
P(h > 0.6) = 1.2 %, P(h > 0.7) = 0.1 %, P(valley R > 8) = 0.26 %, mean valley
reward 3.12: the base model starts in the trap, and the jackpot is rare but
reachable by best-of-N. Every completion of the pretraining corpus and every
gold completion (both tasks) follows this law, independently of the prompt, so
neither pretraining nor the SFT warm-up teaches the high-reward modes; the
complement relation is left for RL to find (the paper's App. M SFT instead
used gold pairs satisfying it).

Input law of the complement task [choice] (``input_sequence``): length uniform
on 20–40, the number of hydrophobic residues uniform on ⌈L/10⌉…⌊9L/10⌋ at
uniformly random positions, so h_in spreads evenly over [0.1, 0.9] (targets
1 − h_in from hydrophilic to hydrophobic). Base-law sequences score a mean
complement reward of 4.24 on 2,000 test prompts, 26 % of them above 8 (the
inputs whose target 1 − h_in lies near the trap).

Splits disjoint by construction (as in ``arith``): each prompt belongs to one
partition ("train" 80 %, "validation" 10 %, "test" 10 %) by a salted BLAKE2b
hash of the prompt text (``partition_of``), independent of seed, level and
sizes. Splits hold unique prompts; the pretraining corpus uses train-partition
prompts only. Row ids hash the prompt: "hydro-L<level>-<16 hex digits>".
"""

from __future__ import annotations

import math
import numbers
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal

from pydantic import Field

from aligntrain.options import Options
from aligntrain.problems import rows, splits
from aligntrain.validation import check_choices, check_int, check_probability

NAME = "hydro"
SPLITS = splits.SPLITS
SPLIT_FRACTIONS = splits.SPLIT_FRACTIONS
STOP_TEXT = "\n"
ROW_FIELDS = rows.ROW_FIELDS

ALPHABET = "ACDEFGHIKLMNPQRSTVWY"
HYDROPHOBIC = "AFILMVWY"
HYDROPHILIC = "".join(residue for residue in ALPHABET if residue not in HYDROPHOBIC)
_RESIDUES = frozenset(ALPHABET)
_HYDROPHOBIC = frozenset(HYDROPHOBIC)

MAX_RESIDUES = 120  # longest scorable completion line
SEQUENCE_FORMATS = ("line", "protgpt2")  # how a completion spells a sequence (module docstring)
PROTGPT2_MAX_RESIDUES = 1000  # longest scorable sequence in ProtGPT2's format
END_OF_TEXT = "<|endoftext|>"  # ProtGPT2's end-of-text (EOS) token: a sample ends there
UNSCORABLE_REWARD = -5.0  # docs/math.md §6 floor for a too-short sequence; also for unparseable text
CORRECT_REWARD = 8.0  # correct <=> reward > CORRECT_REWARD

GOLD_LENGTHS = (20, 60)  # inclusive; base-law sequences (corpus and gold completions)
INPUT_LENGTHS = (20, 40)  # inclusive; complement-task input sequences
BASE_RATE_BETA = (14.0, 26.0)  # per-sequence hydrophobic rate p ~ Beta(a, b)
TAG_DIGITS = 5  # valley prompt tag 00000-99999
VALLEY_JACKPOT = Fraction(75, 100)  # CAT's jackpot centre (level 1)
FAMILY_JACKPOTS = (Fraction(65, 100), Fraction(90, 100))  # level 3: j uniform on this grid of 10^-5 steps (inclusive)
FAMILY_SCALE = 10**5  # a level-3 prompt writes j·10^5 in 5 digits

# Salt of the split hash; changing it re-partitions every prompt (a new dataset).
_SPLIT_SALT = b"aligntrain/hydro/split/v1:"
# Rejection sampling gives up after this many draws in a row without a new prompt of the partition.
_MAX_FRUITLESS_DRAWS = 50_000


HydroRow = dict[str, Any]
"""One example, keys ``ROW_FIELDS``: id, level (int), prompt, completion (gold
sequence + STOP_TEXT), answer (the gold sequence, as ``parse_completion`` reads it)."""


# ---------------------------------------------------------------------------
# Reward functions (docs/math.md §6)


def hydrophobicity(sequence: str) -> Fraction:
    """h: the fraction of residues of ``sequence`` in {A, I, L, M, F, W, Y, V} (exact)."""
    _check_sequence(sequence)
    if not sequence:
        raise ValueError("sequence must be non-empty to have a hydrophobicity")
    return Fraction(sum(residue in _HYDROPHOBIC for residue in sequence), len(sequence))


def valley_reward(sequence: str, jackpot: numbers.Real = VALLEY_JACKPOT) -> float:
    """ "Valley of death" reward (docs/math.md §6; CAT App. L, eq. 104), its jackpot at j.

    R = 4·exp(−(h−0.35)²/0.05) + 12·exp(−(h−j)²/0.015) − 2·1{0.45 < h < j − 0.15};
    R = −5 if the length is below 10. CAT's task is j = 0.75 (level 1, the band
    0.45 < h < 0.60); level 3 reads j from its prompt. The band is decided
    exactly (module docstring): pass j as a Fraction.
    """
    _check_sequence(sequence)
    check_probability(jackpot, "jackpot")
    jackpot = Fraction(jackpot)
    if len(sequence) < 10:
        return UNSCORABLE_REWARD
    h = hydrophobicity(sequence)
    trap = 4.0 * math.exp(-(float(h - Fraction(35, 100)) ** 2) / 0.05)
    peak = 12.0 * math.exp(-(float(h - jackpot) ** 2) / 0.015)
    in_valley = Fraction(45, 100) < h < jackpot - Fraction(15, 100)
    return trap + peak - 2.0 * in_valley


def complement_reward(sequence: str, h_in: numbers.Real) -> float:
    """Conditional complement reward (docs/math.md §6; CAT App. M, eq. 107).

    R = 10·exp(−(h − (1−h_in))²/0.05) − 2·1{|h − h_in| < 0.1 ∧ |h_in − 0.5| > 0.1};
    R = −5 if the length is below 5. ``h_in`` in [0, 1] is taken exactly
    (a float as its binary value: pass the input's ``hydrophobicity``, a
    Fraction, for exact band edges).
    """
    _check_sequence(sequence)
    check_probability(h_in, "h_in")  # compared exactly; h_in itself (a Fraction stays one) is used below
    if len(sequence) < 5:
        return UNSCORABLE_REWARD
    h, h_in = hydrophobicity(sequence), Fraction(h_in)
    ridge = 10.0 * math.exp(-(float(h - (1 - h_in)) ** 2) / 0.05)
    copies_input = abs(h - h_in) < Fraction(1, 10) and abs(h_in - Fraction(1, 2)) > Fraction(1, 10)
    return ridge - 2.0 * copies_input


def parse_completion(completion: str, sequence_format: str = "line") -> str | None:
    """The residue sequence a completion spells, or None when unscorable (module docstring).

    ``"line"``: the text before the first STOP_TEXT (all of it if none) must be
    0–``MAX_RESIDUES`` residue letters; reads at most ``MAX_RESIDUES`` + 1 characters.
    ``"protgpt2"``: the text before the first END_OF_TEXT (all of it if none), its
    newlines removed, must be 0–``PROTGPT2_MAX_RESIDUES`` residue letters.
    """
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a str, got {type(completion).__name__}")
    if sequence_format == "protgpt2":
        sequence = completion.split(END_OF_TEXT, 1)[0].replace("\n", "")
        if len(sequence) > PROTGPT2_MAX_RESIDUES or not _RESIDUES.issuperset(sequence):
            return None
        return sequence
    if sequence_format != "line":
        raise ValueError(f"sequence_format must be one of {SEQUENCE_FORMATS}, got {sequence_format!r}")
    line = completion[: MAX_RESIDUES + 1].split(STOP_TEXT, 1)[0]
    if len(line) > MAX_RESIDUES or not _RESIDUES.issuperset(line):
        return None
    return line


# ---------------------------------------------------------------------------
# Tasks: prompt form, prompt sampling and scoring per level


def base_sequence(rng: random.Random) -> str:
    """A base-law sequence (module docstring): L ~ U{20..60}, p ~ Beta(14, 26), residues i.i.d. given p."""
    length = rng.randint(*GOLD_LENGTHS)
    rate = rng.betavariate(*BASE_RATE_BETA)
    return "".join(rng.choice(HYDROPHOBIC if rng.random() < rate else HYDROPHILIC) for _ in range(length))


def input_sequence(rng: random.Random) -> str:
    """A complement-task input: L ~ U{20..40}, hydrophobic count ~ U{⌈L/10⌉..⌊9L/10⌋}, random positions."""
    length = rng.randint(*INPUT_LENGTHS)
    count = rng.randint(-(-length // 10), 9 * length // 10)
    hydrophobic_at = set(rng.sample(range(length), count))
    return "".join(rng.choice(HYDROPHOBIC if i in hydrophobic_at else HYDROPHILIC) for i in range(length))


@dataclass(frozen=True)
class Task:
    """One level: its prompt's form, how prompts are drawn, and how a sequence is scored."""

    name: str
    prompt_form: re.Pattern[str]  # fullmatch of a well-formed prompt
    sample_prompt: Callable[[random.Random], str]
    score: Callable[[str, re.Match[str]], float]  # (sequence, prompt match) -> reward


_RESIDUE_CLASS = f"[{ALPHABET}]"
TASKS: dict[int, Task] = {
    1: Task(
        name="valley",
        prompt_form=re.compile(rf"U:[0-9]{{{TAG_DIGITS}}}\n"),
        sample_prompt=lambda rng: f"U:{rng.randrange(10**TAG_DIGITS):0{TAG_DIGITS}d}\n",
        score=lambda sequence, prompt: valley_reward(sequence),
    ),
    2: Task(
        name="complement",
        prompt_form=re.compile(rf"C:(?P<input>{_RESIDUE_CLASS}{{{INPUT_LENGTHS[0]},{INPUT_LENGTHS[1]}}})\n"),
        sample_prompt=lambda rng: f"C:{input_sequence(rng)}\n",
        score=lambda sequence, prompt: complement_reward(sequence, hydrophobicity(prompt["input"])),
    ),
    3: Task(
        name="valley_family",
        # j·10^5 in 65000..90000, exactly (FAMILY_JACKPOTS)
        prompt_form=re.compile(r"V:(?P<jackpot>6[5-9][0-9]{3}|[78][0-9]{4}|90000)\n"),
        sample_prompt=lambda rng: f"V:{rng.randint(*(int(j * FAMILY_SCALE) for j in FAMILY_JACKPOTS))}\n",
        score=lambda sequence, prompt: valley_reward(sequence, Fraction(int(prompt["jackpot"]), FAMILY_SCALE)),
    ),
}
"""Level -> task (module docstring table)."""
LEVELS = tuple(sorted(TASKS))


def level_of_prompt(prompt: str) -> tuple[int, re.Match[str]] | None:
    """The level whose prompt form ``prompt`` has, with the match; None if no form fits."""
    for level, task in TASKS.items():
        match = task.prompt_form.fullmatch(prompt)
        if match is not None:
            return level, match
    return None


def score_completion(completion: str, prompt: str, sequence_format: str = "line") -> tuple[str | None, float]:
    """(parsed sequence or None, reward) of a completion of ``prompt`` (a well-formed prompt)."""
    found = level_of_prompt(prompt) if isinstance(prompt, str) else None
    if found is None:
        raise ValueError(f"prompt must have the form of a hydro task prompt, got {prompt!r}")
    sequence = parse_completion(completion, sequence_format)
    if sequence is None:
        return None, UNSCORABLE_REWARD
    level, match = found
    return sequence, TASKS[level].score(sequence, match)


def row_id(prompt: str, level: int) -> str:
    """Stable id from the prompt text: "hydro-L<level>-<16 hex digits>"."""
    digest = rows.text_digest(prompt)
    return f"{NAME}-L{level}-{digest}"


def make_row(prompt: str, level: int, sequence: str) -> HydroRow:
    """The row of one prompt with gold sequence ``sequence``."""
    return {
        "id": row_id(prompt, level),
        "level": level,
        "prompt": prompt,
        "completion": sequence + STOP_TEXT,
        "answer": sequence,
    }


def partition_of(prompt: str) -> str:
    """The split that owns ``prompt``: a salted hash of the text alone (``splits.partition_of``)."""
    return splits.partition_of(prompt, _SPLIT_SALT)


# ---------------------------------------------------------------------------
# Splits and pretraining corpus


def generate_split(split: str, n: int, levels: Sequence[int] = LEVELS, seed: int = 0) -> list[HydroRow]:
    """``n`` rows with unique prompts of the ``split`` partition, shuffled.

    Levels get equal shares (the first ``n % len(levels)`` levels one more);
    gold sequences follow the base law. Deterministic in (split, n, levels,
    seed); each (split, level) has its own random stream.
    """
    return splits.unique_rows(
        NAME,
        split,
        n,
        levels,
        seed,
        known_levels=LEVELS,
        draw=lambda level, rng: TASKS[level].sample_prompt(rng),
        text_of=str,
        partition=partition_of,
        row_of=lambda prompt, level, rng: make_row(prompt, level, base_sequence(rng)),
        max_fruitless=_MAX_FRUITLESS_DRAWS,
        noun="prompts",
    )


def generate_splits(
    sizes: Mapping[str, int], levels: Sequence[int] = LEVELS, seed: int = 0
) -> dict[str, list[HydroRow]]:
    """One ``generate_split`` per entry of ``sizes`` (e.g. {"train": 4000, "test": 200})."""
    splits.check_sizes(sizes)
    return {split: generate_split(split, n, levels, seed) for split, n in sizes.items()}


def pretrain_corpus(n: int, seed: int = 0, levels: Sequence[int] = LEVELS) -> list[str]:
    """``n`` texts (prompt + base-law sequence + STOP_TEXT), prompts from the train partition.

    Each text's level is uniform over ``levels``; repeats allowed. The sequence
    ignores the prompt (module docstring: the base model starts in the trap).
    """
    n = check_int(n, "n", minimum=0)
    levels = check_choices(levels, "levels", LEVELS)
    rng = random.Random(f"{NAME}:pretrain:{seed}")
    texts: list[str] = []
    while len(texts) < n:
        prompt = TASKS[rng.choice(levels)].sample_prompt(rng)
        if partition_of(prompt) == "train":
            texts.append(prompt + base_sequence(rng) + STOP_TEXT)
    return texts


# ---------------------------------------------------------------------------
# Validation and parquet I/O


def validate_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

    Checks the fields and types, that the prompt has its level's form, that the
    id is the one the prompt determines, that the completion is a gold-length
    sequence plus STOP_TEXT and that the answer is that sequence.
    """
    bad = rows.check_row_shape(row, NAME, TASKS)
    identifier, level = row["id"], row["level"]
    found = level_of_prompt(row["prompt"])
    if found is None:
        forms = {task.name: task.prompt_form.pattern for task in TASKS.values()}
        raise bad("prompt", f"{row['prompt']!r} has none of the prompt forms {forms}")
    if found[0] != level:
        raise bad("level", f"is {level}, but the prompt has the form of level {found[0]} ({TASKS[found[0]].name})")
    expected_id = row_id(row["prompt"], int(level))
    if identifier != expected_id:
        raise bad("id", f"is {identifier!r}, the prompt determines {expected_id!r}")
    completion = row["completion"]
    sequence = completion[: -len(STOP_TEXT)]
    low, high = GOLD_LENGTHS
    if not completion.endswith(STOP_TEXT) or not _RESIDUES.issuperset(sequence) or not low <= len(sequence) <= high:
        raise bad("completion", f"must be {low}-{high} residues of {ALPHABET!r} then {STOP_TEXT!r}, got {completion!r}")
    if row["answer"] != sequence:
        raise bad("answer", f"is {row['answer']!r}, the completion spells {sequence!r}")


def save_rows(rows_: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Validate every row, then write parquet atomically."""
    rows.save_rows(rows_, path, validate_row)


def load_rows(path: str | os.PathLike[str]) -> list[HydroRow]:
    """Read rows written by ``save_rows``; every row is validated (ValueError names its id)."""
    return rows.load_rows(path, validate_row)


# ---------------------------------------------------------------------------
# Problem object (what aligntrain.problems.get_problem("hydro") returns)


@dataclass(frozen=True)
class HydroGrade:
    """One graded completion: the parsed sequence (None: unscorable), no answer
    class (majority vote does not apply), correct = reward > CORRECT_REWARD."""

    answer: str | None
    answer_class: None
    correct: bool
    reward: float


class HydroProblem(rows.RowStore, Options):
    """CAT's protein-style task: amino-acid sequences scored by hydrophobicity, continuous rewards (best-of-N)."""

    name: ClassVar[str] = NAME
    binary_rewards: ClassVar[bool] = False
    levels: ClassVar[tuple[int, ...]] = LEVELS

    sequence_format: Literal["line", "protgpt2"] = Field(
        "line",
        description="How a completion spells a sequence. line: one line, ended by its first newline (the embedded "
        "character model). protgpt2: ProtGPT2's layout, a newline every 60 residues, ended by the end-of-text "
        "token; the newlines are removed before scoring.",
    )

    @property
    def stop_text(self) -> str:
        """The text that ends a completion: "\\n" in the line format; none in ProtGPT2's (EOS ends it)."""
        return STOP_TEXT if self.sequence_format == "line" else ""

    def generate_splits(self, sizes: Mapping[str, int], levels: Sequence[int], seed: int) -> dict[str, list[HydroRow]]:
        return generate_splits(sizes, levels, seed)

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        return pretrain_corpus(n, seed)

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """The task's reward of the completion (−5 when unscorable); the row's prompt picks the task."""
        return self.grade(completion, row).reward

    def grade(self, completion: str, row: Mapping[str, Any]) -> HydroGrade:
        """Parsed sequence, no answer class, correct (reward > CORRECT_REWARD) and reward."""
        try:
            sequence, reward = score_completion(completion, row["prompt"], self.sequence_format)
        except (KeyError, ValueError) as error:
            raise ValueError(f"row {row.get('id')!r}: {error}") from error
        return HydroGrade(answer=sequence, answer_class=None, correct=reward > CORRECT_REWARD, reward=reward)

    def answer_class(self, completion: str) -> None:
        """None: continuous rewards, majority vote does not apply."""
        return None

    def gold_class(self, row: Mapping[str, Any]) -> None:
        """None: there is no gold answer class (majority vote does not apply)."""
        return None

    def validate_row(self, row: Mapping[str, Any]) -> None:
        validate_row(row)


# ---------------------------------------------------------------------------
# Helpers


def _check_sequence(sequence: str) -> None:
    if not isinstance(sequence, str) or not _RESIDUES.issuperset(sequence):
        raise ValueError(f"sequence must be a str of the residues {ALPHABET!r}, got {sequence!r:.80}")
