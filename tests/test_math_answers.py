"""The grader on hand-labelled MATH-style answer pairs (tests/data/math_answer_pairs.csv).

Each row holds a gold answer in MATH's form (the content of the last
``\\boxed{...}`` of a solution; golds from the champ-dataset package's CHAMP
problems, Mao et al., "CHAMP: A Competition-level Dataset for Fine-Grained
Analyses of LLMs' Mathematical Reasoning Capabilities", arXiv:2401.06961, and
hand-written golds of the forms MATH and MATH-500 use), a candidate answer,
and whether the two are equal, decided by hand from the mathematics (never by
running a grader). The grader must get every row right except the documented
known misses below (``KNOWN_MISSES``: equal answers it does not recognise as
equal; a wrong answer graded right is never allowed).
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from aligntrain.verify import canonical_answer, grade

PAIRS = Path(__file__).parent / "data" / "math_answer_pairs.csv"
COLUMNS = ["gold", "candidate", "equivalent", "kind", "note"]

# (gold, candidate) -> why the grader misses the equality (all are equal answers graded wrong).
KNOWN_MISSES: dict[tuple[str, str], str] = {}


def _rows() -> list[dict[str, str]]:
    with PAIRS.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == COLUMNS, f"{PAIRS.name}: columns {reader.fieldnames}, expected {COLUMNS}"
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        assert row["equivalent"] in ("true", "false"), f"{PAIRS.name} line {number}: equivalent={row['equivalent']!r}"
        assert row["gold"] and row["candidate"] and row["kind"] and row["note"], f"{PAIRS.name} line {number}: {row}"
    return rows


ROWS = _rows()


def test_the_table_is_large_balanced_and_without_duplicates():
    assert len(ROWS) >= 300
    labels = Counter(row["equivalent"] for row in ROWS)
    assert labels["true"] >= 100 and labels["false"] >= 100
    pairs = [(row["gold"], row["candidate"]) for row in ROWS]
    assert len(set(pairs)) == len(pairs)
    assert set(KNOWN_MISSES) <= {pair for pair, row in zip(pairs, ROWS, strict=True) if row["equivalent"] == "true"}


@pytest.mark.parametrize("row", ROWS, ids=[f"{row['kind']}:{row['gold']}|{row['candidate']}" for row in ROWS])
def test_every_gold_has_a_class_and_every_pair_is_graded_as_labelled(row):
    gold, candidate = row["gold"], row["candidate"]
    assert canonical_answer(gold, scope="math") is not None, f"gold {gold!r} has no class"
    verdict = grade(f"so the answer is\n#### {candidate}\n", gold, scope="math")
    expected = row["equivalent"] == "true"
    if (gold, candidate) in KNOWN_MISSES:
        assert expected and not verdict.correct, f"known miss {gold!r} vs {candidate!r} is now graded right"
        return
    assert verdict.correct == expected, (
        f"{row['kind']} ({row['note']}): gold {gold!r} -> {canonical_answer(gold, scope='math')!r}, "
        f"candidate {candidate!r} -> {verdict.answer_class!r}, labelled {row['equivalent']}"
    )


def test_accuracy_on_the_table():
    """Accuracy = rows graded as labelled; only the known misses may fail, and no false positive."""
    correct = false_positives = 0
    for row in ROWS:
        verdict = grade(f"#### {row['candidate']}", row["gold"], scope="math")
        expected = row["equivalent"] == "true"
        correct += verdict.correct == expected
        false_positives += verdict.correct and not expected
    assert false_positives == 0
    assert correct == len(ROWS) - len(KNOWN_MISSES)
