"""Lean data: LeanDojo Benchmark 4 and MiniF2F (Lean 4) read from local files in their published schemas.

Nothing is downloaded: the files below are written by hand in each release's
format (LeanDojo: a folder per split strategy holding train.json, val.json and
test.json, each a JSON array of theorems with url, commit, file_path, full_name,
start, end, traced_tactics; MiniF2F: DeepSeek-Prover's minif2f.jsonl lines with
name, split, informal_prefix, formal_statement, goal, header). The traced states are
in the stand-in prover's toy language, so the stand-in replays every gold tactic and
must print exactly the file's ``state_after``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import pytest

from aligntrain.lean import LeanUnavailable, ProofFinished, StandinVerifier, TacticError, Theorem
from aligntrain.problems import PROBLEMS, Problem, get_problem
from aligntrain.problems.hub import DataRowError, HubDataUnavailable
from aligntrain.problems.lean import (
    MINIF2F_HEADER,
    read_leandojo,
    read_minif2f,
    step_rows,
    theorem_row,
    validate_row,
)

URL = "https://github.com/leanprover-community/mathlib4"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # made up: a test file, not a real mathlib4 commit


def _tactic(tactic: str, before: str, after: str, premises: list | None = None) -> dict:
    return {
        "tactic": tactic,
        "annotated_tactic": [tactic, premises or []],
        "state_before": before,
        "state_after": after,
    }


def _theorem(name: str, file_path: str, start: list, end: list, tactics: list[dict]) -> dict:
    return {
        "url": URL,
        "commit": COMMIT,
        "file_path": file_path,
        "full_name": name,
        "start": start,
        "end": end,
        "traced_tactics": tactics,
    }


AND_SWAP = _theorem(
    "Toy.and_swap",
    "Mathlib/Logic/Toy.lean",
    [12, 1],
    [14, 21],
    [
        _tactic("intro h", "p q : Prop\n⊢ p ∧ q → q ∧ p", "p q : Prop\nh : p ∧ q\n⊢ q ∧ p"),
        _tactic(
            "exact ⟨h.2, h.1⟩",
            "p q : Prop\nh : p ∧ q\n⊢ q ∧ p",
            "no goals",
            [{"full_name": "And.intro", "def_path": "Init/Prelude.lean", "def_pos": [1, 1], "def_end_pos": [1, 2]}],
        ),
    ],
)
IMP_TRANS = _theorem(
    "Toy.imp_trans",
    "Mathlib/Logic/Toy.lean",
    [16, 1],
    [19, 15],
    [
        _tactic(
            "intro hp",
            "p q r : Prop\nhpq : p → q\nhqr : q → r\n⊢ p → r",
            "p q r : Prop\nhpq : p → q\nhqr : q → r\nhp : p\n⊢ r",
        ),
        _tactic(
            "apply hqr",
            "p q r : Prop\nhpq : p → q\nhqr : q → r\nhp : p\n⊢ r",
            "p q r : Prop\nhpq : p → q\nhqr : q → r\nhp : p\n⊢ q",
        ),
        _tactic("exact hpq hp", "p q r : Prop\nhpq : p → q\nhqr : q → r\nhp : p\n⊢ q", "no goals"),
    ],
)
TERM_MODE = _theorem("Toy.id", "Mathlib/Logic/Toy.lean", [21, 1], [21, 40], [])
OR_SWAP = _theorem(
    "Toy.or_swap",
    "Mathlib/Logic/Toy.lean",
    [23, 1],
    [28, 10],
    [
        _tactic("intro h", "p q : Prop\n⊢ p ∨ q → q ∨ p", "p q : Prop\nh : p ∨ q\n⊢ q ∨ p"),
        _tactic(
            "rcases h with hp | hq",
            "p q : Prop\nh : p ∨ q\n⊢ q ∨ p",
            "p q : Prop\nhp : p\n⊢ q ∨ p\n\np q : Prop\nhq : q\n⊢ q ∨ p",
        ),
        _tactic(
            "right",
            "p q : Prop\nhp : p\n⊢ q ∨ p\n\np q : Prop\nhq : q\n⊢ q ∨ p",
            "p q : Prop\nhp : p\n⊢ p\n\np q : Prop\nhq : q\n⊢ q ∨ p",
        ),
        _tactic("exact hp", "p q : Prop\nhp : p\n⊢ p\n\np q : Prop\nhq : q\n⊢ q ∨ p", "p q : Prop\nhq : q\n⊢ q ∨ p"),
        _tactic("left", "p q : Prop\nhq : q\n⊢ q ∨ p", "p q : Prop\nhq : q\n⊢ q"),
        _tactic("assumption", "p q : Prop\nhq : q\n⊢ q", "no goals"),
    ],
)
SPLIT_FILES = {
    "train.json": [AND_SWAP, IMP_TRANS, TERM_MODE],
    "val.json": [IMP_TRANS],
    "test.json": [OR_SWAP, TERM_MODE],
}

MINIF2F_ROWS = [
    {
        "name": "toy_and_swap",
        "split": "test",
        "informal_prefix": "/-- Show that p ∧ q implies q ∧ p. -/\n",
        "formal_statement": "theorem toy_and_swap (p q : Prop) : p ∧ q → q ∧ p := by\n",
        "goal": "p q : Prop\n⊢ p ∧ q → q ∧ p",
        "header": "import Mathlib\n",
    },
    {
        "name": "mathd_algebra_478",
        "split": "test",
        "informal_prefix": "/-- The volume of a cone is given by the formula $V = \\frac{1}{3}Bh$. -/\n",
        "formal_statement": "theorem mathd_algebra_478 (b h v : ℝ) (h₀ : 0 < b ∧ 0 < h ∧ 0 < v) (h₁ : v = 1 / 3 * (b * h))\n"
        "    (h₂ : b = 30) (h₃ : h = 13 / 2) : v = 65 := by\n",
        "goal": "b h v : ℝ\nh₀ : 0 < b ∧ 0 < h ∧ 0 < v\nh₁ : v = 1 / 3 * (b * h)\nh₂ : b = 30\nh₃ : h = 13 / 2\n⊢ v = 65",
        "header": MINIF2F_HEADER,
    },
    {"name": "toy_valid", "split": "valid", "formal_statement": "theorem toy_valid (p : Prop) : p → p := by sorry"},
]


def _digest(source: str, file_path: str, name: str) -> str:
    return hashlib.blake2b(f"{source}\x00{file_path}\x00{name}".encode(), digest_size=8).hexdigest()


@pytest.fixture
def leandojo(tmp_path) -> Path:
    folder = tmp_path / "leandojo_benchmark_4"
    (folder / "random").mkdir(parents=True)
    for file, theorems in SPLIT_FILES.items():
        (folder / "random" / file).write_text(json.dumps(theorems, ensure_ascii=False, indent=2), encoding="utf-8")
    return folder


@pytest.fixture
def minif2f(tmp_path) -> Path:
    path = tmp_path / "minif2f.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in MINIF2F_ROWS), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- LeanDojo Benchmark 4


def test_leandojo_theorems_are_read_in_file_order_with_their_traces(leandojo):
    theorems = read_leandojo(leandojo / "random" / "train.json")
    assert [t.theorem.name for t in theorems] == ["Toy.and_swap", "Toy.imp_trans", "Toy.id"]
    assert [t.level for t in theorems] == [2, 3, 0]
    first = theorems[0]
    assert first.theorem.statement is None and first.theorem.header == ""
    assert first.theorem.initial_state == "p q : Prop\n⊢ p ∧ q → q ∧ p"
    assert first.theorem.location.file_path == "Mathlib/Logic/Toy.lean"
    assert (first.theorem.location.start, first.theorem.location.end) == ((12, 1), (14, 21))
    assert [step.tactic for step in first.steps] == ["intro h", "exact ⟨h.2, h.1⟩"]
    assert theorems[2].theorem.initial_state is None and theorems[2].steps == ()


def test_leandojo_step_rows_are_state_to_tactic(leandojo):
    and_swap = read_leandojo(leandojo / "random" / "train.json")[0]
    theorem_id = f"lean-ld-L2-{_digest('leandojo', 'Mathlib/Logic/Toy.lean', 'Toy.and_swap')}"
    rows = step_rows(and_swap)
    assert [(row["id"], row["level"], row["prompt"], row["completion"]) for row in rows] == [
        (f"{theorem_id}-s0", 2, "[GOAL]\np q : Prop\n⊢ p ∧ q → q ∧ p\n[PROOFSTEP]\n", "intro h"),
        (f"{theorem_id}-s1", 2, "[GOAL]\np q : Prop\nh : p ∧ q\n⊢ q ∧ p\n[PROOFSTEP]\n", "exact ⟨h.2, h.1⟩"),
    ]
    assert Theorem.from_json(rows[0]["answer"]) == and_swap.theorem == Theorem.from_json(rows[1]["answer"])
    assert json.loads(rows[0]["answer"])["location"] == {
        "commit": COMMIT,
        "end": [14, 21],
        "file_path": "Mathlib/Logic/Toy.lean",
        "start": [12, 1],
        "url": URL,
    }
    row = theorem_row(and_swap)
    assert (row["id"], row["prompt"], row["completion"]) == (theorem_id, rows[0]["prompt"], "")
    for each in [*rows, row]:
        validate_row(each)


def test_the_standin_replays_every_traced_tactic_to_the_files_state_after(leandojo):
    """The toy files are consistent: the stand-in prints each state_after exactly ("no goals": finished)."""
    verifier = StandinVerifier()
    for file in ("train.json", "test.json"):
        for traced in read_leandojo(leandojo / "random" / file):
            if not traced.steps:
                continue
            state = verifier.start(traced.theorem)
            for step in traced.steps:
                assert state.text == step.state_before
                state = verifier.step(state, step.tactic)
                if step.state_after == "no goals":
                    assert isinstance(state, ProofFinished)
                else:
                    assert state.text == step.state_after


def _edit_theorem(path: Path, index: int, edit) -> None:
    theorems = json.loads(path.read_text(encoding="utf-8"))
    edit(theorems[index])
    path.write_text(json.dumps(theorems, ensure_ascii=False), encoding="utf-8")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.pop("full_name"), r"row 1: field 'full_name' is missing \(null\)"),
        (lambda t: t.update(commit=""), r"field 'commit' is empty"),
        (lambda t: t.update(file_path=7), r"field 'file_path' must be a str, got int 7"),
        (lambda t: t.update(start="16:1"), r"field 'start' must be \[line, column\] \(two ints\), got '16:1'"),
        (lambda t: t.update(end=[16, True]), r"field 'end' must be \[line, column\] \(two ints\)"),
        (lambda t: t.update(start=[0, 1]), r"field 'start' must have line >= 1 and column >= 0, got \[0, 1\]"),
        (lambda t: t.update(end=[15, 1]), r"field 'end' \[15, 1\] comes before 'start' \[16, 1\]"),
        (lambda t: t.pop("traced_tactics"), r"field 'traced_tactics' is missing \(null\)"),
        (lambda t: t.update(traced_tactics={"tactic": "x"}), r"field 'traced_tactics' must be a list, got dict"),
        (
            lambda t: t["traced_tactics"][1].pop("tactic"),
            r"field 'traced_tactics'\[1\]: field 'tactic' is missing \(null\)",
        ),
        (
            lambda t: t["traced_tactics"][2].update(state_before=["⊢ q"]),
            r"field 'traced_tactics'\[2\]: field 'state_before' must be a str, got list",
        ),
        (
            lambda t: t["traced_tactics"][0].update(state_after=" "),
            r"field 'traced_tactics'\[0\]: field 'state_after' is empty",
        ),
        (
            lambda t: t["traced_tactics"][0].update(annotated_tactic="intro hp"),
            r"field 'traced_tactics'\[0\]: field 'annotated_tactic' must be \[text, \[premises\]\], got 'intro hp'",
        ),
        (lambda t: t["traced_tactics"].append("intro x"), r"field 'traced_tactics'\[3\]: must be an object, got str"),
    ],
)
def test_a_malformed_leandojo_row_names_the_file_the_row_and_the_field(leandojo, edit, message):
    path = leandojo / "random" / "train.json"
    _edit_theorem(path, 1, edit)
    where = "" if message.startswith("row") else r"row 1 \(full_name 'Toy.imp_trans'\): "
    with pytest.raises(DataRowError, match=rf"^{re.escape(str(path))}: {where}{message}"):
        read_leandojo(path)


def test_a_leandojo_file_that_is_not_an_array_of_objects_is_refused(tmp_path):
    path = tmp_path / "train.json"
    path.write_text('{"theorems": []}')
    with pytest.raises(DataRowError, match=rf"^{path}: must be a JSON array of theorems, got a dict$"):
        read_leandojo(path)
    path.write_text("[1, ")
    with pytest.raises(DataRowError, match=rf"^{path}: cannot be read as JSON: JSONDecodeError"):
        read_leandojo(path)
    path.write_text("[[1]]")
    with pytest.raises(DataRowError, match=rf"^{path}: row 0: must be an object, got list$"):
        read_leandojo(path)


# --------------------------------------------------------------------------- MiniF2F (Lean 4)


def test_minif2f_theorems_of_one_split(minif2f):
    test = read_minif2f(minif2f, "test")
    assert [t.theorem.name for t in test] == ["toy_and_swap", "mathd_algebra_478"]
    cone = test[1].theorem
    assert cone.statement == MINIF2F_ROWS[1]["formal_statement"] and cone.header == MINIF2F_HEADER
    assert cone.initial_state.endswith("⊢ v = 65") and cone.location is None and test[1].level == 0
    (valid,) = read_minif2f(minif2f, "valid")
    assert valid.theorem.header == MINIF2F_HEADER and valid.theorem.initial_state is None  # defaults
    row = theorem_row(test[0])
    assert row == {
        "id": f"lean-mf-L0-{_digest('minif2f', '', 'toy_and_swap')}",
        "level": 0,
        "prompt": "[GOAL]\np q : Prop\n⊢ p ∧ q → q ∧ p\n[PROOFSTEP]\n",
        "completion": "",
        "answer": test[0].theorem.to_json(),
    }
    validate_row(row)
    assert theorem_row(valid)["prompt"] == ""
    with pytest.raises(ValueError, match="split must be one of"):
        read_minif2f(minif2f, "validation")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"split": "test", "formal_statement": "theorem t : True := by"}, r"row 1: field 'name' is missing \(null\)"),
        (
            {"name": "t", "split": "validation", "formal_statement": "theorem t : True := by"},
            r"field 'split' must be one of \('valid', 'test'\), got 'validation'",
        ),
        ({"name": "t", "split": "test"}, r"field 'formal_statement' is missing \(null\)"),
        (
            {"name": "t", "split": "test", "formal_statement": "example : True := by"},
            r"field 'formal_statement' must be 'theorem <name> ... := by'",
        ),
        (
            {"name": "t", "split": "test", "formal_statement": "theorem t : True := by trivial"},
            r"field 'formal_statement' must be 'theorem <name> ... := by'",
        ),
        (
            {"name": "t", "split": "test", "formal_statement": "theorem t : True := by", "goal": 3},
            r"field 'goal' must be a str",
        ),
        ("not json", r"row 1: is not JSON"),
    ],
)
def test_a_malformed_minif2f_row_names_the_file_the_row_and_the_field(tmp_path, line, message):
    path = tmp_path / "minif2f.jsonl"
    text = line if isinstance(line, str) else json.dumps(line)
    path.write_text(json.dumps(MINIF2F_ROWS[0], ensure_ascii=False) + "\n\n" + text + "\n", encoding="utf-8")
    where = "" if message.startswith("row") else r"row 1 \(name 't'\): "
    with pytest.raises(DataRowError, match=rf"^{re.escape(str(path))}: {where}{message}"):
        read_minif2f(path, "test")


# --------------------------------------------------------------------------- rows and the problem


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.update(id=r["id"].replace("-L2-", "-L3-")), "id"),
        (lambda r: r.update(level=3), "id"),
        (lambda r: r.update(answer="{}"), "answer"),
        (lambda r: r.update(answer=r["answer"].replace('"leandojo"', '"hub"')), "answer"),
        (lambda r: r.update(prompt="p q : Prop\n⊢ p ∧ q → q ∧ p"), "prompt"),
        (lambda r: r.update(completion=""), "completion"),
        (lambda r: r.update(extra=1), "extra"),
    ],
)
def test_validate_row_names_the_bad_field(leandojo, edit, field):
    row = copy.deepcopy(step_rows(read_leandojo(leandojo / "random" / "train.json")[0])[0])
    edit(row)
    with pytest.raises(ValueError, match=rf"^row '[^']*': field '{field}'"):
        validate_row(row)


def _problem(leandojo: Path | None = None, minif2f: Path | None = None, **options) -> Problem:
    given = {"leandojo": str(leandojo) if leandojo else None, "minif2f": str(minif2f) if minif2f else None}
    return PROBLEMS.parse("lean", {**given, "verifier": "standin", "test_set": "leandojo", **options})


def test_generate_splits_gives_step_rows_to_train_and_theorem_rows_to_test(leandojo, minif2f, tmp_path):
    problem = _problem(leandojo)
    assert isinstance(problem, Problem)
    splits = problem.generate_splits({"train": 2, "validation": 1, "test": 2}, levels=[0, 1, 2, 3, 4, 5], seed=0)
    assert sorted(row["id"].rsplit("-s", 1)[-1] for row in splits["train"]) == ["0", "0", "1", "1", "2"]
    assert len(splits["validation"]) == 3 and {row["level"] for row in splits["validation"]} == {3}
    assert sorted(row["level"] for row in splits["test"]) == [0, 5]  # Toy.id (no tactics) and Toy.or_swap (6)
    assert all(row["completion"] == "" and "-s" not in row["id"] for row in splits["test"])
    for row in [row for split in splits.values() for row in split]:
        problem.validate_row(row)
    again = problem.generate_splits({"train": 2, "validation": 1, "test": 2}, levels=[0, 1, 2, 3, 4, 5], seed=0)
    assert again == splits
    with pytest.raises(
        ValueError, match=r"sizes\['train'\] asks for 3 theorems but lean's train split has 2 at levels"
    ):
        problem.generate_splits({"train": 3}, levels=[0, 1, 2, 3, 4, 5], seed=0)  # Toy.id has no traced tactics
    (only_short,) = problem.generate_splits({"train": 1}, levels=[2], seed=5).values()
    assert [row["completion"] for row in only_short] == ["intro h", "exact ⟨h.2, h.1⟩"]
    (term_mode,) = problem.generate_splits({"test": 1}, levels=[0], seed=1)["test"]
    assert Theorem.from_json(term_mode["answer"]).name == "Toy.id" and term_mode["prompt"] == ""
    on_minif2f = _problem(leandojo, minif2f, test_set="minif2f")
    names = [Theorem.from_json(r["answer"]).name for r in on_minif2f.generate_splits({"test": 2}, [0], 0)["test"]]
    assert sorted(names) == ["mathd_algebra_478", "toy_and_swap"]
    path = tmp_path / "rows.parquet"
    problem.save_rows(splits["train"], path)
    assert problem.load_rows(path) == splits["train"]


def test_missing_data_says_which_option_and_file(leandojo, tmp_path):
    with pytest.raises(
        HubDataUnavailable, match="option `leandojo` is not set; it is the folder of the LeanDojo Benchmark 4"
    ):
        get_problem("lean").generate_splits({"train": 1}, [1], 0)
    with pytest.raises(HubDataUnavailable, match=r"no file .*novel_premises/train.json \(the train split of LeanDojo"):
        _problem(leandojo, leandojo_split="novel_premises").generate_splits({"train": 1}, [1], 0)
    with pytest.raises(HubDataUnavailable, match="option `minif2f` is None, not a file"):
        _problem(leandojo, test_set="minif2f").generate_splits({"test": 1}, [0], 0)


def test_theorem_rows_grade_whole_proofs_with_the_configured_verifier(leandojo, minif2f):
    problem = _problem(leandojo, minif2f, test_set="minif2f")
    toy, cone = [theorem_row(t) for t in read_minif2f(minif2f, "test")]
    assert problem.grade("intro h\nexact ⟨h.2, h.1⟩\n", toy).correct
    assert problem.reward("intro h\n  exact ⟨h.2, h.1⟩", toy) == 1.0
    assert problem.reward("intro h\nexact ⟨h.1, h.2⟩", toy) == 0.0
    assert problem.reward("intro h\nsorry", toy) == 0.0
    assert problem.reward("", toy) == 0.0
    assert problem.reward("norm_num [h₁, h₂, h₃]", cone) == 0.0  # real Lean: outside the stand-in's language
    assert problem.grade("intro h\nexact ⟨h.2, h.1⟩", toy).answer_class == problem.gold_class(toy) == "proved"
    assert problem.reward("\n".join(["intro h"] * 51), toy) == 0.0  # more than max_steps (50)
    step = step_rows(read_leandojo(leandojo / "random" / "train.json")[0])[0]
    with pytest.raises(ValueError, match="is a step row: its tactic is checked inside a search"):
        problem.grade("intro h", step)
    start = problem.start(step)  # LeanDojo: the stand-in starts from the initial state
    assert problem.is_proved(problem.check_step(problem.check_step(start, "intro h"), "exact ⟨h.2, h.1⟩"))
    assert isinstance(problem.check_step(start, "simp"), TacticError)
    with pytest.raises(ValueError, match="answer classes"):
        problem.answer_class("intro h")


def test_the_repl_verifier_option_fails_with_the_install_message_where_lean_is_missing(monkeypatch, tmp_path, minif2f):
    monkeypatch.setenv("PATH", str(tmp_path))
    problem = PROBLEMS.parse("lean", {"minif2f": str(minif2f), "test_set": "minif2f"})
    toy = theorem_row(read_minif2f(minif2f, "test")[0])
    with pytest.raises(LeanUnavailable, match=r"`lake` is not on PATH\)\. It runs the Lean 4 REPL"):
        problem.reward("intro h", toy)


def test_options_are_typed():
    with pytest.raises(ValueError, match="option verifier"):
        PROBLEMS.parse("lean", {"verifier": "lean3"})
    with pytest.raises(ValueError, match="option max_steps"):
        PROBLEMS.parse("lean", {"max_steps": 0})
    assert PROBLEMS.parse("lean", {}).max_steps == 50


def test_a_theorem_reads_back_from_its_json_and_refuses_wrong_types(leandojo):
    theorem = read_leandojo(leandojo / "random" / "train.json")[0].theorem
    assert Theorem.from_json(theorem.to_json()) == theorem
    text = theorem.to_json()
    for broken, message in [
        ("[]", "a theorem is a JSON object with keys"),
        (text.replace('"Toy.and_swap"', "5"), "a theorem's 'name' must be a str"),
        (text.replace("[12,1]", '[12,"1"]'), "a theorem's location 'start' must be \\[line, column\\]"),
        (text.replace('"url":', '"repo":'), "a theorem's location is an object with keys"),
    ]:
        with pytest.raises(ValueError, match=message):
            Theorem.from_json(broken)


def test_the_repl_is_not_asked_to_start_leandojo_theorems():
    """The REPL cannot start a LeanDojo theorem (no statement): refused when the options are read, before any
    training, not at the first test theorem of the search."""
    with pytest.raises(ValueError, match="test_set 'leandojo' with verifier 'repl': the REPL cannot start"):
        PROBLEMS.parse("lean", {"test_set": "leandojo"})
    assert PROBLEMS.parse("lean", {}).test_set == "minif2f"
    assert PROBLEMS.parse("lean", {"test_set": "leandojo", "verifier": "standin"}).test_set == "leandojo"
