"""The grader's accuracy on a held-out table of MATH-style answer pairs (tests/data/math_answers_heldout.csv).

The table was written by hand for issue 23 after the new forms were implemented but before the
grader was run on any of its rows, and it is never edited to match the grader: a miss stays a
miss until the grader learns the form. (The older tests/data/math_answer_pairs.csv was written
beside the grader, so its accuracy is an upper bound.) docs/grading.md reports the number.
"""

from __future__ import annotations

import csv
from pathlib import Path

from aligntrain.grading import canonical_answer

TABLE = Path(__file__).parent / "data" / "math_answers_heldout.csv"
COLUMNS = ["gold", "candidate", "equivalent", "kind", "note"]

# Rows graded as labelled when the table was first measured (docs/grading.md): a floor, so that a
# change that loses a row fails here; raise it when the grader learns a missed form.
ACCURACY_FLOOR = 132


def _rows() -> list[dict[str, str]]:
    with TABLE.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def _graded_equal(gold: str, candidate: str) -> bool:
    gold_class = canonical_answer(gold, timeout_s=30.0, scope="math")
    return gold_class is not None and gold_class == canonical_answer(candidate, timeout_s=30.0, scope="math")


def test_the_held_out_table_is_well_formed():
    rows = _rows()
    assert len(rows) >= 80
    assert all(row["equivalent"] in ("true", "false") and row["gold"] and row["candidate"] for row in rows)
    assert len({(row["gold"], row["candidate"]) for row in rows}) == len(rows)
    assert sum(row["equivalent"] == "false" for row in rows) >= 30


def test_accuracy_on_the_held_out_table_is_at_least_the_floor():
    rows = _rows()
    misses = [row for row in rows if _graded_equal(row["gold"], row["candidate"]) != (row["equivalent"] == "true")]
    correct = len(rows) - len(misses)
    listing = "\n".join(
        f"  {row['kind']}: {row['gold']!r} vs {row['candidate']!r} (labelled {row['equivalent']})" for row in misses
    )
    assert correct >= ACCURACY_FLOOR, (
        f"{correct}/{len(rows)} graded as labelled, floor {ACCURACY_FLOOR}; misses:\n{listing}"
    )
    false_positives = [row for row in misses if row["equivalent"] == "false"]
    assert not false_positives, f"wrong answers graded right:\n{listing}"
