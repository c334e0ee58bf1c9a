"""A Lean verifier that talks to a Lean 4 REPL process (leanprover-community/repl) over stdin/stdout.

The REPL reads JSON objects from stdin, each followed by a blank line, and writes
one JSON object per request, followed by a blank line. Two requests are used:

- a command, ``{"cmd": "<Lean text>"}``, or ``{"cmd": ..., "env": n}`` to run it in
  the environment an earlier command left: the reply has ``env`` (the new
  environment), ``messages`` (``{severity, pos, endPos, data}``) and ``sorries``
  (``{proofState, pos, endPos, goal}``, one per ``sorry``). A theorem is started by
  running its header once (imports may only come in a command without ``env``),
  then its statement with its proof replaced by ``sorry``: the sorry's
  ``proofState`` is the first state.
- a tactic, ``{"tactic": "<tactic>", "proofState": n}``: the reply has the new
  ``proofState`` and its ``goals`` (pretty-printed; ``[]`` when none is left), and
  ``messages``/``sorries`` as above; newer REPL versions add ``proofStatus``
  (``"Completed"`` for a finished proof without ``sorry``). A request the REPL
  cannot run at all is answered ``{"message": "..."}``.

(This is the protocol as this module relies on it, written from the REPL's
README; no Lean was available to check it here: pipelines/dco_lean/README.md.)

Safety [choice]: model text is never executed in this process; it is JSON-encoded
(so it cannot end a request early) and sent to Lean. Before it is sent,
``screen_tactic`` refuses ``sorry``/``admit`` and the known ways to run code from a
tactic (``run_tac``, ``#eval``, ``IO``, …). Lean checks proofs; it does not confine
the code a meta-program runs, so run the REPL itself under an operating-system
sandbox (no network, a scratch directory, memory and process limits) where the
tactics come from a model: ``command`` takes any wrapper that starts it.

Time: every request waits at most ``timeout_s`` (the header, which imports
Mathlib, ``header_timeout_s``). A request that runs out kills the process (its
process group); the next call starts a new one (a new ``session``): states of the
old session are refused, since their numbers mean nothing to the new process.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aligntrain.lean.verifier import (
    DEFAULT_TIMEOUT_S,
    LeanState,
    LeanUnavailable,
    ProofFinished,
    StepResult,
    TacticError,
    Theorem,
    screen_tactic,
)

REPL_URL = "https://github.com/leanprover-community/repl"
MATHLIB_URL = "https://github.com/leanprover-community/mathlib4"
ELAN_INSTALL = "curl -sSfL https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh | sh -s -- -y"
#: the environment variable naming the REPL binary when ``repl`` is not given
REPL_ENV = "ALIGNTRAIN_LEAN_REPL"
#: [choice] seconds for the header command (``import Mathlib`` loads Mathlib's .olean files)
DEFAULT_HEADER_TIMEOUT_S = 600.0
#: the longest reply read (a reply is goals and messages; more is a broken process)
MAX_REPLY_BYTES = 16 << 20
_DELIMITER = b"\n\n"


class LeanReplError(RuntimeError):
    """The REPL answered outside its protocol, or the header (imports) does not elaborate: a setup fault."""


def install_instructions(reason: str) -> str:
    """What to install, and the commands a user runs, for ``LeanReplVerifier``; ``reason`` says what is missing."""
    return (
        f"the Lean verifier cannot start: {reason}. It runs the Lean 4 REPL ({REPL_URL}) inside a Lean project\n"
        "that has Mathlib. Lean cannot be installed on this project's development machines; where it can:\n"
        "  1. elan, the Lean toolchain manager (it installs `lean` and `lake`):\n"
        f"       {ELAN_INSTALL}\n"
        "       source ~/.elan/env\n"
        "  2. Mathlib at the commit the theorems come from (LeanDojo Benchmark 4's `commit` field), with its\n"
        "     prebuilt files:\n"
        f"       git clone {MATHLIB_URL} && cd mathlib4 && git checkout <commit> && lake exe cache get && cd ..\n"
        "  3. the REPL, at a revision whose lean-toolchain is mathlib4's (cat mathlib4/lean-toolchain):\n"
        f"       git clone {REPL_URL} && cd repl && git checkout <that revision> && lake build && cd ..\n"
        "then: LeanReplVerifier(project_dir='mathlib4', repl='repl/.lake/build/bin/repl'), which runs\n"
        "  cd mathlib4 && lake env ../repl/.lake/build/bin/repl\n"
        f"(or set {REPL_ENV} to the REPL binary; pipelines/dco_lean/README.md)"
    )


def default_command(project_dir: str | os.PathLike[str] | None, repl: str | os.PathLike[str] | None) -> list[str]:
    """``lake env <repl>``, to run in ``project_dir``; LeanUnavailable (what to install) when a part is missing."""
    lake = shutil.which("lake")
    if lake is None:
        raise LeanUnavailable(install_instructions("Lean 4 is not installed here (`lake` is not on PATH)"))
    repl = repl if repl is not None else os.environ.get(REPL_ENV)
    if repl is None:
        raise LeanUnavailable(install_instructions(f"no REPL binary given (argument `repl` or ${REPL_ENV})"))
    if not (Path(repl).is_file() and os.access(repl, os.X_OK)):
        raise LeanUnavailable(install_instructions(f"the REPL binary {str(repl)!r} does not exist or cannot run"))
    project = Path(project_dir) if project_dir is not None else None
    if project is None or not (project / "lean-toolchain").is_file():
        raise LeanUnavailable(
            install_instructions(f"project_dir {str(project_dir)!r} is not a Lean project (no lean-toolchain file)")
        )
    return [lake, "env", str(Path(repl).resolve())]


# ---------------------------------------------------------------------------
# The protocol: encoding requests, reading replies


def encode_command(cmd: str, env: int | None = None) -> bytes:
    """The request that runs the Lean text ``cmd`` (in environment ``env``, if given), with its blank line."""
    request: dict[str, Any] = {"cmd": cmd}
    if env is not None:
        request["env"] = env
    return _encode(request)


def encode_tactic(tactic: str, proof_state: int) -> bytes:
    """The request that runs ``tactic`` on proof state ``proof_state``, with its blank line."""
    return _encode({"tactic": tactic, "proofState": proof_state})


def _encode(request: Mapping[str, Any]) -> bytes:
    # ensure_ascii=False: UTF-8 as is (Mathlib's 𝓝 would otherwise be a surrogate pair of \u escapes).
    # Newlines inside strings are escaped by JSON, so the text cannot end the request early.
    return json.dumps(request, ensure_ascii=False).encode("utf-8") + _DELIMITER


def decode_reply(data: bytes) -> dict[str, Any]:
    """One reply (the bytes before its blank line) as a dict; LeanReplError when it is not a JSON object."""
    try:
        reply = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LeanReplError(f"the REPL answered something that is not JSON ({err}): {data[:200]!r}") from None
    if not isinstance(reply, dict):
        raise LeanReplError(f"the REPL answered a JSON {type(reply).__name__}, not an object: {data[:200]!r}")
    return reply


def _errors(reply: Mapping[str, Any]) -> list[str]:
    messages = reply.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise LeanReplError(f"the REPL's `messages` is not a list of objects: {messages!r:.200}")
    return [str(m.get("data", "")) for m in messages if m.get("severity") == "error"]


def _int(reply: Mapping[str, Any], key: str) -> int:
    value = reply.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LeanReplError(f"the REPL's reply has no `{key}` number: {json.dumps(reply)[:200]}")
    return value


def statement_command(theorem: Theorem) -> str:
    """The theorem's statement with ``sorry`` as its proof (the REPL gives the sorry's proof state)."""
    if theorem.statement is None:
        raise ValueError(
            f"theorem {theorem.name!r} has no statement: LeanDojo gives only its location "
            f"({theorem.location.file_path if theorem.location else '?'} at its `commit`); reading the statement "
            "from that source file is not built (pipelines/dco_lean/README.md, 'What remains')"
        )
    text = theorem.statement.rstrip()
    if text.endswith("sorry"):
        return text
    if text.endswith(":= by"):
        return f"{text} sorry"
    if text.endswith(":="):
        return f"{text} by sorry"
    raise ValueError(f"theorem {theorem.name!r}: its statement must end with ':= by' (or ':=', or 'sorry')")


def command_outcome(reply: Mapping[str, Any], session: int) -> LeanState | TacticError:
    """A theorem's start from the reply to its statement command: the one sorry's proof state, or TacticError."""
    if "message" in reply and "env" not in reply:
        return TacticError(f"Lean: {reply['message']}")
    errors = _errors(reply)
    if errors:
        return TacticError("the statement does not elaborate: " + " | ".join(errors))
    sorries = reply.get("sorries", [])
    if not isinstance(sorries, list) or len(sorries) != 1 or not isinstance(sorries[0], dict):
        count = len(sorries) if isinstance(sorries, list) else "no list of"
        return TacticError(f"the statement left {count} sorries, not one proof state")
    goal = sorries[0].get("goal")
    if not isinstance(goal, str):
        raise LeanReplError(f"the REPL's sorry has no `goal` text: {json.dumps(sorries[0])[:200]}")
    return LeanState(_int(sorries[0], "proofState"), (goal,), session)


def tactic_outcome(reply: Mapping[str, Any], session: int) -> StepResult:
    """The result of a tactic from the REPL's reply: next state, ProofFinished, or TacticError."""
    if "message" in reply and "proofState" not in reply:
        return TacticError(f"Lean: {reply['message']}")
    errors = _errors(reply)
    if errors:
        return TacticError(" | ".join(errors))
    if reply.get("sorries"):
        return TacticError("the tactic left a sorry")
    proof_state = _int(reply, "proofState")
    goals = reply.get("goals")
    if not isinstance(goals, list) or not all(isinstance(goal, str) for goal in goals):
        raise LeanReplError(f"the REPL's `goals` is not a list of texts: {json.dumps(reply)[:200]}")
    if goals:
        return LeanState(proof_state, tuple(goals), session)
    status = reply.get("proofStatus")
    if status is not None and status != "Completed":
        return TacticError(f"no goal is left but the proof is not complete: {status}")
    return ProofFinished(proof_state, session)


# ---------------------------------------------------------------------------
# The process


class _Exited(Exception):
    pass


class _ReplProcess:
    """One REPL process: requests written to its stdin, replies read from its stdout within a deadline."""

    def __init__(self, command: Sequence[str], cwd: str | os.PathLike[str] | None) -> None:
        self._stderr = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                list(command),
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                bufsize=0,
                start_new_session=True,  # its own process group: a timeout kills lake and the REPL under it
            )
        except OSError as err:
            self._stderr.close()
            raise LeanUnavailable(
                install_instructions(f"the REPL command {list(command)} cannot start: {err}")
            ) from err
        self._buffer = b""

    def request(self, message: bytes, timeout_s: float) -> dict[str, Any] | None:
        """The reply to ``message``; None when none came within ``timeout_s``; _Exited when the process ended."""
        try:
            self.process.stdin.write(message)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Exited(self._exit_reason()) from None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while True:
                self._buffer = self._buffer.lstrip(b"\n")
                end = self._buffer.find(_DELIMITER)
                if end >= 0:
                    reply, self._buffer = self._buffer[:end], self._buffer[end + len(_DELIMITER) :]
                    return decode_reply(reply)
                if len(self._buffer) > MAX_REPLY_BYTES:
                    raise LeanReplError(f"the REPL wrote more than {MAX_REPLY_BYTES} bytes without ending a reply")
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                chunk = os.read(self.process.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise _Exited(self._exit_reason())
                self._buffer += chunk

    def _exit_reason(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
        return f"the Lean REPL exited (code {code})" + (f": {tail}" if tail else "")

    def kill(self) -> None:
        """End the process and every process of its group (the REPL under ``lake env``)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self._stderr):
            stream.close()


class LeanReplVerifier:
    """:class:`~aligntrain.lean.verifier.LeanVerifier` backed by a Lean 4 REPL process (module docstring).

    ``LeanReplVerifier(project_dir, repl)`` runs ``lake env <repl>`` in ``project_dir``
    (a Lean project with Mathlib built); it raises :class:`LeanUnavailable`, naming what
    to install and the commands to run, when ``lake`` or the REPL is missing.
    ``command`` replaces that command (a sandbox wrapper, or a test's fake REPL). The
    process starts at the first call and again after a timeout or an exit.
    """

    def __init__(
        self,
        project_dir: str | os.PathLike[str] | None = None,
        repl: str | os.PathLike[str] | None = None,
        *,
        command: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    ) -> None:
        if not (timeout_s > 0 and header_timeout_s > 0):
            raise ValueError(f"timeouts must be > 0 seconds, got {timeout_s}, {header_timeout_s}")
        self.command = list(command) if command is not None else default_command(project_dir, repl)
        self.cwd = project_dir
        self.timeout_s = float(timeout_s)
        self.header_timeout_s = float(header_timeout_s)
        self.session = 0
        self._process: _ReplProcess | None = None
        self._environments: dict[str, int] = {}

    def __enter__(self) -> LeanReplVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, message: bytes, timeout_s: float) -> dict[str, Any] | TacticError:
        if self._process is None:
            self._process = _ReplProcess(self.command, self.cwd)
            self.session += 1
        try:
            reply = self._process.request(message, timeout_s)
        except _Exited as exited:
            self.close()
            return TacticError(str(exited))
        except LeanReplError:
            self.close()
            raise
        if reply is None:
            self.close()
            return TacticError(f"no answer within {timeout_s:g} s (the REPL was stopped)", timed_out=True)
        return reply

    def _environment(self, header: str) -> int | None | TacticError:
        """The environment after ``header`` (run once per session); None for an empty header."""
        if not header.strip():
            return None
        if header in self._environments:
            return self._environments[header]
        reply = self._request(encode_command(header), self.header_timeout_s)
        if isinstance(reply, TacticError):
            return reply
        errors = _errors(reply) if "env" in reply else [str(reply.get("message", reply))]
        if errors:
            raise LeanReplError(
                f"the theorem header does not elaborate ({' | '.join(errors)[:500]}): is Mathlib built in "
                f"{self.cwd!s} (`lake exe cache get`), at the version the header imports?"
            )
        self._environments[header] = _int(reply, "env")
        return self._environments[header]

    def start(self, theorem: Theorem) -> LeanState | TacticError:
        """Run the theorem's header (once per session), then its statement with ``sorry``: its first state."""
        command = statement_command(theorem)
        environment = self._environment(theorem.header)
        if isinstance(environment, TacticError):
            return environment
        reply = self._request(encode_command(command, environment), self.timeout_s)
        if isinstance(reply, TacticError):
            return reply
        return command_outcome(reply, self.session)

    def step(self, state: LeanState, tactic: object) -> StepResult:
        """Send ``tactic`` for ``state``: the next state, ProofFinished, or TacticError (timeouts included)."""
        if not isinstance(state, LeanState):
            raise ValueError(f"a state is a LeanState, got {type(state).__name__}")
        screened = screen_tactic(tactic)
        if isinstance(screened, TacticError):
            return screened
        if self._process is None or state.session != self.session:
            return TacticError("the proof state belongs to an earlier REPL session (it was restarted): start again")
        reply = self._request(encode_tactic(screened, state.proof_state), self.timeout_s)
        if isinstance(reply, TacticError):
            return reply
        return tactic_outcome(reply, self.session)

    def close(self) -> None:
        """Stop the REPL process, if one runs."""
        if self._process is not None:
            self._process.kill()
            self._process = None
        self._environments = {}  # environment numbers belong to the process that made them
