"""What a Lean verifier is: theorems, proof states, step results, and the ``LeanVerifier`` protocol.

A verifier starts a theorem (``start``: its first proof state) and applies one
tactic to a proof state (``step``): the result is the next state, a
:class:`TacticError`, or :class:`ProofFinished` when no goal is left. Every call
is bounded by ``timeout_s``; a call that runs out returns
``TacticError(..., timed_out=True)``. Tactics are text written by a model: no
verifier here executes them in this process. :class:`~aligntrain.lean.repl.LeanReplVerifier`
sends them to a Lean 4 REPL process; :class:`~aligntrain.lean.standin.StandinVerifier`
reads them with a whitelist parser over a toy goal language.

``check_proof`` replays a list of tactics from a theorem's start, as
``aligntrain.problems.rewrite.check_proof`` does for the embedded step-checked
problem; ``is_proved`` says whether a step result finished the proof.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, Union, runtime_checkable

#: DCO App. B: at most 50 proof steps per search path
MAX_PROOF_STEPS = 50
#: [choice] longest tactic a verifier accepts (LeanDojo's longest traced tactics are a few thousand characters)
MAX_TACTIC_CHARS = 4096
#: [choice] seconds one start or step may take before it counts as failed (the paper bounds whole theorems: App. B)
DEFAULT_TIMEOUT_S = 60.0

# Words a tactic may not contain, checked before any verifier sees it. `sorry`/`admit` close any goal
# without a proof; the others run meta-programs or I/O inside Lean (Lean is a proof checker, not an
# operating-system sandbox: run the REPL under one too; pipelines/dco_lean/README.md).
REFUSED_WORDS = (
    "sorry",
    "admit",
    "sorryAx",
    "run_tac",
    "run_cmd",
    "run_meta",
    "by_elab",
    "#eval",
    "#exit",
    "IO",
    "unsafe",
    "implemented_by",
    "extern",
)
_REFUSED = re.compile(r"(?<![\w#])(?:" + "|".join(re.escape(word) for word in REFUSED_WORDS) + r")(?![\w'])")


class LeanUnavailable(RuntimeError):
    """Lean (elan, lake, the REPL) is not installed or cannot start here; the message says what to install."""


@dataclass(frozen=True)
class Location:
    """Where a theorem is declared: LeanDojo's ``url``, ``commit``, ``file_path``, ``start``, ``end``.

    ``start`` and ``end`` are LeanDojo's ``[line, column]`` pairs of the declaration (lines from 1).
    """

    url: str
    commit: str
    file_path: str
    start: tuple[int, int]
    end: tuple[int, int]


#: a theorem's text fields in JSON, and whether each may be null
_THEOREM_TEXTS = (("name", False), ("source", False), ("header", False), ("statement", True), ("initial_state", True))


@dataclass(frozen=True)
class Theorem:
    """A theorem a verifier can start.

    ``name``: its full name (LeanDojo ``full_name``, MiniF2F ``name``). ``statement``:
    the Lean declaration without its proof, ending in ``:= by`` (MiniF2F's
    ``formal_statement``); None when the data set gives only a location (LeanDojo).
    ``header``: the imports and options the statement needs. ``initial_state``: the
    pretty-printed goal at the start (LeanDojo: the first traced tactic's
    ``state_before``; MiniF2F: ``goal`` where the file has it), else None.
    ``source``: the data set (``leandojo`` or ``minif2f``); ``location``: LeanDojo's.
    """

    name: str
    source: str
    statement: str | None = None
    header: str = ""
    initial_state: str | None = None
    location: Location | None = None

    def to_json(self) -> str:
        """The theorem as one line of JSON, keys sorted (a row's ``answer``: ``from_json`` reads it back)."""
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Theorem:
        """The theorem ``to_json`` wrote; ValueError naming what is wrong otherwise."""
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"a theorem is a JSON object: {err}") from None
        fields = {"name", "source", "statement", "header", "initial_state", "location"}
        if not isinstance(data, dict) or set(data) != fields:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"a theorem is a JSON object with keys {sorted(fields)}, got {keys}")
        for key, optional in _THEOREM_TEXTS:
            if not (isinstance(data[key], str) or (optional and data[key] is None)):
                raise ValueError(f"a theorem's {key!r} must be {'a str or null' if optional else 'a str'}")
        location = data.pop("location")
        if location is not None:
            location = _location(location)
        return cls(location=location, **data)


def _location(data: object) -> Location:
    """A ``Location`` from its JSON object; ValueError naming the bad key."""
    keys = ("url", "commit", "file_path", "start", "end")
    if not isinstance(data, dict) or set(data) != set(keys):
        raise ValueError(f"a theorem's location is an object with keys {list(keys)}")
    for key in keys[:3]:
        if not isinstance(data[key], str):
            raise ValueError(f"a theorem's location {key!r} must be a str")
    for key in keys[3:]:
        pair = data[key]
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)):
            raise ValueError(f"a theorem's location {key!r} must be [line, column]")
    return Location(data["url"], data["commit"], data["file_path"], tuple(data["start"]), tuple(data["end"]))


@dataclass(frozen=True)
class LeanState:
    """An open proof state: the verifier's handle (``proof_state``, valid within ``session``) and its goals.

    ``goals`` are pretty-printed goals, hypotheses then ``⊢ target``; ``text`` joins
    them with blank lines (the form of LeanDojo's ``state_before``, as far as this
    module relies on it).
    """

    proof_state: int
    goals: tuple[str, ...]
    session: int = 0

    @property
    def text(self) -> str:
        return "\n\n".join(self.goals)


@dataclass(frozen=True)
class ProofFinished:
    """The tactic closed the last goal: the theorem is proved (no ``sorry``: verifiers refuse it)."""

    proof_state: int
    session: int = 0


@dataclass(frozen=True)
class TacticError:
    """A start or step that failed: the tactic (or statement) was refused, or the call ran out of time."""

    reason: str
    timed_out: bool = False


StepResult = Union[LeanState, ProofFinished, TacticError]  # noqa: UP007 - a runtime alias for isinstance users


@runtime_checkable
class LeanVerifier(Protocol):
    """A proof assistant behind two calls, each bounded by ``timeout_s`` seconds.

    ``start(theorem)``: the theorem's first proof state, or TacticError (its
    statement does not elaborate, or the call timed out). ``step(state, tactic)``:
    the state after ``tactic``, ProofFinished, or TacticError; never raises for
    any tactic text. Both raise :class:`LeanUnavailable` when the proof assistant
    cannot run at all. ``close()`` ends whatever the verifier started.
    """

    timeout_s: float

    def start(self, theorem: Theorem) -> LeanState | TacticError: ...

    def step(self, state: LeanState, tactic: object) -> StepResult: ...

    def close(self) -> None: ...


def screen_tactic(tactic: object) -> str | TacticError:
    """``tactic`` if it is text a verifier may see, else TacticError: not a str, empty, longer than
    ``MAX_TACTIC_CHARS``, a NUL character, or a word of ``REFUSED_WORDS``."""
    if not isinstance(tactic, str):
        return TacticError(f"a tactic is text, got {type(tactic).__name__}")
    if not tactic.strip():
        return TacticError("empty tactic")
    if len(tactic) > MAX_TACTIC_CHARS:
        return TacticError(f"tactic longer than {MAX_TACTIC_CHARS} characters")
    if "\x00" in tactic:
        return TacticError("tactic has a NUL character")
    refused = _REFUSED.search(tactic)
    if refused is not None:
        return TacticError(f"tactic uses {refused.group(0)!r}, which is refused (it proves nothing or runs code)")
    return tactic


def is_proved(result: object) -> bool:
    """True when a step result finished the proof."""
    return isinstance(result, ProofFinished)


@dataclass(frozen=True)
class ProofCheck:
    """A proof replayed tactic by tactic (as ``rewrite.ProofCheck``).

    ``states``: the start and each open state reached; ``failure``: the first
    TacticError (of the start or of a tactic; None: none); ``proved``: every tactic
    applied and the last one finished the proof.
    """

    states: tuple[LeanState, ...]
    failure: TacticError | None
    proved: bool


def check_proof(
    verifier: LeanVerifier, theorem: Theorem, tactics: Sequence[object], max_steps: int = MAX_PROOF_STEPS
) -> ProofCheck:
    """Start ``theorem`` and apply ``tactics`` in order; stops at the first failure or at the finished proof.

    More than ``max_steps`` tactics fail before any is sent; a tactic after the proof
    is finished fails (nothing is left to prove).
    """
    if len(tactics) > max_steps:
        return ProofCheck((), TacticError(f"more than {max_steps} tactics"), False)
    first = verifier.start(theorem)
    if isinstance(first, TacticError):
        return ProofCheck((), first, False)
    states: list[LeanState] = [first]
    for index, tactic in enumerate(tactics):
        result = verifier.step(states[-1], tactic)
        if isinstance(result, TacticError):
            return ProofCheck(tuple(states), result, False)
        if isinstance(result, ProofFinished):
            if index + 1 < len(tactics):
                return ProofCheck(
                    tuple(states), TacticError(f"tactic {index + 2} comes after the proof is finished"), False
                )
            return ProofCheck(tuple(states), None, True)
        states.append(result)
    return ProofCheck(tuple(states), None, False)
