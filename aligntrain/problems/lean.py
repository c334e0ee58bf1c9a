"""Lean 4 theorem proving ("lean"): LeanDojo Benchmark 4 and MiniF2F, step rows and theorem rows (DCO §5.3).

DCO ("Rethinking Fine-Tuning when Scaling Test-Time Compute", Chen et al. 2025,
arXiv:2502.07154) §5.3 and App. B fine-tune Qwen2.5-Math-1.5B on the LeanDojo
benchmark (Lean 4, the *random* train/test split of Yang et al. 2023; 2,000 test
theorems) one tactic at a time, and evaluate proof search by pass@N on that test
set and on MiniF2F. This module reads both data sets from local files in their
published formats, maps them to rows, and grades proofs with a
:class:`~aligntrain.lean.verifier.LeanVerifier` (:mod:`aligntrain.lean`). The
embedded stand-in of the same study is :mod:`aligntrain.problems.rewrite`.

Formats targeted (from the public releases as known when this was written; no copy
could be fetched here, so the loaders were tested on hand-written files in these
schemas: docs/data.md, "Lean")
----------------------------------------------------------------------------------

* **LeanDojo Benchmark 4** (format ``LeanDojo``): the release folder
  ``leandojo_benchmark_4/`` with one folder per split strategy (``random/``,
  ``novel_premises/``), each holding ``train.json``, ``val.json`` and ``test.json``;
  a file is one JSON array of theorems. Fields relied on: ``url`` (str, the
  repository, mathlib4), ``commit`` (str), ``file_path`` (str), ``full_name`` (str),
  ``start`` and ``end`` (``[line, column]``, ints), ``traced_tactics`` (a list,
  empty for a theorem proved without tactics) of ``{tactic, annotated_tactic,
  state_before, state_after}``: ``tactic``, ``state_before``, ``state_after`` non-empty
  strings (``state_after`` is ``"no goals"`` after the last tactic);
  ``annotated_tactic`` is ``[text, [premise, ...]]`` when present (checked, unused:
  DCO's prover retrieves no premises). Other fields are ignored. The release's
  ``corpus.jsonl`` (premises) is not read.
* **MiniF2F, Lean 4** (format ``MiniF2F``): one JSONL file, a theorem per line, as in
  DeepSeek-Prover-V1.5's ``datasets/minif2f.jsonl``. Fields relied on: ``name``
  (str), ``split`` (``"valid"`` or ``"test"``, 244 theorems each), ``formal_statement``
  (str, ``theorem <name> ... := by``, a trailing ``sorry`` allowed); optional:
  ``header`` (str, the imports and ``open``s; default ``MINIF2F_HEADER``), ``goal``
  (str, the pretty-printed initial state). Other fields (``informal_prefix``) are ignored.

A row that does not fit stops the load with a
:class:`~aligntrain.problems.hub.DataRowError` naming the file, the row (its index
and name) and the field.

Rows [choice]
-------------

* **Step rows** (training; LeanDojo train and val): one per traced tactic, "state →
  tactic" as DCO §5.3 prompts the prover with the current proof state: prompt
  ``"[GOAL]\\n<state_before>\\n[PROOFSTEP]\\n"``, completion the tactic (tactics may span
  lines, so there is no stop text: EOS ends a completion). Ids
  ``lean-ld-L<level>-<16 hex>-s<index>``.
* **Theorem rows** (search; LeanDojo test, or MiniF2F): prompt the same frame around
  the initial state when the data gives it (LeanDojo: the first ``state_before``;
  MiniF2F: ``goal``), else ""; completion "" (the search writes the proof). Ids
  ``lean-<ld|mf>-L<level>-<16 hex>``.
* ``answer``: the theorem as JSON (:meth:`~aligntrain.lean.verifier.Theorem.to_json`:
  name, statement, header, initial state, location), so a row names the theorem a
  verifier starts. The hex is BLAKE2b of the source, file and full name.
* ``level``: the length of the traced proof, 1..4, 5 for five tactics or more; 0 when
  no traced proof is known (MiniF2F, term-mode proofs). DCO §5.3 reads its N_step
  trade-off by proof length (mean 4.2, median 2 on its training set).

Splits: ``train`` and ``validation`` are step rows of LeanDojo's ``train.json`` and
``val.json`` (theorems without traced tactics are left out), ``test`` theorem rows of
LeanDojo's ``test.json`` or MiniF2F's ``test`` split (``test_set``). ``sizes`` count
theorems, drawn without replacement (seeded) at the requested levels; a theorem's
step rows stay together, in order.

Grading: a completion for a theorem row is a whole proof, one tactic per line
[choice], replayed from the theorem's start by the configured verifier
(``check_proof``, at most ``max_steps`` tactics). The search itself (one tactic at a
time from step-row prompts) is not built here (pipelines/dco_lean/README.md).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, StrictInt, model_validator

from aligntrain.grading import Verdict
from aligntrain.lean.repl import LeanReplVerifier
from aligntrain.lean.standin import StandinVerifier
from aligntrain.lean.verifier import (
    MAX_PROOF_STEPS,
    LeanState,
    LeanVerifier,
    Location,
    StepResult,
    TacticError,
    Theorem,
    check_proof,
)
from aligntrain.lean.verifier import is_proved as _is_proved
from aligntrain.options import Options, Real
from aligntrain.problems import rows
from aligntrain.problems.hub import SPLITS, DataRowError, HubDataUnavailable, text_field
from aligntrain.validation import check_choices, check_int, is_int

NAME = "lean"
LEVELS = (0, 1, 2, 3, 4, 5)
STOP_TEXT = ""
PROOF_CLASS = "proved"
LEANDOJO, MINIF2F = "leandojo", "minif2f"
_TAGS = {LEANDOJO: "ld", MINIF2F: "mf"}
#: the file of each study split in a LeanDojo Benchmark 4 split folder
LEANDOJO_FILES = {"train": "train.json", "validation": "val.json", "test": "test.json"}
LEANDOJO_STRATEGIES = ("random", "novel_premises")
MINIF2F_SPLITS = ("valid", "test")
#: [choice] MiniF2F's header where a row has none (the one DeepSeek-Prover's file gives every row)
MINIF2F_HEADER = (
    "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\nopen BigOperators Real Nat Topology Rat\n\n"
)
NO_GOALS = "no goals"
_PROMPT = re.compile(r"\[GOAL\]\n(?P<state>.+)\n\[PROOFSTEP\]\n", re.S)
_STATEMENT = re.compile(r"\s*(?:theorem|lemma)\s+\S")
_STATEMENT_END = re.compile(r"(?::=\s*by|:=|sorry)\s*\Z")
_ID = re.compile(r"lean-(?P<tag>ld|mf)-L(?P<level>\d)-(?P<digest>[0-9a-f]{16})(?:-s(?P<step>0|[1-9][0-9]*))?")


@dataclass(frozen=True)
class TracedStep:
    """One traced tactic of LeanDojo: the tactic and the pretty-printed states around it."""

    tactic: str
    state_before: str
    state_after: str


@dataclass(frozen=True)
class TracedTheorem:
    """A theorem and its traced tactics (none for MiniF2F, or a proof without tactics)."""

    theorem: Theorem
    steps: tuple[TracedStep, ...]

    @property
    def level(self) -> int:
        return min(len(self.steps), 5)


# ---------------------------------------------------------------------------
# Reading the files


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataRowError(f"{path}: cannot be read as JSON: {type(err).__name__}: {err}") from None


def _position(record: Mapping[str, Any], field: str, where: str) -> tuple[int, int]:
    value = record.get(field)
    if value is None:
        raise DataRowError(f"{where}: field {field!r} is missing (null)")
    if not (isinstance(value, list) and len(value) == 2 and all(is_int(v) and not isinstance(v, bool) for v in value)):
        raise DataRowError(f"{where}: field {field!r} must be [line, column] (two ints), got {value!r:.80}")
    line, column = int(value[0]), int(value[1])
    if line < 1 or column < 0:
        raise DataRowError(f"{where}: field {field!r} must have line >= 1 and column >= 0, got {value!r}")
    return line, column


def _traced_step(record: Any, where: str) -> TracedStep:
    if not isinstance(record, dict):
        raise DataRowError(f"{where}: must be an object, got {type(record).__name__}")
    annotated = record.get("annotated_tactic")
    if annotated is not None and not (
        isinstance(annotated, list) and len(annotated) == 2 and isinstance(annotated[0], str)
        and isinstance(annotated[1], list)
    ):  # fmt: skip
        raise DataRowError(f"{where}: field 'annotated_tactic' must be [text, [premises]], got {annotated!r:.80}")
    return TracedStep(
        tactic=text_field(record, "tactic", where),
        state_before=text_field(record, "state_before", where),
        state_after=text_field(record, "state_after", where),
    )


def leandojo_theorem(record: Any, where: str) -> TracedTheorem:
    """One theorem object of a LeanDojo Benchmark 4 file; DataRowError naming ``where`` and the field."""
    if not isinstance(record, dict):
        raise DataRowError(f"{where}: must be an object, got {type(record).__name__}")
    location = Location(
        url=text_field(record, "url", where),
        commit=text_field(record, "commit", where),
        file_path=text_field(record, "file_path", where),
        start=_position(record, "start", where),
        end=_position(record, "end", where),
    )
    if location.end < location.start:
        raise DataRowError(f"{where}: field 'end' {list(location.end)} comes before 'start' {list(location.start)}")
    name = text_field(record, "full_name", where)
    traced = record.get("traced_tactics")
    if traced is None:
        raise DataRowError(f"{where}: field 'traced_tactics' is missing (null)")
    if not isinstance(traced, list):
        raise DataRowError(f"{where}: field 'traced_tactics' must be a list, got {type(traced).__name__}")
    steps = tuple(_traced_step(step, f"{where}: field 'traced_tactics'[{i}]") for i, step in enumerate(traced))
    theorem = Theorem(
        name=name,
        source=LEANDOJO,
        initial_state=steps[0].state_before if steps else None,
        location=location,
    )
    return TracedTheorem(theorem, steps)


def read_leandojo(path: str | Path) -> list[TracedTheorem]:
    """The theorems of one LeanDojo Benchmark 4 split file (a JSON array), each row checked."""
    path = Path(path)
    records = _load_json(path)
    if not isinstance(records, list):
        raise DataRowError(f"{path}: must be a JSON array of theorems, got a {type(records).__name__}")
    theorems = []
    for index, record in enumerate(records):
        name = record.get("full_name") if isinstance(record, dict) else None
        theorems.append(leandojo_theorem(record, f"{path}: row {index}" + (f" (full_name {name!r})" if name else "")))
    return theorems


def minif2f_theorem(record: Any, where: str) -> tuple[str, TracedTheorem]:
    """(split, theorem) of one MiniF2F line; DataRowError naming ``where`` and the field."""
    if not isinstance(record, dict):
        raise DataRowError(f"{where}: must be an object, got {type(record).__name__}")
    name = text_field(record, "name", where)
    split = text_field(record, "split", where)
    if split not in MINIF2F_SPLITS:
        raise DataRowError(f"{where}: field 'split' must be one of {MINIF2F_SPLITS}, got {split!r}")
    statement = text_field(record, "formal_statement", where)
    if not _STATEMENT.match(statement) or not _STATEMENT_END.search(statement):
        raise DataRowError(
            f"{where}: field 'formal_statement' must be 'theorem <name> ... := by' (a trailing sorry allowed), "
            f"got {statement[:80]!r}"
        )
    header = text_field(record, "header", where) if record.get("header") is not None else MINIF2F_HEADER
    goal = text_field(record, "goal", where) if record.get("goal") is not None else None
    theorem = Theorem(name=name, source=MINIF2F, statement=statement, header=header, initial_state=goal)
    return split, TracedTheorem(theorem, ())


def read_minif2f(path: str | Path, split: str) -> list[TracedTheorem]:
    """The theorems of MiniF2F's ``split`` ("valid" or "test") in a JSONL file, every row checked."""
    if split not in MINIF2F_SPLITS:
        raise ValueError(f"split must be one of {MINIF2F_SPLITS}, got {split!r}")
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataRowError(f"{path}: cannot be read: {type(err).__name__}: {err}") from None
    theorems = []
    for index, line in enumerate(line for line in lines if line.strip()):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataRowError(f"{path}: row {index}: is not JSON: {err}") from None
        name = record.get("name") if isinstance(record, dict) else None
        where = f"{path}: row {index}" + (f" (name {name!r})" if name else "")
        row_split, theorem = minif2f_theorem(record, where)
        if row_split == split:
            theorems.append(theorem)
    return theorems


# ---------------------------------------------------------------------------
# Rows


def format_prompt(state: str) -> str:
    """The prover's prompt: ``"[GOAL]\\n<state>\\n[PROOFSTEP]\\n"``."""
    return f"[GOAL]\n{state}\n[PROOFSTEP]\n"


def parse_prompt(prompt: str) -> str:
    """The state of a prompt ``format_prompt`` wrote; ValueError otherwise."""
    match = _PROMPT.fullmatch(prompt) if isinstance(prompt, str) else None
    if match is None:
        raise ValueError(f"prompt is not of the form '[GOAL]\\n<state>\\n[PROOFSTEP]\\n': {str(prompt)[:60]!r}")
    return match["state"]


def theorem_digest(theorem: Theorem) -> str:
    """16 hex digits of BLAKE2b of the theorem's source, file and full name (the stable part of its ids)."""
    file_path = theorem.location.file_path if theorem.location else ""
    key = "\x00".join((theorem.source, file_path, theorem.name))
    return rows.text_digest(key)


def theorem_id(theorem: Theorem, level: int) -> str:
    """``lean-<ld|mf>-L<level>-<16 hex>``; a step row adds ``-s<index>``."""
    return f"{NAME}-{_TAGS[theorem.source]}-L{level}-{theorem_digest(theorem)}"


def step_rows(traced: TracedTheorem) -> list[dict[str, Any]]:
    """One "state → tactic" row per traced tactic, in order (SFT, DCO_step)."""
    answer = traced.theorem.to_json()
    base = theorem_id(traced.theorem, traced.level)
    return [
        {
            "id": f"{base}-s{index}",
            "level": traced.level,
            "prompt": format_prompt(step.state_before),
            "completion": step.tactic,
            "answer": answer,
        }
        for index, step in enumerate(traced.steps)
    ]


def theorem_row(traced: TracedTheorem) -> dict[str, Any]:
    """The row a search starts from: the initial state's prompt (or ""), no completion, the theorem."""
    state = traced.theorem.initial_state
    return {
        "id": theorem_id(traced.theorem, traced.level),
        "level": traced.level,
        "prompt": format_prompt(state) if state is not None else "",
        "completion": "",
        "answer": traced.theorem.to_json(),
    }


def theorem_of(row: Mapping[str, Any]) -> Theorem:
    """The theorem a row names (its ``answer``); ValueError naming the row otherwise."""
    try:
        return Theorem.from_json(row["answer"])
    except ValueError as err:
        raise ValueError(f"row {row.get('id')!r}: field 'answer' is not a theorem: {err}") from None


def validate_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

    Fields and types; the answer is a theorem of a known source; the id is this
    theorem's (tag, digest) at the row's level; a step row has a state prompt and a
    non-empty tactic (its step 0 starts from the theorem's initial state); a theorem
    row has the initial state's prompt (or "") and no completion.
    """
    bad = rows.check_row_shape(row, NAME, LEVELS)
    try:
        theorem = Theorem.from_json(row["answer"])
    except ValueError as err:
        raise bad("answer", f"is not a theorem: {err}") from None
    if theorem.source not in _TAGS:
        raise bad("answer", f"names the source {theorem.source!r}, not one of {sorted(_TAGS)}")
    match = _ID.fullmatch(row["id"])
    expected = theorem_id(theorem, row["level"])
    if match is None or row["id"] != expected + (f"-s{match['step']}" if match["step"] is not None else ""):
        raise bad("id", f"is not {expected}[-s<step>] (the theorem's source, the row's level, the theorem's hash)")
    if match["step"] is None:
        state = theorem.initial_state
        if row["prompt"] != (format_prompt(state) if state is not None else ""):
            raise bad("prompt", "is not the theorem's initial state in the prompt frame")
        if row["completion"] != "":
            raise bad("completion", "must be empty in a theorem row (the search writes the proof)")
        return
    try:
        state = parse_prompt(row["prompt"])
    except ValueError as err:
        raise bad("prompt", str(err)) from None
    if match["step"] == "0" and state != theorem.initial_state:
        raise bad("prompt", "of step 0 is not the theorem's initial state")
    if row["level"] == 0:
        raise bad("level", "is 0 (no traced proof), but the row is a step of one")
    if not row["completion"].strip():
        raise bad("completion", "is empty: a step row's completion is its tactic")


def _draw(pool: Sequence[TracedTheorem], n: int, split: str, levels: Sequence[int], seed: int) -> list[TracedTheorem]:
    fitting = [traced for traced in pool if traced.level in levels]
    if n > len(fitting):
        raise ValueError(
            f"sizes[{split!r}] asks for {n} theorems but lean's {split} split has {len(fitting)} at levels "
            f"{list(levels)}; ask for at most {len(fitting)}"
        )
    return random.Random(f"{NAME}:{seed}:{split}").sample(list(fitting), n)


# ---------------------------------------------------------------------------
# Problem object (what aligntrain.problems.get_problem("lean") returns)


class LeanProblem(rows.RowStore, Options):
    """Lean 4 theorem proving (DCO §5.3): LeanDojo Benchmark 4 step rows, LeanDojo or MiniF2F theorems, rewards 0/1."""

    name: ClassVar[str] = NAME
    binary_rewards: ClassVar[bool] = True
    levels: ClassVar[tuple[int, ...]] = LEVELS
    stop_text: ClassVar[str] = STOP_TEXT
    #: a completion's class needs the theorem it proves (the row): grade() has it
    answer_class_needs_row: ClassVar[bool] = True

    leandojo: str | None = Field(
        None,
        description="The folder of the LeanDojo Benchmark 4 release (leandojo_benchmark_4/, holding random/ and "
        "novel_premises/); needed for train, validation and a LeanDojo test set.",
    )
    leandojo_split: Literal["random", "novel_premises"] = Field(
        "random", description="LeanDojo's split strategy (DCO App. B: random)."
    )
    minif2f: str | None = Field(
        None, description="The MiniF2F (Lean 4) JSONL file (name, split, formal_statement, ...); for test_set minif2f."
    )
    test_set: Literal["leandojo", "minif2f"] = Field(
        "minif2f",
        description="The test theorems: MiniF2F's test split, or LeanDojo's test.json (which the REPL cannot start "
        "yet: with verifier 'repl' it is refused).",
    )
    verifier: Literal["repl", "standin"] = Field(
        "repl", description="Who checks proofs: the Lean 4 REPL (needs Lean: README) or the toy stand-in prover."
    )
    repl_project: str | None = Field(None, description="The Lean project (Mathlib built) the REPL runs in.")
    repl_binary: str | None = Field(None, description="The REPL binary (None: $ALIGNTRAIN_LEAN_REPL).")
    timeout_s: Real = Field(
        60.0, gt=0, description="Seconds one verifier call may take (a choice: App. B bounds theorems)."
    )
    max_steps: StrictInt = Field(MAX_PROOF_STEPS, ge=1, description="Most tactics in one proof (DCO App. B: 50).")

    _verifier: LeanVerifier | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _repl_starts_what_it_can(self) -> LeanProblem:
        # Refused here, before any training: the search would stop at the first test theorem.
        if self.verifier == "repl" and self.test_set == "leandojo":
            raise ValueError(
                "test_set 'leandojo' with verifier 'repl': the REPL cannot start LeanDojo theorems yet (the "
                "benchmark gives their location, not their statement; pipelines/dco_lean/README.md, 'What "
                "remains'): use test_set 'minif2f', or verifier 'standin'"
            )
        return self

    # ----------------------------------------------------------------- data

    def _leandojo_file(self, split: str) -> Path:
        if self.leandojo is None:
            raise HubDataUnavailable(
                f"problem {NAME!r}: option `leandojo` is not set; it is the folder of the LeanDojo Benchmark 4 "
                "release (leandojo_benchmark_4/), which this machine does not have: download the release where "
                "the internet is reachable (pipelines/dco_lean/README.md) and point `leandojo` at it"
            )
        path = Path(self.leandojo) / self.leandojo_split / LEANDOJO_FILES[split]
        if not path.is_file():
            raise HubDataUnavailable(f"problem {NAME!r}: no file {path} (the {split} split of LeanDojo Benchmark 4)")
        return path

    def load_theorems(self, split: str) -> list[TracedTheorem]:
        """Every theorem of ``split`` (train and validation: LeanDojo; test: ``test_set``), in file order."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
        if split == "test" and self.test_set == MINIF2F:
            if self.minif2f is None or not Path(self.minif2f).is_file():
                raise HubDataUnavailable(
                    f"problem {NAME!r}: option `minif2f` is {self.minif2f!r}, not a file; it is the MiniF2F (Lean 4) "
                    "JSONL file (pipelines/dco_lean/README.md)"
                )
            return read_minif2f(self.minif2f, "test")
        return read_leandojo(self._leandojo_file(split))

    def step_rows_of(self, rows_: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The train rows as they are: Lean's train and validation rows are step rows already (``dco_step``)."""
        return [dict(row) for row in rows_]

    def generate_splits(
        self, sizes: Mapping[str, int], levels: Sequence[int], seed: int
    ) -> dict[str, list[dict[str, Any]]]:
        """``sizes[split]`` theorems per split: step rows for train and validation, theorem rows for test."""
        levels = check_choices(levels, "levels", LEVELS)
        chosen = {}
        for split, n in sizes.items():
            n = check_int(n, f"sizes[{split!r}]", minimum=0)
            pool = self.load_theorems(split)
            if split == "test":
                chosen[split] = [theorem_row(traced) for traced in _draw(pool, n, split, levels, seed)]
            else:
                traced = _draw([t for t in pool if t.steps], n, split, levels, seed)
                chosen[split] = [row for theorem in traced for row in step_rows(theorem)]
        return chosen

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        """``n`` step texts (prompt + tactic) drawn i.i.d. from the train split."""
        n = check_int(n, "n", minimum=0)
        if n == 0:
            return []
        train = [row for traced in self.load_theorems("train") for row in step_rows(traced)]
        if not train:
            raise ValueError("the train split has no traced tactic: no pretraining corpus")
        rng = random.Random(f"{NAME}:pretrain:{seed}")
        return [row["prompt"] + row["completion"] for row in rng.choices(train, k=n)]

    def validate_row(self, row: Mapping[str, Any]) -> None:
        validate_row(row)

    # ----------------------------------------------------------------- verifying

    def make_verifier(self) -> LeanVerifier:
        """The verifier the options name, started once (LeanUnavailable for ``repl`` where Lean is missing)."""
        if self._verifier is None:
            if self.verifier == "standin":
                self._verifier = StandinVerifier(timeout_s=self.timeout_s)
            else:
                self._verifier = LeanReplVerifier(self.repl_project, self.repl_binary, timeout_s=self.timeout_s)
        return self._verifier

    def start(self, row: Mapping[str, Any]) -> LeanState | TacticError:
        """The first proof state of the row's theorem."""
        return self.make_verifier().start(theorem_of(row))

    def check_step(self, state: LeanState, tactic: object) -> StepResult:
        """The state after ``tactic``, ProofFinished, or TacticError (the verifier's ``step``)."""
        return self.make_verifier().step(state, tactic)

    def is_proved(self, result: object) -> bool:
        """True when a step result finished the proof."""
        return _is_proved(result)

    # ------------------------------------------- the test-time search (aligntrain.rollouts.search)

    #: a tactic ends with EOS (step rows' completions are bare tactics) or a newline
    tactic_stops: ClassVar[tuple[str, ...]] = ("\n",)

    @property
    def max_search_steps(self) -> int:
        return self.max_steps

    def search_start(self, row: Mapping[str, Any]) -> LeanState | None:
        state = self.start(row)
        return None if isinstance(state, TacticError) else state

    def search_prompt(self, row: Mapping[str, Any], state: LeanState, tactics: Sequence[str]) -> str:
        """The prover's prompt of the current state (LeanDojo's form: the state, not the tactics so far)."""
        return format_prompt(state.text)

    def search_step(self, state: LeanState, tactic: str) -> tuple[object | None, bool]:
        result = self.check_step(state, tactic)
        if isinstance(result, TacticError):
            return None, False
        return result, self.is_proved(result)

    def proof_text(self, tactics: Sequence[str]) -> str:
        """One tactic per line, as ``grade`` reads a whole proof."""
        return "".join(f"{tactic}\n" for tactic in tactics)

    def grade(self, completion: str, row: Mapping[str, Any]) -> Verdict:
        """A whole proof (one tactic per line) for a theorem row, replayed by the verifier.

        The verdict's ``answer`` and ``answer_class`` are ``"proved"`` when it proves the theorem."""
        match = _ID.fullmatch(str(row.get("id")))
        if match is not None and match["step"] is not None:
            raise ValueError(
                f"row {row['id']!r} is a step row: its tactic is checked inside a search (check_step), not graded alone"
            )
        if not isinstance(completion, str):
            return Verdict(None, None, False)
        tactics = [line.strip() for line in completion.splitlines() if line.strip()]
        if not tactics:
            return Verdict(None, None, False)
        check = check_proof(self.make_verifier(), theorem_of(row), tactics, self.max_steps)
        return Verdict(PROOF_CLASS, PROOF_CLASS, True) if check.proved else Verdict(None, None, False)

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """1.0 if the completion proves the row's theorem, else 0.0."""
        return self.grade(completion, row).reward

    def gold_class(self, row: Mapping[str, Any]) -> str:
        """``"proved"``: the class of every complete proof."""
        return PROOF_CLASS

    def answer_class(self, completion: str) -> str | None:
        """Not available: whether a proof proves anything depends on the row's theorem; ``grade`` has it."""
        raise ValueError(
            f"problem {self.name!r}: a proof's class depends on the theorem it proves; use "
            "grade(completion, row).answer_class (RL rules that need answer classes are refused for this problem)"
        )

    def close(self) -> None:
        """Stop the verifier's process, if one runs."""
        if self._verifier is not None:
            self._verifier.close()
            self._verifier = None
