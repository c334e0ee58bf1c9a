"""Lean 4 theorem proving: the verifier layer of DCO §5.3's study (pipelines/dco_lean/README.md).

- :mod:`aligntrain.lean.verifier`: ``Theorem``, the step results (``LeanState``,
  ``ProofFinished``, ``TacticError``), the ``LeanVerifier`` protocol
  (``start(theorem)``, ``step(state, tactic)``, each bounded by ``timeout_s``),
  ``check_proof`` and ``is_proved``.
- :mod:`aligntrain.lean.repl`: ``LeanReplVerifier``, a client of the Lean 4 REPL
  (leanprover-community/repl) process; it raises ``LeanUnavailable``, naming what
  to install, where Lean is not installed (as on this project's machines).
- :mod:`aligntrain.lean.standin`: ``StandinVerifier``, the same interface over a toy
  propositional goal language, for tests and CPU runs.

The data (LeanDojo Benchmark 4, MiniF2F) is read by :mod:`aligntrain.problems.lean`.
"""

from aligntrain.lean.repl import LeanReplError, LeanReplVerifier
from aligntrain.lean.standin import StandinVerifier
from aligntrain.lean.verifier import (
    MAX_PROOF_STEPS,
    LeanState,
    LeanUnavailable,
    LeanVerifier,
    Location,
    ProofCheck,
    ProofFinished,
    StepResult,
    TacticError,
    Theorem,
    check_proof,
    is_proved,
    screen_tactic,
)

__all__ = [
    "MAX_PROOF_STEPS",
    "LeanReplError",
    "LeanReplVerifier",
    "LeanState",
    "LeanUnavailable",
    "LeanVerifier",
    "Location",
    "ProofCheck",
    "ProofFinished",
    "StandinVerifier",
    "StepResult",
    "TacticError",
    "Theorem",
    "check_proof",
    "is_proved",
    "screen_tactic",
]
