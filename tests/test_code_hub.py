"""The contest-code hub problem (code_contests: deepmind/code_contests and BAAI/TACO) on stand-ins in the hub schemas.

No hub access: aligntrain.standins writes CodeContests records (parquet with the hub's features:
class labels for source, difficulty and solutions.language) and TACO records (17 string columns,
JSON text in solutions and input_output). They are read as local ``parquet`` sources and as a
Hugging Face cache snapshot at the pinned revisions, and graded in the real sandbox, the
``code`` problem's path. Also: the tang_codecontests study's parameters (Tang et al. App. A.4).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import datasets
import pytest
import yaml

from aligntrain.config import parse_params
from aligntrain.problems import PROBLEMS, Problem, code, get_problem
from aligntrain.problems.code_contests import (
    CODE_CONTESTS_REVISION,
    INSTRUCTION,
    TACO_REVISION,
    extract_fenced_program,
    gold_completion,
)
from aligntrain.problems.hub import DataRowError, HubProblem
from aligntrain.standins import (
    code_contests_features,
    code_contests_records,
    contest_problem,
    overlay,
    taco_records,
    write_contest_standins,
)

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "pipelines" / "tang_codecontests"


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """CodeContests train 8 (the last without a Python 3 solution), valid 4, test 4; TACO train 8, test 4 + 1."""
    return write_contest_standins(tmp_path_factory.mktemp("contests"), train=8, valid=4, test=4)


def _local(standins, **extra):
    return PROBLEMS.parse(
        "code_contests",
        {
            "train": {"parquet": [str(standins["code_contests_train"])]},
            "validation": {"parquet": [str(standins["code_contests_valid"])]},
            "test": {"parquet": [str(standins["code_contests_test"])]},
            **extra,
        },
    )


def _taco(standins, **extra):
    return PROBLEMS.parse(
        "code_contests",
        {
            "train": {"parquet": [str(standins["taco_train"])], "format": "TACO"},
            "validation": None,
            "test": {"parquet": [str(standins["taco_test"])], "format": "TACO"},
            **extra,
        },
    )


def _write(path: Path, records, features=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(records, features=features).to_parquet(path)
    return path


# --------------------------------------------------------------------------- registry and sources


def test_registered_with_pinned_hub_sources_and_the_code_problems_grading():
    problem = get_problem("code_contests")
    assert isinstance(problem, Problem) and isinstance(problem, code.SandboxGraded)
    sources = problem.sources()
    assert [(s.dataset, s.revision, s.split) for s in sources.values()] == [
        ("deepmind/code_contests", CODE_CONTESTS_REVISION, "train"),
        ("deepmind/code_contests", CODE_CONTESTS_REVISION, "valid"),
        ("deepmind/code_contests", CODE_CONTESTS_REVISION, "test"),
    ]
    assert problem.binary_rewards and problem.batched_rewards and problem.answer_class_needs_row
    assert problem.stop_text == "" and problem.levels == (0, 1, 2, 3, 4, 5)
    assert not PROBLEMS.parse("code_contests", {"reward_mode": "fraction"}).binary_rewards
    taco = PROBLEMS.parse(
        "code_contests",
        {
            "test": {
                "dataset": "BAAI/TACO",
                "revision": TACO_REVISION,
                "subsets": ["ALL"],
                "split": "test",
                "format": "TACO",
            }
        },
    )
    assert taco.test.subsets == ("ALL",)
    with pytest.raises(ValueError, match="needs `subsets`"):  # TACO's files lie under its config ALL/
        PROBLEMS.parse(
            "code_contests",
            {"test": {"dataset": "BAAI/TACO", "revision": TACO_REVISION, "split": "test", "format": "TACO"}},
        )


# --------------------------------------------------------------------------- rows from the hub schemas


def test_code_contests_records_become_rows_with_every_test_and_the_python3_gold(standins, caplog):
    problem = _local(standins)
    with caplog.at_level(logging.WARNING):
        splits = problem.load_splits()
    # the last train record has only a Python 2 solution: no gold, dropped from train (counted)
    assert {split: len(rows) for split, rows in splits.items()} == {"train": 7, "validation": 4, "test": 4}
    assert "dropped 1 of 8 problems: no Python 3 solution: 1\n" in caplog.text
    records = {r["description"].strip(): r for r in code_contests_records(0, 8)}
    for row in splits["train"]:
        problem.validate_row(row)
        statement = row["prompt"].removesuffix(f"\n\n{INSTRUCTION}\n")
        record = records[statement]
        assert row["id"].startswith("code_contests-cc-L")
        # the Python 3 solution (language 3), not the Python 2 one listed first
        assert record["solutions"]["language"] == [1, 3]
        assert row["completion"] == f"```python\n{record['solutions']['solution'][1].strip()}\n```\n"
        tests = code.tests_of(row)
        expected = [
            (i, o)
            for field in ("public_tests", "private_tests", "generated_tests")
            for i, o in zip(record[field]["input"], record[field]["output"], strict=True)
        ]
        assert tests == expected and len(tests) == 6  # public, private, generated, in that order


def test_levels_from_codeforces_ratings_and_difficulty_labels(tmp_path):
    base = code_contests_records(0, 1)[0]
    cases = [  # (source, difficulty label, cf_rating) -> level
        ((2, 8, 800), 1), ((2, 8, 1500), 2), ((2, 9, 1900), 3), ((2, 10, 2400), 4), ((2, 11, 3000), 5),
        ((3, 1, 0), 1), ((3, 5, 0), 5), ((1, 6, 0), 0), ((2, 7, 0), 0), ((5, 0, 0), 0),
    ]  # fmt: skip
    records = []
    for index, ((source, difficulty, rating), _) in enumerate(cases):
        records.append({**base, "description": f"{base['description']} ({index})", "source": source,
                        "difficulty": difficulty, "cf_rating": rating})  # fmt: skip
    path = _write(tmp_path / "test.parquet", records, code_contests_features())
    rows = _local({"code_contests_train": path, "code_contests_valid": path, "code_contests_test": path})
    loaded = rows.load_splits(["test"])["test"]
    assert [row["level"] for row in loaded] == [level for _, level in cases]


def test_taco_records_become_rows_and_call_based_problems_are_skipped(standins, caplog):
    problem = _taco(standins)
    with caplog.at_level(logging.WARNING):
        splits = problem.load_splits()
    assert len(splits["test"]) == 4, "the call-based record (fn_name) is not a row"
    assert "skipped 1 rows: TACO call-based problem (fn_name)" in caplog.text
    assert len(splits["train"]) + len(splits["validation"]) == 8
    # EASY 1, MEDIUM 2, MEDIUM_HARD 3, HARD 4, VERY_HARD 5, UNKNOWN_DIFFICULTY 0 (Tang's easy / hard: [1] / [4])
    difficulty_level = {"EASY": 1, "MEDIUM": 2, "MEDIUM_HARD": 3, "HARD": 4, "VERY_HARD": 5, "UNKNOWN_DIFFICULTY": 0}
    records = {r["question"].strip(): r for r in taco_records(24, 4)}  # after 20 CodeContests and 8 TACO train
    for row in splits["test"]:
        problem.validate_row(row)
        record = records[row["prompt"].removesuffix(f"\n\n{INSTRUCTION}\n")]
        assert row["level"] == difficulty_level[record["difficulty"]]
        io = json.loads(record["input_output"])
        assert code.tests_of(row) == list(zip(io["inputs"], io["outputs"], strict=True))
        assert row["id"].startswith("code_contests-taco-")


def test_taco_tests_given_as_lists_of_lines_are_joined(tmp_path):
    record = taco_records(0, 1)[0]
    record["input_output"] = json.dumps({"inputs": [["1 2"]], "outputs": [["3", "4"]]})
    path = _write(tmp_path / "ALL" / "test.parquet", [record])
    row = _taco({"taco_train": path, "taco_test": path}).load_splits(["test"])["test"][0]
    assert code.tests_of(row) == [("1 2", "3\n4")]


def test_test_caps_deduplication_and_the_train_minimum(standins, tmp_path, caplog):
    capped = _local(standins, max_generated_tests=1).load_splits(["test"])["test"]
    assert all(len(code.tests_of(row)) == 4 for row in capped)  # 1 public + 2 private + 1 generated
    assert all(len(code.tests_of(row)) == 2 for row in _local(standins, max_tests=2).load_splits(["test"])["test"])
    with caplog.at_level(logging.WARNING):
        train = _local(standins, min_train_tests=7).load_splits(["train"])["train"]
    assert train == [] and "dropped 8 of 8 problems: no Python 3 solution: 1; fewer than 7 tests: 7" in caplog.text
    # test keeps every problem: the 6-test minimum (App. A.4) is a train filter
    assert len(_local(standins, min_train_tests=7).load_splits(["test"])["test"]) == 4
    record = code_contests_records(0, 1)[0]
    record["generated_tests"] = {
        "input": record["public_tests"]["input"] * 2,
        "output": record["public_tests"]["output"] * 2,
    }
    path = _write(tmp_path / "dup.parquet", [record], code_contests_features())
    row = _local({"code_contests_train": path, "code_contests_valid": path, "code_contests_test": path})
    assert len(code.tests_of(row.load_splits(["test"])["test"][0])) == 3, "a repeated test runs once"


ALL_LEVELS = [0, 1, 2, 3, 4, 5]


def test_a_train_size_beyond_the_qualifying_problems_names_the_key_count_files_and_reasons(standins):
    """The issue: tang_codecontests' sizes were not checked against the problems with a Python 3 gold and
    enough tests. One error names each short split's params key, size, count, files and exclusions."""
    problem = _local(standins, min_train_tests=5)
    with pytest.raises(ValueError) as err:
        problem.generate_splits({"train": 8, "validation": 4, "test": 4}, levels=ALL_LEVELS, seed=0)
    message = str(err.value)
    assert message.startswith("code_contests: too few problems qualify for the split sizes asked for")
    assert (
        f"  problem.train_size = 8, but 7 of the 8 problems of split train qualify (local files "
        f"['{standins['code_contests_train']}']); excluded: no Python 3 solution: 1; fewer than 5 tests: 0; "
        f"not at levels {ALL_LEVELS}: 0. Ask for at most 7."
    ) in message.splitlines()
    assert "validation_size" not in message and "test_size" not in message, "only the short split is named"
    # the levels asked for are the last filter; every reason is counted, 0 included
    kept = _local(standins, min_train_tests=5).load_splits(["train"])["train"]
    at_1 = sum(row["level"] == 1 for row in kept)
    with pytest.raises(ValueError) as err:
        problem.generate_splits({"train": at_1 + 1}, levels=[1], seed=0)
    assert f"problem.train_size = {at_1 + 1}, but {at_1} of the 8 problems of split train qualify" in str(err.value)
    assert f"excluded: no Python 3 solution: 1; fewer than 5 tests: 0; not at levels [1]: {7 - at_1}." in str(err.value)
    with pytest.raises(ValueError, match=re.escape("0 of the 8 problems of split train qualify")) as err:
        _local(standins, min_train_tests=7).generate_splits({"train": 1}, levels=ALL_LEVELS, seed=0)
    assert "excluded: no Python 3 solution: 1; fewer than 7 tests: 7; not at levels" in str(err.value)


def test_test_and_validation_sizes_are_checked_before_train_is_read(standins, tmp_path):
    unreadable = tmp_path / "train.parquet"
    unreadable.write_bytes(b"not parquet")  # reading it would fail: the sizes must fail first
    problem = _local({**standins, "code_contests_train": unreadable})
    with pytest.raises(ValueError) as err:
        problem.generate_splits({"train": 1, "validation": 5, "test": 9}, levels=ALL_LEVELS, seed=0)
    lines = str(err.value).splitlines()
    assert (
        f"  problem.validation_size = 5, but 4 of the 4 problems of split validation qualify (local files "
        f"['{standins['code_contests_valid']}']); excluded: no Python 3 solution: 0; not at levels {ALL_LEVELS}: 0. "
        "Ask for at most 4."
    ) in lines
    assert (
        f"  problem.test_size = 9, but 4 of the 4 problems of split test qualify (local files "
        f"['{standins['code_contests_test']}']); excluded: not at levels {ALL_LEVELS}: 0. Ask for at most 4."
    ) in lines
    assert not isinstance(err.value, DataRowError) and "train_size" not in str(err.value)
    with pytest.raises(DataRowError, match="cannot be read"):  # sizes that fit: train is read
        problem.generate_splits({"train": 1, "validation": 4, "test": 4}, levels=ALL_LEVELS, seed=0)


def test_a_validation_carved_from_train_is_named_so(standins):
    problem = _taco(standins)  # no validation source: carved from TACO train
    carved = len(problem.load_splits(["validation"])["validation"])
    with pytest.raises(ValueError) as err:
        problem.generate_splits({"validation": carved + 1, "test": 4}, levels=ALL_LEVELS, seed=0)
    assert (
        f"  problem.validation_size = {carved + 1}, but {carved} of the {carved} problems of split validation "
        f"qualify (carved from the train source: local files ['{standins['taco_train']}']); excluded: "
        f"no Python 3 solution: 0; not at levels {ALL_LEVELS}: 0. Ask for at most {carved}."
    ) in str(err.value).splitlines()


def test_sizes_that_fit_draw_the_rows_hub_problem_draws(standins):
    problem = _local(standins, min_train_tests=5)
    sizes = {"train": 7, "validation": 3, "test": 4}
    drawn = problem.generate_splits(sizes, levels=ALL_LEVELS, seed=3)
    assert {split: len(rows) for split, rows in drawn.items()} == sizes
    assert drawn == HubProblem.generate_splits(problem, sizes, levels=ALL_LEVELS, seed=3)
    assert problem.generate_splits({"train": 0}, levels=[1], seed=0) == {"train": []}


def test_through_the_hub_cache_at_the_pinned_revisions(standins, tmp_path, monkeypatch):
    """The default sources: deepmind/code_contests data/<split>-*.parquet; TACO ALL/<split>-*.parquet."""
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    snapshot = cache / "datasets--deepmind--code_contests" / "snapshots" / CODE_CONTESTS_REVISION / "data"
    snapshot.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        shutil.copy(standins[f"code_contests_{split}"], snapshot / f"{split}-00000-of-00001-0123456789abcdef.parquet")
    taco = cache / "datasets--BAAI--TACO" / "snapshots" / TACO_REVISION / "ALL"
    taco.mkdir(parents=True)
    shutil.copy(standins["taco_test"], taco / "test-00000-of-00001.parquet")
    problem = get_problem("code_contests")
    assert {split: len(rows) for split, rows in problem.load_splits().items()} == {
        "train": 7,
        "validation": 4,
        "test": 4,
    }
    on_taco = PROBLEMS.parse(
        "code_contests",
        {
            "test": {
                "dataset": "BAAI/TACO",
                "revision": TACO_REVISION,
                "subsets": ["ALL"],
                "split": "test",
                "format": "TACO",
            }
        },
    )
    assert len(on_taco.load_splits(["test"])["test"]) == 4
    with pytest.raises(ValueError) as err:  # a hub source's error names its pinned commit and files
        problem.generate_splits({"test": 5}, levels=ALL_LEVELS, seed=0)
    assert (
        f"problem.test_size = 5, but 4 of the 4 problems of split test qualify (deepmind/code_contests@"
        f"{CODE_CONTESTS_REVISION} split 'test', files ['data/test-*.parquet'])"
    ) in str(err.value)


# --------------------------------------------------------------------------- grading in the sandbox


def test_gold_programs_pass_in_the_sandbox_and_wrong_ones_fail(standins):
    problem = _local(standins)
    taco = _taco(standins)
    for graded, splits in ((problem, problem.load_splits()), (taco, taco.load_splits())):
        rows = [row for split in splits.values() for row in split]
        grades = graded.grade_batch([row["completion"] for row in rows], rows)
        assert all(g.correct and g.reward == 1.0 for g in grades), [
            r["id"] for r, g in zip(rows, grades) if not g.correct
        ]
        assert all(g.answer_class == graded.gold_class(row) for g, row in zip(grades, rows, strict=True))
    row = problem.load_splits(["test"])["test"][0]
    wrong = problem.grade("Here it is:\n```python\nprint(0)\n```\n", row)
    assert not wrong.correct and wrong.reward == 0.0 and wrong.answer == "print(0)"
    assert problem.grade("I cannot solve this.", row).statuses[0] == "crashed"  # the whole text is the program
    # The Python 2 solution of the same problem does not run under Python 3: why the loader takes language 3.
    record = next(r for r in code_contests_records(12, 4) if r["description"].strip() in row["prompt"])
    assert not problem.grade(gold_completion(record["solutions"]["solution"][0]), row).correct
    partial = _local(standins, reward_mode="fraction").grade(
        "```python\nprint(int(input().split()[0]) + 1)\n```",
        {**row, "answer": json.dumps([["1 2", "2"], ["1 2", "3"]])},
    )
    assert partial.reward == 0.5 and partial.statuses == ("passed", "failed")


def test_the_program_is_the_last_python_block_else_a_bare_block_else_everything():
    assert extract_fenced_program("Plan.\n```python\nprint(1)\n```\nFixed:\n```py\nprint(2)\n```\nDone.") == "print(2)"
    assert extract_fenced_program("```\nprint(3)\n```\n```cpp\nint main(){}\n```") == "print(3)"
    assert extract_fenced_program("```python\nprint(1)\n```\n```\n5\n```") == "print(1)", "a tagged block first"
    assert extract_fenced_program("print(4)\n") == "print(4)\n"
    assert extract_fenced_program("```python\nx = 1\nprint(x)") == "x = 1\nprint(x)", "a block cut off at the end"
    assert extract_fenced_program("  \n") is None
    program = contest_problem(3)["python3"]
    assert extract_fenced_program(gold_completion(program)) == program.strip()
    with pytest.raises(ValueError, match="must be a str"):
        extract_fenced_program(None)


# --------------------------------------------------------------------------- schema errors


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda rs: [r.pop("description") for r in rs], "field 'description' is missing from every row"),
        (lambda rs: rs[1].update(description=None), "field 'description' is missing (null)"),
        (lambda rs: rs[1]["private_tests"]["output"].pop(), "field 'private_tests' has 2 input but 1 output"),
        (lambda rs: rs[1].update(cf_rating=None, difficulty=None), "field 'difficulty' must be an int"),
    ],
)
def test_a_bad_code_contests_row_is_named_with_its_file_row_and_field(tmp_path, change, says):
    records = code_contests_records(0, 2)
    change(records)
    path = tmp_path / "test.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(records).to_parquet(path)
    problem = _local({"code_contests_train": path, "code_contests_valid": path, "code_contests_test": path})
    with pytest.raises(DataRowError, match=re.escape(says)) as err:
        problem.load_splits(["test"])
    assert str(path) in str(err.value)
    if "every row" not in says:
        assert f"row 1 (name '1_{contest_problem(1)['name']}')" in str(err.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r.update(input_output="{inputs: [1]"), "field 'input_output' is not JSON"),
        (lambda r: r.update(input_output='{"inputs": ["1"]}'), "field 'input_output' must be {inputs: [...]"),
        (lambda r: r.update(input_output='{"inputs": [1], "outputs": ["1"]}'), "holds a int, not a str"),
        (lambda r: r.update(solutions='"one"'), "field 'solutions' must be a JSON list"),
        (lambda r: r.update(difficulty="TRIVIAL"), "field 'difficulty' must be one of"),
    ],
)
def test_a_bad_taco_row_is_named_with_its_file_row_and_field(tmp_path, change, says):
    records = taco_records(0, 2)
    change(records[1])
    path = _write(tmp_path / "ALL" / "test.parquet", records)
    with pytest.raises(DataRowError, match=re.escape(says)) as err:
        _taco({"taco_train": path, "taco_test": path}).load_splits(["test"])
    assert f"{path}: row 1" in str(err.value)


def test_validate_row_names_the_bad_field_and_rows_round_trip(standins, tmp_path):
    problem = _local(standins)
    rows = problem.load_splits(["test"])["test"]
    problem.save_rows(rows, tmp_path / "test.parquet")
    assert problem.load_rows(tmp_path / "test.parquet") == rows
    row = rows[0]
    problem.validate_row({**row, "completion": ""})  # a test problem without a Python 3 solution
    for field, value, says in [
        ("prompt", "Q: add\nA: ", "is not of the form"),
        ("id", row["id"].replace("-L", "-L9"), "is not 'code_contests-<cc|taco>-L"),
        ("answer", "[]", "must be a non-empty JSON list"),
        ("answer", '[["1", 2]]', "string pairs"),
        ("answer", "{", "is not JSON"),
        ("completion", "print(1)", "one program in a ```python fence"),
    ]:
        with pytest.raises(ValueError, match=f"field '{field}' .*{re.escape(says)}"):
            problem.validate_row({**row, field: value})


# --------------------------------------------------------------------------- the tang_codecontests study


def _study_params():
    return yaml.safe_load((STUDY / "params.yaml").read_text()), yaml.safe_load((STUDY / "standin.yaml").read_text())


def test_tang_codecontests_params_are_app_a4s():
    raw, _ = _study_params()
    params = parse_params(raw)
    assert params.problem.name == "code_contests" and params.problem.test_size == 165  # CodeContests test
    assert (params.model.base_model, params.model.chat_template) == ("meta-llama/Llama-3.1-8B-Instruct", True)
    rl = params.rl
    assert (rl.num_generations, rl.learning_rate, rl.weight_decay, rl.temperature, rl.steps) == (
        8,
        2e-7,
        0.1,
        1.0,
        8000,
    )
    assert rl.lr_warmup_ratio * rl.steps == 50  # 50 warm-up steps
    assert (params.rollouts.samples_per_prompt, params.rollouts.temperature, params.rollouts.top_p) == (20, 1.0, 0.95)
    assert params.run_variants == ["warmup", "rloo", "grpo_z", "loo_pass_at_k", "loo_pass_at_k_biased"]
    rules = {name: params.rl_config(name).rule.name for name in params.run_variants if name != "warmup"}
    assert rules == {n: n for n in rules}, "each variant runs the rule of its name"
    assert {params.rl_config(name).loss_type for name in rules} == {"dr_grpo"}, "one estimator for every rule"
    problem = PROBLEMS.parse("code_contests", params.problem.options)
    assert problem.min_train_tests == 5 and problem.reward_mode == "all_tests"
    assert params.compare.baseline == "rloo" and params.warmup.learning_rate <= 1e-12


def test_tang_codecontests_stand_in_overlay_keeps_the_study_and_reads_the_stand_ins():
    raw, standin = _study_params()
    params = parse_params(overlay(raw, standin))
    assert params.model.base_model == "./standins/models/llama" and params.model.revision is None
    assert params.rl.num_generations == 8 and params.rl.batch_size % 8 == 0, "k = 8 kept"
    sources = PROBLEMS.parse("code_contests", params.problem.options).sources()
    assert {split: s.parquet[0] for split, s in sources.items()} == {
        "train": "./standins/data/code_contests/train.parquet",
        "validation": "./standins/data/code_contests/valid.parquet",
        "test": "./standins/data/code_contests/test.parquet",
    }
    assert set(params.run_variants) <= set(parse_params(raw).run_variants)
    with pytest.raises(ValueError, match="rule 'loo_maj_at_k' needs the answer class"):
        parse_params(overlay(raw, {"variants": {"maj": {"objective": "rl", "rule": "loo_maj_at_k"}}}))
