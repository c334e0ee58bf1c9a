"""The embedded code problem: tasks, tests, splits, rows, and grading through the real sandbox."""

from __future__ import annotations

import copy
import json
import math
import random
import time
from pathlib import Path

import pytest
import yaml

from aligntrain import sandbox
from aligntrain.config import ParamsError, parse_params
from aligntrain.evaluation.curves import per_prompt_scores
from aligntrain.problems import PROBLEMS, Problem, code, get_problem
from aligntrain.rollouts.generate import Completion
from aligntrain.rollouts.pool import build_pool, read_pool, write_pool
from aligntrain.sandbox import SandboxUnavailable, TestResult

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = {family.name: family for family in code.FAMILIES}
READ_INTS = "a=list(map(int,input().split()))"

# Expected outputs worked out by hand, one input per family (the reference solutions' own check).
HAND_WORKED = [
    ("sum", None, "3 1 2", "6"),
    ("max", None, "3 9 2", "9"),
    ("min", None, "3 9 2", "2"),
    ("count", None, "3 9 2 4", "4"),
    ("reverse", None, "abcd", "dcba"),
    ("upper", None, "abc", "ABC"),
    ("length", None, "hello", "5"),
    ("vowels", None, "banana", "3"),
    ("num_words", None, "ab cd ef", "3"),
    ("last_word", None, "ab cd ef", "ef"),
    ("sort", None, "3 1 2", "1 2 3"),
    ("backwards", None, "3 1 2", "2 1 3"),
    ("times", 3, "1 2 5", "3 6 15"),
    ("plus", 4, "1 2 5", "5 6 9"),
    ("count_above", 2, "1 2 5 7", "2"),
    ("fizz", 3, "3 4 6 0", "F 4 F F"),
    ("sort_words", None, "pear fig apple", "apple fig pear"),
    ("long_words", 3, "pear fig apple", "pear apple"),
    ("count_letter", "a", "banana", "3"),
    ("repeat", 2, "ab", "abab"),
    ("sum_even", None, "1 2 3 4", "6"),
    ("spread", None, "4 9 1", "8"),
    ("squares", None, "1 2 3", "14"),
    ("sum_above", 2, "1 2 3 4", "7"),
    ("sort_down", None, "3 1 2", "3 2 1"),
    ("reverse_each", None, "ab cde", "ba edc"),
    ("initials", None, "big old cat", "BOC"),
    ("longest", None, "ab cde f", "3"),
]


@pytest.fixture(scope="module")
def problem() -> code.CodeProblem:
    return get_problem("code")


def _row(family: str, k=None, seed: int = 0) -> dict:
    """A row of ``family`` with a random informative example."""
    rng = random.Random(f"{family}:{k}:{seed}")
    spec = FAMILIES[family]
    k = spec.parameters[0] if k is None else k
    while True:
        example = code.INPUT_KINDS[spec.kind].sample_example(rng)
        if code.is_informative(spec, k, example):
            return code.make_row(spec, k, example)


def _completion(*lines: str) -> str:
    return "\n".join(lines) + code.STOP_TEXT


# --------------------------------------------------------------------------- tasks and rows


def test_every_family_is_hand_checked_and_levels_are_1_to_3():
    assert sorted(name for name, *_ in HAND_WORKED) == sorted(FAMILIES)
    assert code.LEVELS == (1, 2, 3)
    assert {family.kind for family in code.FAMILIES} == set(code.INPUT_KINDS)
    for level in code.LEVELS:
        assert len(code.FAMILIES_BY_LEVEL[level]) >= 8


@pytest.mark.parametrize(("family", "k", "line", "output"), HAND_WORKED)
def test_reference_solutions_match_hand_worked_outputs(family, k, line, output):
    spec = FAMILIES[family]
    assert code.expected_output(spec, spec.parameters[0] if k is None else k, line) == output + "\n"


def test_a_row_states_its_task_and_example_and_hides_the_other_tests():
    row = code.make_row(FAMILIES["sum_even"], None, "1 2 3 4")
    assert row["prompt"] == "# sum of the even numbers\n# 1 2 3 4 -> 6\n"
    assert row["completion"] == READ_INTS + "\nprint(sum(x for x in a if x%2==0))\n\n"
    assert row["level"] == 3 and row["id"].startswith("code-L3-")
    tests = code.tests_of(row)
    assert len(tests) == code.TESTS_PER_ROW and tests[0] == ("1 2 3 4\n", "6\n")
    hidden = [stdin for stdin, _ in tests[1:]]
    assert len(set(hidden)) == len(hidden) and "1 2 3 4\n" not in hidden
    for stdin, _ in tests[1:]:
        assert stdin.strip() not in row["prompt"]
    # The prompt determines the row: the hidden tests too.
    assert code.make_row(FAMILIES["sum_even"], None, "1 2 3 4") == row


def test_examples_fit_the_tiny_models_context():
    longest = 0
    for level in code.LEVELS:
        rng = random.Random(level)
        for _ in range(3000):
            family, k, example = code.sample_task(level, rng)
            longest = max(
                longest, len(code.format_prompt(family, k, example) + family.gold_program(k) + code.STOP_TEXT)
            )
    assert longest <= code.MAX_EXAMPLE_CHARS
    corpus = code.pretrain_corpus(500, seed=3)
    assert max(len(text) for text in corpus) <= code.MAX_EXAMPLE_CHARS


def test_splits_are_disjoint_deterministic_and_cover_the_levels():
    sizes = {"train": 90, "validation": 30, "test": 30}
    splits = code.generate_splits(sizes, levels=[1, 2, 3], seed=0)
    assert splits == code.generate_splits(sizes, levels=[1, 2, 3], seed=0)
    assert splits["test"] != code.generate_splits(sizes, levels=[1, 2, 3], seed=1)["test"]
    prompts = {split: {row["prompt"] for row in rows} for split, rows in splits.items()}
    for split, rows in splits.items():
        assert len(rows) == sizes[split] and len(prompts[split]) == sizes[split]
        assert {row["level"] for row in rows} == {1, 2, 3}
        assert all(code.partition_of(row["prompt"]) == split for row in rows)
        for row in rows:
            code.validate_row(row)
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    # The partition depends on the prompt alone: another seed never moves a prompt to another split.
    other = code.generate_splits(sizes, levels=[2], seed=7)
    assert all(code.partition_of(row["prompt"]) == split for split, rows in other.items() for row in rows)
    corpus = code.pretrain_corpus(400, seed=0)
    assert corpus == code.pretrain_corpus(400, seed=0)
    corpus_prompts = {"\n".join(text.split("\n")[:2]) + "\n" for text in corpus}
    assert all(code.partition_of(prompt) == "train" for prompt in corpus_prompts)
    assert not corpus_prompts & (prompts["validation"] | prompts["test"])
    with pytest.raises(ValueError, match="unknown splits"):
        code.generate_splits({"dev": 3})


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.pop("answer"), "answer"),
        (lambda r: r.update(tests="[]"), "tests"),
        (lambda r: r.update(level=2), "level"),
        (lambda r: r.update(level=7), "level"),
        (lambda r: r.update(id="code-L1-0000000000000000"), "id"),
        (lambda r: r.update(completion="s=input()\nprint(s)\n\n"), "completion"),
        (lambda r: r.update(answer=r["answer"].replace('"6\\n"', '"7\\n"', 1)), "answer"),
        (lambda r: r.update(answer="[]"), "answer"),
        (lambda r: r.update(prompt="# sum of the odd numbers\n# 1 2 3 4 -> 6\n"), "prompt"),
        (lambda r: r.update(prompt="# sum of the even numbers\n# 1 2 3 4 -> 7\n"), "prompt"),
        (lambda r: r.update(prompt="# sum of the even numbers\n# 1 2 3 45 -> 6\n"), "prompt"),
        (lambda r: r.update(prompt="sum of the even numbers: 1 2 3 4 -> 6\n"), "prompt"),
        (lambda r: r.update(prompt=3), "prompt"),
    ],
)
def test_row_validation_names_the_bad_field(edit, field):
    row = code.make_row(FAMILIES["sum_even"], None, "1 2 3 4")
    code.validate_row(row)
    edit(row)
    with pytest.raises(ValueError, match=rf"row '[^']*': field '{field}'"):
        code.validate_row(row)


def test_an_uninformative_example_is_refused():
    # The generator never shows an example whose output is the input (already sorted).
    row = code.make_row(FAMILIES["sort"], None, "1 2 3")
    with pytest.raises(ValueError, match="field 'prompt'.*shows nothing"):
        code.validate_row(row)


def test_rows_round_trip_through_parquet(tmp_path, problem):
    rows = code.generate_split("validation", 12, seed=2)
    problem.save_rows(rows, tmp_path / "rows.parquet")
    assert problem.load_rows(tmp_path / "rows.parquet") == rows


# --------------------------------------------------------------------------- the registry entry


def test_registered_with_typed_options(problem):
    assert "code" in PROBLEMS and isinstance(problem, Problem)
    assert problem.binary_rewards and problem.batched_rewards and problem.stop_text == "\n\n"
    fraction = PROBLEMS.parse("code", {"reward_mode": "fraction", "timeout_s": 0.5, "memory_mb": 128})
    assert not fraction.binary_rewards and fraction.timeout_s == 0.5
    with pytest.raises(ValueError, match="problem 'code': option reward_mode"):
        PROBLEMS.parse("code", {"reward_mode": "partial"})
    with pytest.raises(ValueError, match="option timeout_s"):
        PROBLEMS.parse("code", {"timeout_s": 0})
    with pytest.raises(ValueError, match="option memory_mb"):
        PROBLEMS.parse("code", {"memory_mb": 8})


def test_answer_class_without_the_row_points_to_grade(problem):
    with pytest.raises(ValueError, match=r"grade\(completion, row\)\.answer_class"):
        problem.answer_class("print(1)\n\n")


def test_program_extraction():
    assert code.extract_program("print(1)\nprint(2)\n\n# more\n") == "print(1)\nprint(2)"
    assert code.extract_program("print(1)") == "print(1)"  # cut at the length cap
    assert code.extract_program("\n\nprint(1)") is None
    assert code.extract_program("   ") is None


def _profile(**problem_options) -> dict:
    raw = yaml.safe_load((ROOT / "pipelines" / "code_smoke" / "params.yaml").read_text())
    raw["problem"]["options"].update(problem_options)
    # The variants it runs or probes: the catalog it inherits also holds rules for binary rewards only.
    used = {*raw["study"]["run"], *raw["diagnostics"]["oracle"]["rules"]}
    raw["variants"] = {name: spec for name, spec in raw["variants"].items() if name in used}
    return raw


def test_the_code_profile_loads_and_params_check_the_problems_rewards():
    params = parse_params(_profile())
    assert params.problem.name == "code" and params.problem.options["reward_mode"] == "all_tests"
    # RL rules that need answer classes from completions alone are refused for code.
    raw = _profile()
    raw["variants"]["maj"] = {"objective": "rl", "rule": "loo_maj_at_k"}
    with pytest.raises(ParamsError, match="variants.maj: rule 'loo_maj_at_k' needs the answer class"):
        parse_params(raw)
    # fraction rewards are continuous: a binary-only rule is refused, as for hydro.
    raw = _profile(reward_mode="fraction")
    raw["variants"]["bon"] = {"objective": "rl", "rule": "chow_bon", "budget": 4}
    with pytest.raises(ParamsError, match="variants.bon: rule 'chow_bon' needs binary rewards"):
        parse_params(raw)
    parse_params(_profile(reward_mode="fraction"))  # grpo and rloo take continuous rewards


# --------------------------------------------------------------------------- grading in the sandbox


def test_gold_programs_pass_all_their_tests_in_the_sandbox(problem):
    rows = [_row(family.name, k) for family in code.FAMILIES for k in {family.parameters[0], family.parameters[-1]}]
    rows += code.generate_split("test", 9, seed=5)
    assert {row["level"] for row in rows} == {1, 2, 3}
    grades = problem.grade_batch([row["completion"] for row in rows], rows)
    for row, grade in zip(rows, grades, strict=True):
        assert grade.statuses == ("passed",) * code.TESTS_PER_ROW, (row["prompt"], grade.statuses)
        assert grade.correct and grade.reward == 1.0
        assert grade.answer == row["completion"][: -len(code.STOP_TEXT)]
        assert grade.answer_class == problem.gold_class(row)


def test_wrong_and_partly_right_programs(problem):
    row = _row("max")
    tests = code.tests_of(row)
    known = {stdin.strip(): out.strip() for stdin, out in tests[:3]}  # right on 3 of the 5 tests
    partial = _completion(f"d={known!r}", "print(d.get(input(),'?'))")
    wrong = _completion(READ_INTS, "print(min(a)-1)")
    fraction = PROBLEMS.parse("code", {"reward_mode": "fraction"})
    [binary_partial, binary_wrong] = problem.grade_batch([partial, wrong], [row, row])
    [fraction_partial, fraction_wrong] = fraction.grade_batch([partial, wrong], [row, row])
    assert binary_partial.reward == 0.0 and not binary_partial.correct
    assert binary_wrong.reward == 0.0 and fraction_wrong.reward == 0.0
    assert fraction_partial.reward == 3 / code.TESTS_PER_ROW and not fraction_partial.correct
    assert fraction_partial.statuses == ("passed",) * 3 + ("failed",) * 2
    assert fraction.reward(row["completion"], row) == 1.0


def test_behaviour_classes_group_programs_by_their_outputs(problem):
    row = _row("sum")
    loop = _completion(READ_INTS, "t=0", "for x in a:", "    t+=x", "print(t)")
    wrong = _completion(READ_INTS, "print(max(a))")
    crash = _completion("raise SystemExit(3)")
    half = _completion(READ_INTS, "print(sum(a) if len(a)%2 else 1/0)")
    no_program = "\n\nprint(1)"
    gold, same, other, crashed, partial, empty = problem.grade_batch(
        [row["completion"], loop, wrong, crash, half, no_program], [row] * 6
    )
    assert gold.answer_class == same.answer_class == problem.gold_class(row)
    assert other.answer_class != gold.answer_class and isinstance(other.answer_class, str)
    outputs = json.loads(other.answer_class)
    assert outputs == [str(max(int(x) for x in stdin.split())) for stdin, _ in code.tests_of(row)]
    assert crashed.answer_class is None and crashed.statuses == ("crashed",) * code.TESTS_PER_ROW
    odd = [len(stdin.split()) % 2 == 1 for stdin, _ in code.tests_of(row)]
    expected = [out.strip() if is_odd else None for (_, out), is_odd in zip(code.tests_of(row), odd, strict=True)]
    assert partial.answer_class == (code.behaviour_key(expected) if any(odd) else None)
    assert (empty.answer, empty.answer_class, empty.reward, empty.statuses) == (None, None, 0.0, ())
    assert code.behaviour_key(["x" * 1000]).startswith("blake2b:")
    assert code.behaviour_key(["6  \n\n"]) == code.behaviour_key(["6"]) == '["6"]'


def test_behaviour_classes_flow_through_the_pool_into_majority_vote(tmp_path, problem):
    rows = [_row("sum"), _row("upper")]
    wrong = {0: _completion(READ_INTS, "print(max(a))"), 1: _completion("s=input()", "print(s)")}
    texts = {0: [rows[0]["completion"]] * 2 + [wrong[0]] * 2, 1: [wrong[1]] * 3 + [rows[1]["completion"]]}
    completions = [Completion(p, s, text, -1.0, len(text), True, ()) for p in (0, 1) for s, text in enumerate(texts[p])]
    write_pool(build_pool(rows, completions, problem), tmp_path / "pool.parquet")
    pool = read_pool(tmp_path / "pool.parquet")
    assert pool["answer_class"].map(type).eq(str).all()
    gold = {row["id"]: problem.gold_class(row) for row in rows}
    scores = per_prompt_scores(pool, gold).set_index("prompt_id")
    # sum: 2 right, 2 of one wrong behaviour; upper: 3 of one wrong behaviour, 1 right.
    assert scores.loc[rows[0]["id"], "pass@1"] == pytest.approx(0.5)
    assert scores.loc[rows[1]["id"], "pass@1"] == pytest.approx(0.25)
    assert scores.loc[rows[1]["id"], "maj@4"] == pytest.approx(0.0)
    assert scores.loc[rows[0]["id"], "maj@4"] == pytest.approx(0.5)  # a tie of two classes: a coin flip


def test_runaway_programs_are_reported_and_do_not_hang():
    problem = PROBLEMS.parse("code", {"timeout_s": 0.5})
    row = _row("sum")
    loop = _completion("while True:", "    pass")
    flood = _completion("import sys", "while True:", "    sys.stdout.write('x'*65536)")
    start = time.monotonic()
    looping, flooding = problem.grade_batch([loop, flood], [row, row])
    assert time.monotonic() - start < 30
    assert looping.statuses == ("timeout",) * code.TESTS_PER_ROW and looping.reward == 0.0
    assert flooding.statuses == ("output_limit",) * code.TESTS_PER_ROW and flooding.reward == 0.0
    assert looping.answer_class is None and flooding.answer_class is None


def test_an_unavailable_sandbox_stops_with_the_problems_name(monkeypatch):
    def refuse() -> None:
        raise SandboxUnavailable("user namespaces are disabled")

    monkeypatch.setattr(sandbox, "check_sandbox", refuse)
    problem = PROBLEMS.parse("code", {})
    row = _row("sum")
    assert problem.grade("", row).reward == 0.0  # no program: nothing to run
    with pytest.raises(SandboxUnavailable, match="problem 'code'.*user namespaces are disabled"):
        problem.grade(row["completion"], row)


class _FlakyPool:
    """A stand-in pool whose first run of every program is a sandbox error."""

    def __init__(self, fail_always: bool) -> None:
        self.fail_always, self.calls = fail_always, 0

    def map(self, jobs):
        self.calls += 1
        failing = self.fail_always or self.calls == 1
        return [
            [
                TestResult(False, "sandbox_error", 0.0, detail="setup failed")
                if failing
                else TestResult(True, "passed", 0.01, stdout=out)
                for _, out in tests
            ]
            for _, tests in jobs
        ]


@pytest.mark.parametrize("fail_always", [False, True])
def test_a_sandbox_error_is_retried_once_then_unscorable(fail_always):
    problem = PROBLEMS.parse("code", {})
    flaky = _FlakyPool(fail_always)
    problem._pool = flaky
    row = _row("sum")
    grade = problem.grade(row["completion"], row)
    assert flaky.calls == 2
    if fail_always:
        assert math.isnan(grade.reward) and not grade.correct and grade.answer_class is None
    else:
        assert grade.reward == 1.0 and grade.answer_class == problem.gold_class(row)


def test_code_smoke_is_the_smoke_study_on_the_code_problem():
    smoke = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    profile = _profile()
    assert profile["problem"]["name"] == "code"
    assert profile["rollouts"]["max_new_tokens"] >= 80 and profile["rl"]["max_completion_length"] >= 80
    assert profile["model"]["max_length"] >= code.MAX_EXAMPLE_CHARS + 2
    assert set(copy.deepcopy(profile)) == set(smoke)
