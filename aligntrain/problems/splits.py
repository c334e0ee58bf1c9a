"""How the generated problems (arith, hydro, code) cut their data into splits.

A prompt's split is fixed by a salted hash of its text alone (``partition_of``):
not by the seed, the level or the sizes asked for, so no prompt can land in two
splits of any study, and each problem's salt names its data set (a new salt
re-partitions every prompt). A split of ``n`` rows is drawn by rejection
(``unique_rows``): candidates are sampled per level from a stream of their own
and kept when they are new and hashed to the split asked for.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from aligntrain.validation import check_choices, check_int

SPLITS = ("train", "validation", "test")
SPLIT_FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}

Candidate = TypeVar("Candidate")


def partition_of(text: str, salt: bytes) -> str:
    """The split that owns ``text``: its salted BLAKE2b hash mapped to [0, 1) and cut
    at the cumulative ``SPLIT_FRACTIONS``."""
    digest = hashlib.blake2b(salt + text.encode("ascii"), digest_size=8).digest()
    position = int.from_bytes(digest, "big") / 2**64
    cumulative = 0.0
    for split in SPLITS:
        cumulative += SPLIT_FRACTIONS[split]
        if position < cumulative:
            return split
    return SPLITS[-1]


def check_sizes(sizes: Mapping[str, int]) -> None:
    """ValueError unless every key of ``sizes`` is a split name."""
    unknown = sorted(set(sizes) - set(SPLITS))
    if unknown:
        raise ValueError(f"sizes has unknown splits {unknown}; known: {SPLITS}")


def unique_rows(
    problem: str,
    split: str,
    n: int,
    levels: Sequence[int],
    seed: int,
    *,
    known_levels: Sequence[int],
    draw: Callable[[int, random.Random], Candidate],
    text_of: Callable[[Candidate], str],
    partition: Callable[[str], str],
    row_of: Callable[[Candidate, int, random.Random], dict[str, Any]],
    max_fruitless: int,
    noun: str,
) -> list[dict[str, Any]]:
    """``n`` rows of distinct prompts from the ``split`` partition, shuffled.

    Levels get equal shares (the first ``n % len(levels)`` levels one more). Level
    ``level`` draws candidates with ``draw(level, rng)`` from the stream seeded
    ``"<problem>:<seed>:<split>:<level>"``, so changing one level's share leaves the
    others' rows. A candidate is kept when its text (``text_of``) is new across all
    levels and ``partition(text) == split``; its row is ``row_of(candidate, level,
    rng)``, which may draw more from the same stream. After ``max_fruitless``
    rejections in a row the level's share of the partition counts as exhausted
    (ValueError naming the ``noun`` drawn). The rows are then shuffled by the stream
    ``"<problem>:<seed>:<split>:order"``. Deterministic in (split, n, levels, seed).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    n = check_int(n, "n", minimum=0)
    levels = check_choices(levels, "levels", known_levels)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()  # across levels: arith's "5+3*4" fits levels 2 and 4
    for index, level in enumerate(levels):
        count = n // len(levels) + (index < n % len(levels))
        rng = random.Random(f"{problem}:{seed}:{split}:{level}")
        taken = fruitless = 0
        while taken < count:
            candidate = draw(level, rng)
            text = text_of(candidate)
            if text in seen or partition(text) != split:
                fruitless += 1
                if fruitless > max_fruitless:
                    raise ValueError(
                        f"sizes[{split!r}] asks for {count} level-{level} {noun} but the {split} "
                        f"partition gave only {taken} unique ones; ask for fewer"
                    )
                continue
            fruitless = 0
            seen.add(text)
            rows.append(row_of(candidate, level, rng))
            taken += 1
    random.Random(f"{problem}:{seed}:{split}:order").shuffle(rows)
    return rows
