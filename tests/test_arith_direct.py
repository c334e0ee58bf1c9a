"""arith's direct-answer form (``answer_format: direct``, DCO Table 1's setting) and the unchanged default rows.

The hashes were computed from the rows and corpora generated at commit ce52d74, before the
option existed: the default ("worked") rows and corpus must stay byte for byte what they were.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from aligntrain.config import parse_params
from aligntrain.problems import PROBLEMS, arith, get_problem
from aligntrain.problems.arith import ALPHABET, direct_completion, generate_splits, make_row, validate_row

# sha256 of json.dumps(rows, sort_keys=True) / json.dumps(corpus) at ce52d74 (before answer_format)
DEFAULT_STUDY_ROWS = "80d70c7d0b225f1238e7c876cf0d1d9747159ae0d5f21ed732359251c978d9c8"  # 4000/200/200, L1-5, seed 0
DEFAULT_STUDY_CORPUS = "eccf818c1b0af8f02c516f4d1becef971f73bbaa59f1e0a35d9dcc213704f48d"  # 20000 texts, seed 0
SMALL_ROWS = "7ec37d604b85c279a15655521407d6fd2cce4022c73a3470f352104b95bff6ad"  # 48/8/6, L1-2, seed 0
SMALL_CORPUS = "12283bcfab51e2ed2f8b0636a22f132f3da5cfaf9200a8a69e49fee32b1268ac"  # 500 texts, seed 3


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("problem", [get_problem("arith"), PROBLEMS.parse("arith", {"answer_format": "worked"})])
def test_default_rows_and_corpus_are_byte_identical_to_before_the_option(problem):
    assert problem.answer_format == "worked"
    small = problem.generate_splits({"train": 48, "validation": 8, "test": 6}, [1, 2], 0)
    assert _hash(small) == SMALL_ROWS
    assert hashlib.sha256(json.dumps(problem.pretrain_corpus(500, 3)).encode()).hexdigest() == SMALL_CORPUS


def test_the_default_studys_rows_and_corpus_are_unchanged():
    problem = get_problem("arith")
    splits = problem.generate_splits({"train": 4000, "validation": 200, "test": 200}, [1, 2, 3, 4, 5], 0)
    assert _hash(splits) == DEFAULT_STUDY_ROWS
    assert hashlib.sha256(json.dumps(problem.pretrain_corpus(20000, 0)).encode()).hexdigest() == DEFAULT_STUDY_CORPUS


def test_direct_rows_are_the_same_questions_with_the_answer_alone():
    direct = PROBLEMS.parse("arith", {"answer_format": "direct"})
    sizes = {"train": 60, "validation": 10, "test": 10}
    worked_rows = get_problem("arith").generate_splits(sizes, [1, 2, 3, 4, 5], 0)
    direct_rows = direct.generate_splits(sizes, [1, 2, 3, 4, 5], 0)
    for split in sizes:
        assert len(direct_rows[split]) == sizes[split]
        for w, d in zip(worked_rows[split], direct_rows[split], strict=True):
            assert {k: d[k] for k in ("id", "level", "prompt", "answer")} == {
                k: w[k] for k in ("id", "level", "prompt", "answer")
            }
            assert d["completion"] == f"#### {d['answer']}\n"
            assert w["completion"].endswith(d["completion"]) and w["completion"] != d["completion"]
            direct.validate_row(d)  # its own form validates ...
            with pytest.raises(ValueError, match="completion"):
                direct.validate_row(w)  # ... the other form does not, both ways
            with pytest.raises(ValueError, match="completion"):
                validate_row(d)


def test_direct_rows_grade_correctly():
    direct = PROBLEMS.parse("arith", {"answer_format": "direct"})
    rows = direct.generate_splits({"test": 25}, [1, 2, 3, 4, 5], 1)["test"]
    for row in rows:
        gold = direct.grade(row["completion"], row)
        assert gold.correct and gold.reward == 1.0 and gold.answer_class == direct.gold_class(row)
        assert direct.answer_class(row["completion"]) == direct.gold_class(row)
        wrong = direct.grade(f"#### {int(row['answer']) + 1}\n", row)
        assert not wrong.correct and wrong.reward == 0.0
        assert direct.reward("no answer\n", row) == 0.0
    row = make_row("47+83*6-29", 5, "direct")
    assert row["completion"] == direct_completion("47+83*6-29") == "#### 516\n"


def test_direct_corpus_is_the_same_draws_in_the_direct_form():
    worked = arith.pretrain_corpus(300, seed=2)
    direct = arith.pretrain_corpus(300, seed=2, answer_format="direct")
    assert len(direct) == 300
    for w, d in zip(worked, direct, strict=True):
        prompt = d[: d.index("A: ") + 3]
        assert w.startswith(prompt) and d == prompt + "#### " + w.rsplit("#### ", 1)[1]
        assert set(d) <= ALPHABET
    assert direct == PROBLEMS.parse("arith", {"answer_format": "direct"}).pretrain_corpus(300, 2)


def test_direct_rows_round_trip_through_parquet(tmp_path):
    direct = PROBLEMS.parse("arith", {"answer_format": "direct"})
    rows = generate_splits({"validation": 12}, [1, 3], 0, "direct")["validation"]
    direct.save_rows(rows, tmp_path / "v.parquet")
    assert direct.load_rows(tmp_path / "v.parquet") == rows
    with pytest.raises(ValueError, match="completion"):
        get_problem("arith").load_rows(tmp_path / "v.parquet")


def test_answer_format_is_a_typed_option():
    with pytest.raises(ValueError, match="answer_format"):
        PROBLEMS.parse("arith", {"answer_format": "chain"})
    with pytest.raises(ValueError, match="answer_format"):
        arith.pretrain_corpus(3, answer_format="chain")
    raw_params = {
        "problem": {"name": "arith", "options": {"answer_format": "direct"}},
        "pretrain": {},
        "warmup": {},
        "train": {},
        "variants": {"ce": {"objective": "ce"}},
        "diagnostics": {"oracle": {"variant": "ce"}},
    }
    assert parse_params(raw_params).problem.options == {"answer_format": "direct"}
