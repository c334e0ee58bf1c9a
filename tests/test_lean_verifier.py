"""The Lean verifier layer: the stand-in prover's transitions, the REPL client's protocol, the missing-Lean error.

The stand-in is checked against hand-written expectations (states as Lean prints
them, exact error reasons). The REPL client is checked message by message against
hand-written JSON, first as pure functions, then against a fake REPL: a small
Python script, run as the client's process, that records every request and answers
canned replies in the REPL's format (blank-line separated, pretty-printed JSON).
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from aligntrain.lean import (
    LeanReplError,
    LeanReplVerifier,
    LeanState,
    LeanUnavailable,
    LeanVerifier,
    ProofFinished,
    StandinVerifier,
    TacticError,
    Theorem,
    check_proof,
    is_proved,
    screen_tactic,
)
from aligntrain.lean.repl import (
    command_outcome,
    decode_reply,
    default_command,
    encode_command,
    encode_tactic,
    statement_command,
    tactic_outcome,
)
from aligntrain.lean.standin import format_formula, parse_formula

AND_SWAP = Theorem(name="and_swap", source="minif2f", statement="theorem and_swap (p q : Prop) : p ∧ q → q ∧ p := by")


def _theorem(statement: str) -> Theorem:
    return Theorem(name="t", source="minif2f", statement=statement)


# --------------------------------------------------------------------------- the stand-in prover


def test_the_standin_is_a_lean_verifier_and_numbers_states_from_zero():
    verifier = StandinVerifier()
    assert isinstance(verifier, LeanVerifier)
    start = verifier.start(AND_SWAP)
    assert start == LeanState(0, ("p q : Prop\n⊢ p ∧ q → q ∧ p",), 0)
    after_intro = verifier.step(start, "intro h")
    assert after_intro == LeanState(1, ("p q : Prop\nh : p ∧ q\n⊢ q ∧ p",), 0)
    split = verifier.step(after_intro, "constructor")
    assert split == LeanState(2, ("p q : Prop\nh : p ∧ q\n⊢ q", "p q : Prop\nh : p ∧ q\n⊢ p"), 0)
    assert split.text == "p q : Prop\nh : p ∧ q\n⊢ q\n\np q : Prop\nh : p ∧ q\n⊢ p"
    one_left = verifier.step(split, "exact h.2")
    assert one_left == LeanState(3, ("p q : Prop\nh : p ∧ q\n⊢ p",), 0)
    done = verifier.step(one_left, "exact h.left")
    assert done == ProofFinished(4, 0) and is_proved(done)
    # a search branches: the state after intro can be stepped again, by another tactic
    assert verifier.step(after_intro, "exact ⟨h.2, h.1⟩") == ProofFinished(5, 0)


@pytest.mark.parametrize(
    ("statement", "tactics", "goals"),
    [
        # implication chains, intro of several names, apply leaving the premise
        (
            "theorem t (p q r : Prop) (hpq : p → q) (hqr : q → r) : p → r := by",
            ["intro hp", "apply hqr"],
            ("p q r : Prop\nhpq : p → q\nhqr : q → r\nhp : p\n⊢ q",),
        ),
        ("theorem t (p q : Prop) : p → q → p := by", ["intro a b"], ("p q : Prop\na : p\nb : q\n⊢ p",)),
        # rcases on a disjunction: two goals, the hypothesis replaced; then right on the first
        (
            "theorem t (p q : Prop) (h : p ∨ q) : q ∨ p := by",
            ["rcases h with hp | hq", "right"],
            ("p q : Prop\nhp : p\n⊢ p", "p q : Prop\nhq : q\n⊢ q ∨ p"),
        ),
        # obtain on a conjunction, consecutive hypotheses of one type share a line
        (
            "theorem t (p : Prop) (h : p ∧ p) : p := by",
            ["obtain ⟨a, b⟩ := h"],
            ("p : Prop\na b : p\n⊢ p",),
        ),
        # ↔: constructor gives both implications; rcases gives mp and mpr
        (
            "theorem t (p q : Prop) : p ∧ q ↔ q ∧ p := by",
            ["constructor"],
            ("p q : Prop\n⊢ p ∧ q → q ∧ p", "p q : Prop\n⊢ q ∧ p → p ∧ q"),
        ),
        (
            "theorem t (p q : Prop) (h : p ↔ q) : q → p := by sorry",
            ["rcases h with ⟨f, g⟩"],
            ("p q : Prop\nf : p → q\ng : q → p\n⊢ q → p",),
        ),
        # parentheses only where the tree needs them
        (
            "theorem t (p q r : Prop) : ((p ∧ q) ∧ r) → (p ∨ (q ∨ r)) := by",
            ["intro h"],
            ("p q r : Prop\nh : (p ∧ q) ∧ r\n⊢ p ∨ q ∨ r",),
        ),
    ],
)
def test_standin_transitions(statement, tactics, goals):
    verifier = StandinVerifier()
    state = verifier.start(_theorem(statement))
    for tactic in tactics:
        state = verifier.step(state, tactic)
        assert isinstance(state, LeanState), state
    assert state.goals == goals


@pytest.mark.parametrize(
    ("statement", "proof"),
    [
        ("theorem t (p q r : Prop) (hpq : p → q) (hqr : q → r) : p → r := by", ["intro hp", "exact hqr (hpq hp)"]),
        (
            "theorem t (p q : Prop) (h : p ∨ q) : q ∨ p := by",
            ["rcases h with a | b", "right", "exact a", "left", "assumption"],
        ),
        ("theorem t (p q : Prop) (h : p ↔ q) (hq : q) : p := by", ["exact h.mpr hq"]),
        ("theorem t (p q : Prop) (h : p ↔ q) (hp : p) : q := by", ["apply h.1", "exact hp"]),
        ("theorem t (p : Prop) : True := by", ["trivial"]),
        ("theorem t (p : Prop) : p → True ∧ p := by", ["intro hp", "constructor", "trivial", "exact hp"]),
        (
            "theorem t (p q : Prop) : p ∧ q ↔ q ∧ p := by",
            ["constructor", "intro h", "exact ⟨h.2, h.1⟩", "intro h", "exact ⟨h.2, h.1⟩"],
        ),
    ],
)
def test_standin_proofs_finish(statement, proof):
    check = check_proof(StandinVerifier(), _theorem(statement), proof)
    assert check.failure is None and check.proved
    assert len(check.states) == len(proof)


@pytest.mark.parametrize(
    ("tactic", "reason"),
    [
        ("exact h.1", "type mismatch: the term proves p, not q ∧ p"),
        ("exact ⟨h.1, h.2⟩", "type mismatch: the term proves p, not q"),
        ("exact p", "'p' is a proposition, not a proof"),
        ("exact x", "unknown identifier 'x'"),
        ("exact h.mp", "'.mp' does not apply to a proof of p ∧ q"),
        ("exact ⟨h.2, h.1", "term '⟨h.2, h.1' ends too early"),
        ("intro k", "intro: the goal q ∧ p is not an implication"),
        ("left", "left: the goal q ∧ p is not a disjunction"),
        ("assumption", "assumption: no hypothesis proves q ∧ p"),
        ("rcases h with a | b", "rcases: h : p ∧ q is not ∨"),
        ("rcases h with ⟨p, b⟩", "'p' is already in the context (the stand-in does not shadow)"),
        ("apply h", "apply: the term's conclusion does not match the goal q ∧ p"),
        (
            "simp",
            "unknown tactic 'simp' (the stand-in knows intro, constructor, left, right, exact, apply, assumption, trivial, rcases, obtain)",
        ),
        (
            "intro h; exact h",
            "unknown tactic 'intro h; exact h' (the stand-in knows intro, constructor, left, right, exact, apply, assumption, trivial, rcases, obtain)",
        ),
        (
            "exact h.2 ; __import__('os').system('x')",
            "term \"h.2 ; __import__('os').system('x')\" has '; __import__', outside the toy language",
        ),
        ("sorry", "tactic uses 'sorry', which is refused (it proves nothing or runs code)"),
        ("exact Lean.sorryAx", "tactic uses 'sorryAx', which is refused (it proves nothing or runs code)"),
        ("", "empty tactic"),
        ("   ", "empty tactic"),
        (7, "a tactic is text, got int"),
    ],
)
def test_standin_refuses_with_a_reason(tactic, reason):
    verifier = StandinVerifier()
    state = verifier.step(verifier.start(AND_SWAP), "intro h")
    assert verifier.step(state, tactic) == TacticError(reason)


@pytest.mark.parametrize(
    ("theorem", "reason"),
    [
        (_theorem("theorem t (p : Prop) : p ∧ q := by"), "formula 'p ∧ q' uses 'q', not a declared proposition"),
        (
            _theorem("theorem t (x : ℝ) : x = x := by"),
            "binder '(x : ℝ)': formula 'ℝ' has 'ℝ', outside the toy language",
        ),
        (_theorem("example (p : Prop) : p → p := by"), "does not start with 'theorem <name>'"),
        (_theorem("theorem t (p : Prop) : p → p"), "does not end with ': <formula> := by'"),
        (Theorem(name="t", source="leandojo"), "has neither a statement nor an initial state"),
    ],
)
def test_standin_start_refuses_theorems_outside_its_language(theorem, reason):
    result = StandinVerifier().start(theorem)
    assert isinstance(result, TacticError) and reason in result.reason


def test_standin_starts_from_an_initial_state_when_there_is_no_statement():
    theorem = Theorem(name="x", source="leandojo", initial_state="p q : Prop\nh : p ∧ q\n⊢ q ∧ p")
    verifier = StandinVerifier()
    assert verifier.step(verifier.start(theorem), "exact ⟨h.2, h.1⟩") == ProofFinished(1, 0)


def test_formulas_print_with_leans_precedences():
    variables = {"p", "q", "r"}
    cases = {
        "p ∧ q ∧ r": "p ∧ q ∧ r",
        "(p ∧ q) ∧ r": "(p ∧ q) ∧ r",
        "p → q → r": "p → q → r",
        "(p → q) → r": "(p → q) → r",
        "p ∧ q ∨ r": "p ∧ q ∨ r",
        "p ∧ (q ∨ r)": "p ∧ (q ∨ r)",
        "(p ↔ q) ↔ r": "(p ↔ q) ↔ r",
        "(p → q) ↔ q": "p → q ↔ q",
    }
    for text, printed in cases.items():
        assert format_formula(parse_formula(text, variables)) == printed
    with pytest.raises(ValueError, match="chains '↔' without parentheses"):
        parse_formula("p ↔ q ↔ r", variables)


def test_check_proof_stops_at_the_first_failure_and_bounds_the_length():
    verifier = StandinVerifier()
    failed = check_proof(verifier, AND_SWAP, ["intro h", "left", "exact h.1"])
    assert failed.failure == TacticError("left: the goal q ∧ p is not a disjunction") and not failed.proved
    assert [state.goals for state in failed.states] == [
        ("p q : Prop\n⊢ p ∧ q → q ∧ p",),
        ("p q : Prop\nh : p ∧ q\n⊢ q ∧ p",),
    ]
    extra = check_proof(verifier, AND_SWAP, ["intro h", "exact ⟨h.2, h.1⟩", "trivial"])
    assert extra.failure == TacticError("tactic 3 comes after the proof is finished")
    unfinished = check_proof(verifier, AND_SWAP, ["intro h"])
    assert unfinished.failure is None and not unfinished.proved
    too_long = check_proof(verifier, AND_SWAP, ["intro h"] * 4, max_steps=3)
    assert too_long == type(too_long)((), TacticError("more than 3 tactics"), False)


@pytest.mark.parametrize(
    ("tactic", "refused"),
    [
        ("sorry", "sorry"),
        ("exact (sorry)", "sorry"),
        ("admit", "admit"),
        ("exact Lean.sorryAx _ false", "sorryAx"),
        ("run_tac do IO.println 1", "run_tac"),
        ("exact (by_elab pure default)", "by_elab"),
        ("simp [IO.Process.run]", "IO"),
        ("#eval 1", "#eval"),
    ],
)
def test_screen_refuses_proof_holes_and_code(tactic, refused):
    assert screen_tactic(tactic) == TacticError(
        f"tactic uses {refused!r}, which is refused (it proves nothing or runs code)"
    )


@pytest.mark.parametrize(
    "tactic", ["simp [sorry_lemma]", "exact h.admits", "rw [Nat.IOU]", "nlinarith [sq_nonneg (a - b)]"]
)
def test_screen_passes_words_that_only_contain_a_refused_one(tactic):
    assert screen_tactic(tactic) == tactic


# --------------------------------------------------------------------------- the REPL protocol, message by message


def test_requests_are_encoded_as_the_repl_reads_them():
    assert encode_command("import Mathlib") == b'{"cmd": "import Mathlib"}\n\n'
    assert encode_command("theorem t : 1 = 1 := by sorry", env=0) == (
        b'{"cmd": "theorem t : 1 = 1 := by sorry", "env": 0}\n\n'
    )
    assert encode_tactic("rw [h₀]\nsimp", 3) == '{"tactic": "rw [h₀]\\nsimp", "proofState": 3}\n\n'.encode()
    # a blank line inside model text cannot end the request early
    assert encode_tactic('intro h\n\n{"cmd": "x"}', 0).count(b"\n\n") == 1


def test_statements_get_sorry_as_their_proof():
    assert statement_command(_theorem("theorem t : 1 = 1 := by\n")) == "theorem t : 1 = 1 := by sorry"
    assert statement_command(_theorem("theorem t : 1 = 1 := by sorry")) == "theorem t : 1 = 1 := by sorry"
    assert statement_command(_theorem("theorem t : 1 = 1 :=")) == "theorem t : 1 = 1 := by sorry"
    with pytest.raises(ValueError, match="has no statement: LeanDojo gives only its location"):
        statement_command(Theorem(name="Nat.add_comm", source="leandojo"))


COMMAND_REPLY = b"""{"sorries":
 [{"proofState": 0,
   "pos": {"line": 1, "column": 45},
   "goal": "p q : Prop\\n\xe2\x8a\xa2 p \xe2\x88\xa7 q \xe2\x86\x92 q \xe2\x88\xa7 p",
   "endPos": {"line": 1, "column": 50}}],
 "messages":
 [{"severity": "warning",
   "pos": {"line": 1, "column": 8},
   "endPos": {"line": 1, "column": 16},
   "data": "declaration uses 'sorry'"}],
 "env": 1}"""


def test_replies_are_decoded_into_states_errors_and_finished_proofs():
    reply = decode_reply(COMMAND_REPLY)
    assert command_outcome(reply, session=4) == LeanState(0, ("p q : Prop\n⊢ p ∧ q → q ∧ p",), 4)
    error = {"messages": [{"severity": "error", "data": "unknown identifier 'x'"}], "env": 2}
    assert command_outcome(error, 1) == TacticError("the statement does not elaborate: unknown identifier 'x'")
    assert command_outcome({"env": 2}, 1) == TacticError("the statement left 0 sorries, not one proof state")

    step = decode_reply(
        b'{"proofState": 1, "goals": ["p q : Prop\\nh : p \xe2\x88\xa7 q\\n\xe2\x8a\xa2 q \xe2\x88\xa7 p"]}'
    )
    assert tactic_outcome(step, 4) == LeanState(1, ("p q : Prop\nh : p ∧ q\n⊢ q ∧ p",), 4)
    assert tactic_outcome({"proofState": 2, "goals": []}, 4) == ProofFinished(2, 4)
    assert tactic_outcome({"proofState": 2, "goals": [], "proofStatus": "Completed"}, 4) == ProofFinished(2, 4)
    assert tactic_outcome({"proofState": 2, "goals": [], "proofStatus": "Incomplete: contains sorry"}, 4) == (
        TacticError("no goal is left but the proof is not complete: Incomplete: contains sorry")
    )
    failed = {
        "proofState": 3,
        "goals": ["⊢ q"],
        "messages": [
            {"severity": "error", "pos": {"line": 1, "column": 0}, "data": "type mismatch\n  h.1\nhas type p"},
            {"severity": "info", "data": "Try this: exact h.2"},
        ],
    }
    assert tactic_outcome(failed, 4) == TacticError("type mismatch\n  h.1\nhas type p")
    assert tactic_outcome({"message": "Unknown proof state."}, 4) == TacticError("Lean: Unknown proof state.")
    assert tactic_outcome({"proofState": 5, "goals": [], "sorries": [{"proofState": 6}]}, 4) == (
        TacticError("the tactic left a sorry")
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[1, 2]", "answered a JSON list, not an object"),
        (b"Lean (version 4.9.0)", "not JSON"),
        (b"\xff", "not JSON"),
    ],
)
def test_replies_outside_the_protocol_are_errors(data, message):
    with pytest.raises(LeanReplError, match=message):
        decode_reply(data)


def test_reply_fields_of_the_wrong_type_are_errors():
    with pytest.raises(LeanReplError, match="`goals` is not a list of texts"):
        tactic_outcome({"proofState": 1, "goals": "⊢ p"}, 1)
    with pytest.raises(LeanReplError, match="no `proofState` number"):
        tactic_outcome({"goals": []}, 1)


# --------------------------------------------------------------------------- the client against a fake REPL process

FAKE_REPL = r"""
import json, sys, time
replies = {json.dumps(json.loads(k), sort_keys=True): v for k, v in json.load(open(sys.argv[1], encoding="utf-8")).items()}
log = open(sys.argv[2], "a", encoding="utf-8")
request = b""
while True:
    line = sys.stdin.buffer.readline()
    if not line:
        break
    request += line
    if line != b"\n" or not request.strip():
        continue
    log.write(json.dumps(request.decode("utf-8")) + "\n")
    log.flush()
    key = json.dumps(json.loads(request), sort_keys=True)
    request = b""
    reply = replies.get(key, {"message": "no canned reply"})
    if "__sleep__" in reply:
        time.sleep(reply["__sleep__"])
        continue
    if "__exit__" in reply:
        sys.stderr.write(reply["stderr"])
        sys.stderr.flush()
        sys.exit(reply["__exit__"])
    sys.stdout.buffer.write(json.dumps(reply, indent=1, ensure_ascii=False).encode("utf-8") + b"\n\n")
    sys.stdout.flush()
"""

HEADER = "import Mathlib\nopen Nat\n"
STATEMENT = "theorem and_swap (p q : Prop) : p ∧ q → q ∧ p := by"
START_GOAL = "p q : Prop\n⊢ p ∧ q → q ∧ p"
REPLIES = {
    '{"cmd": "import Mathlib\\nopen Nat\\n"}': {"env": 0},
    '{"cmd": "theorem and_swap (p q : Prop) : p ∧ q → q ∧ p := by sorry", "env": 0}': {
        "sorries": [{"proofState": 0, "pos": {"line": 1, "column": 48}, "goal": START_GOAL}],
        "messages": [{"severity": "warning", "data": "declaration uses 'sorry'"}],
        "env": 1,
    },
    '{"tactic": "intro h", "proofState": 0}': {"proofState": 1, "goals": ["p q : Prop\nh : p ∧ q\n⊢ q ∧ p"]},
    '{"tactic": "exact ⟨h.2, h.1⟩", "proofState": 1}': {"proofState": 2, "goals": [], "proofStatus": "Completed"},
    '{"tactic": "exact h.1", "proofState": 1}': {
        "proofState": 3,
        "goals": ["p q : Prop\nh : p ∧ q\n⊢ q ∧ p"],
        "messages": [{"severity": "error", "data": "type mismatch"}],
    },
    '{"tactic": "decide", "proofState": 1}': {"__sleep__": 30},
    '{"tactic": "omega", "proofState": 1}': {"__exit__": 3, "stderr": "INTERNAL PANIC: out of memory"},
}


@pytest.fixture
def fake_repl(tmp_path):
    script, replies, log = tmp_path / "fake_repl.py", tmp_path / "replies.json", tmp_path / "requests.log"
    script.write_text(FAKE_REPL)
    replies.write_text(json.dumps(REPLIES, ensure_ascii=False), encoding="utf-8")

    def requests() -> list[bytes]:
        if not log.exists():
            return []
        return [json.loads(line).encode("utf-8") for line in log.read_text(encoding="utf-8").splitlines()]

    verifier = LeanReplVerifier(command=[sys.executable, str(script), str(replies), str(log)], timeout_s=10.0)
    yield verifier, requests
    verifier.close()


def test_the_client_starts_a_theorem_and_steps_it_over_the_protocol(fake_repl):
    verifier, requests = fake_repl
    assert isinstance(verifier, LeanVerifier)
    theorem = Theorem(name="and_swap", source="minif2f", statement=STATEMENT, header=HEADER)
    start = verifier.start(theorem)
    assert start == LeanState(0, (START_GOAL,), 1)
    assert requests() == [
        b'{"cmd": "import Mathlib\\nopen Nat\\n"}\n\n',
        '{"cmd": "theorem and_swap (p q : Prop) : p ∧ q → q ∧ p := by sorry", "env": 0}\n\n'.encode(),
    ]
    after = verifier.step(start, "intro h")
    assert after == LeanState(1, ("p q : Prop\nh : p ∧ q\n⊢ q ∧ p",), 1)
    assert verifier.step(after, "exact h.1") == TacticError("type mismatch")
    assert verifier.step(after, "exact ⟨h.2, h.1⟩") == ProofFinished(2, 1)
    assert requests()[2:] == [
        b'{"tactic": "intro h", "proofState": 0}\n\n',
        b'{"tactic": "exact h.1", "proofState": 1}\n\n',
        '{"tactic": "exact ⟨h.2, h.1⟩", "proofState": 1}\n\n'.encode(),
    ]
    # refused text is never sent; the header runs once per process
    assert verifier.step(after, "sorry") == TacticError(
        "tactic uses 'sorry', which is refused (it proves nothing or runs code)"
    )
    assert verifier.start(theorem) == start
    assert len(requests()) == 6 and requests()[-1] == requests()[1]
    assert check_proof(verifier, theorem, ["intro h", "exact ⟨h.2, h.1⟩"]).proved


def test_a_call_that_runs_out_of_time_stops_the_process_and_old_states_are_refused(fake_repl):
    verifier, requests = fake_repl
    verifier.timeout_s = 0.5
    theorem = Theorem(name="and_swap", source="minif2f", statement=STATEMENT, header=HEADER)
    after = verifier.step(verifier.start(theorem), "intro h")
    began = time.monotonic()
    assert verifier.step(after, "decide") == TacticError(
        "no answer within 0.5 s (the REPL was stopped)", timed_out=True
    )
    assert time.monotonic() - began < 5
    assert verifier.step(after, "exact ⟨h.2, h.1⟩") == TacticError(
        "the proof state belongs to an earlier REPL session (it was restarted): start again"
    )
    restarted = verifier.start(theorem)  # a new process: the header runs again
    assert restarted == LeanState(0, (START_GOAL,), 2)
    assert requests()[-2:] == requests()[:2]


def test_a_process_that_exits_is_reported_with_its_stderr(fake_repl):
    verifier, _ = fake_repl
    theorem = Theorem(name="and_swap", source="minif2f", statement=STATEMENT, header=HEADER)
    after = verifier.step(verifier.start(theorem), "intro h")
    assert verifier.step(after, "omega") == TacticError("the Lean REPL exited (code 3): INTERNAL PANIC: out of memory")
    assert verifier.start(theorem) == LeanState(0, (START_GOAL,), 2)


# --------------------------------------------------------------------------- where Lean is not installed


def test_without_lean_the_repl_verifier_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no lake here
    with pytest.raises(LeanUnavailable) as raised:
        LeanReplVerifier(project_dir=tmp_path, repl=tmp_path / "repl")
    message = str(raised.value)
    assert message.startswith("the Lean verifier cannot start: Lean 4 is not installed here (`lake` is not on PATH).")
    for command in (
        "curl -sSfL https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh | sh -s -- -y",
        "git clone https://github.com/leanprover-community/mathlib4 && cd mathlib4 && git checkout <commit> && lake exe cache get",
        "git clone https://github.com/leanprover-community/repl && cd repl && git checkout <that revision> && lake build",
        "cd mathlib4 && lake env ../repl/.lake/build/bin/repl",
    ):
        assert command in message


def test_with_lake_but_no_repl_or_project_the_message_names_the_missing_part(monkeypatch, tmp_path):
    lake = tmp_path / "bin" / "lake"
    lake.parent.mkdir()
    lake.write_text("#!/bin/sh\nexit 0\n")
    lake.chmod(0o755)
    monkeypatch.setenv("PATH", str(lake.parent))
    monkeypatch.delenv("ALIGNTRAIN_LEAN_REPL", raising=False)
    with pytest.raises(LeanUnavailable, match=r"no REPL binary given \(argument `repl` or \$ALIGNTRAIN_LEAN_REPL\)"):
        default_command(tmp_path, None)
    repl = tmp_path / "repl"
    repl.write_text("#!/bin/sh\n")
    repl.chmod(0o755)
    with pytest.raises(LeanUnavailable, match="is not a Lean project \\(no lean-toolchain file\\)"):
        default_command(tmp_path / "nowhere", repl)
    (tmp_path / "lean-toolchain").write_text("leanprover/lean4:v4.9.0\n")
    assert default_command(tmp_path, repl) == [str(lake), "env", str(repl.resolve())]
    assert os.access(repl, os.X_OK)
