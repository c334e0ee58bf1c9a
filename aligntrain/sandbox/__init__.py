"""Run untrusted, model-written Python programs against (stdin, expected stdout) tests.

    results = run_tests(program, [("1 2\\n", "3\\n")], timeout_s=2.0, memory_mb=256)
    with SandboxPool() as pool:                        # many programs, one per core
        per_program = pool.map([(program, tests), ...])

Each ``run_tests`` call starts a *supervisor* (``_supervisor.py``, run as a script) in fresh
mount, PID, network, IPC and UTS namespaces made by util-linux ``unshare`` (plus a
user namespace when the caller is not root). The supervisor builds a minimal
read-only root (system libraries, the interpreter, an empty /dev, a fresh /proc and
a size-capped tmpfs at /tmp), ``pivot_root``s into it, and runs the program once per
test as uid 65534 in a nested user namespace, with rlimits and no_new_privs. It is
PID 1 of the namespace, so one ``kill(-1, SIGKILL)`` after each test removes every
process the program left, and its own exit kills the namespace. Output is compared
in the supervisor; the caller only reads one JSON line per test. docs/sandbox.md
lists what each layer protects against and what is NOT protected.

If a layer cannot be set up (no ``unshare``, user namespaces disabled, ...) every
test is reported as ``sandbox_error`` with the reason: the program is never run
unprotected unless the caller passes ``allow_unsandboxed=True`` (then: rlimits, a
private working directory, uid 65534 when root, a process-group and sub-reaper kill).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aligntrain.sandbox._supervisor import KEEP_BYTES, PROG_PATH, SANDBOX_ID, STATUSES

__all__ = [
    "KEEP_BYTES",
    "SANDBOX_ID",
    "STATUSES",
    "SandboxPool",
    "SandboxUnavailable",
    "TestResult",
    "check_sandbox",
    "run_tests",
]

UNSHARE_PATH: str | None = None  # None: look up `unshare` on PATH (tests override this)
SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor.py")
SUPERVISOR_SLACK_S = 15.0  # the caller's budget: this + tests x (timeout_s + 1 s)
# Host paths visible (read-only) inside the sandbox; everything else, including this
# repository, /root, /home and the host's /tmp, does not exist there. Symlinks (merged
# /usr: /bin -> usr/bin) are recreated as symlinks. The interpreter's prefix is added.
RO_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache", "/etc/localtime")


@dataclass(frozen=True)
class TestResult:
    """Outcome of one test. ``status`` is one of STATUSES; ``wall_s`` times the program only."""

    __test__ = False  # not a pytest test class

    passed: bool
    status: str
    wall_s: float
    stdout: str = field(default="", repr=False)  # first KEEP_BYTES of the program's stdout
    detail: str = field(default="", repr=False)  # stderr tail, or why the sandbox failed


class SandboxUnavailable(RuntimeError):
    """The isolation layers cannot be set up on this machine."""


def _errors(n: int, why: str) -> list[TestResult]:
    return [TestResult(False, "sandbox_error", 0.0, detail=why) for _ in range(n)]


def _ro_paths(python: str) -> list[str]:
    """RO_PATHS plus the interpreter's installation (e.g. a pyenv prefix under /root)."""
    paths = list(RO_PATHS)
    if python == os.path.realpath(sys.executable):
        prefix = os.path.realpath(sys.base_prefix)
    else:  # another interpreter: assume the usual PREFIX/bin/pythonX.Y layout
        prefix = os.path.dirname(os.path.dirname(python))
    for extra in (prefix, os.path.dirname(python)):
        if not any(extra == p or extra.startswith(p + "/") for p in ("/usr", *paths)):
            paths.append(extra)
    return paths


@functools.cache
def _source_of(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _kill_supervisor(proc: subprocess.Popen, isolate: bool) -> None:
    """SIGKILL the supervisor: as PID 1 of the namespace, its death kills everything the
    program started. Kill it, not `unshare` (its parent, which then reaps it and exits):
    killing `unshare` first would orphan the supervisor to the host's init to be reaped."""
    if isolate:
        try:
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                with open(f"/proc/{proc.pid}/task/{tid}/children") as f:
                    for child in f.read().split():
                        os.kill(int(child), signal.SIGKILL)
            proc.wait(timeout=5)
            return
        except (OSError, subprocess.TimeoutExpired):
            pass
    os.killpg(proc.pid, signal.SIGKILL)  # unshare and the supervisor share this process group
    proc.wait()


def _run(
    program: str,
    tests: list[tuple[str, str]],
    *,
    isolate: bool,
    timeout_s: float,
    memory_mb: int,
    max_output_bytes: int,
    max_procs: int,
    tmp_mb: int,
    python: str | None,
) -> list[TestResult]:
    python = os.path.realpath(python or sys.executable)
    unshare = UNSHARE_PATH or shutil.which("unshare")
    if isolate and not (unshare and os.access(unshare, os.X_OK)):
        return _errors(
            len(tests),
            "util-linux `unshare` not found: refusing to run untrusted code "
            "without namespaces (allow_unsandboxed=True opts in)",
        )
    real_root = os.geteuid() == 0
    workdir = tempfile.mkdtemp(prefix="aligntrain-sandbox-")
    try:
        if real_root and not isolate:
            os.chown(workdir, SANDBOX_ID, SANDBOX_ID)
        cfg = {
            "program": program,
            "tests": tests,
            "isolate": isolate,
            "setuid": real_root,
            "root": workdir,
            "ro_paths": _ro_paths(python),
            "python": python,
            "prog_path": PROG_PATH if isolate else os.path.join(workdir, "prog.py"),
            "cwd": "/tmp" if isolate else workdir,
            "timeout_s": timeout_s,
            "memory_mb": memory_mb,
            "max_output_bytes": max_output_bytes,
            "max_procs": max_procs,
            "tmp_mb": tmp_mb,
        }
        # PID 1's command line can be read from inside: the resolved interpreter (mounted inside
        # anyway) and the supervisor's source, so no path of the checkout or its venv shows there.
        cmd = [os.path.realpath(sys.executable), "-I", "-S", "-c", _source_of(SUPERVISOR)]
        if isolate:
            userns = [] if real_root else ["--user", "--map-root-user"]  # root needs no user namespace
            cmd = [
                unshare,
                *userns,
                "--mount",
                "--net",
                "--ipc",
                "--uts",
                "--pid",
                "--fork",
                "--kill-child",
                "--",
                *cmd,
            ]
        # The supervisor enforces each test's timeout; this budget only guards against the
        # supervisor itself hanging or being starved, so that the caller can never hang.
        budget = SUPERVISOR_SLACK_S + len(tests) * (timeout_s + 1.0)
        note = ""
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(json.dumps(cfg).encode(), timeout=budget)
        except subprocess.TimeoutExpired:
            _kill_supervisor(proc, isolate)
            note = f"supervisor exceeded its {budget:.0f} s budget and was killed"
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        except BaseException:  # e.g. KeyboardInterrupt in a training loop: take the sandbox down too
            _kill_supervisor(proc, isolate)
            raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = []
    for line in out.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
            if "setup_error" in rec:
                return _errors(
                    len(tests),
                    f"sandbox setup failed ({rec['setup_error']}); refusing to run "
                    "untrusted code without it (allow_unsandboxed=True opts in)",
                )
            results.append(
                TestResult(
                    rec["status"] == "passed",
                    rec["status"],
                    rec["wall_s"],
                    rec.get("stdout", ""),
                    rec.get("detail", ""),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            note = f"unreadable supervisor output: {exc}"
            break
    why = note or "supervisor ended early: " + err.decode("utf-8", errors="replace")[-2000:].strip()
    return results + _errors(len(tests) - len(results), why)


@functools.cache
def _probe() -> str:
    """'' if the namespace sandbox works here, else why not (cached per process)."""
    [res] = _run(
        "print('ok')",
        [("", "ok")],
        isolate=True,
        timeout_s=10.0,
        memory_mb=256,
        max_output_bytes=1024,
        max_procs=16,
        tmp_mb=1,
        python=None,
    )
    return "" if res.passed else (res.detail or res.status)


def check_sandbox() -> None:
    """Raise SandboxUnavailable (with the reason) unless the full sandbox works here."""
    why = _probe()
    if why:
        raise SandboxUnavailable(f"the aligntrain sandbox cannot isolate programs on this machine: {why}")


def run_tests(
    program: str,
    tests: Sequence[tuple[str, str]],
    *,
    timeout_s: float = 2.0,
    memory_mb: int = 256,
    max_output_bytes: int = 4 << 20,
    max_procs: int = 16,
    tmp_mb: int = 64,
    allow_unsandboxed: bool = False,
    python: str | None = None,
) -> list[TestResult]:
    """Run ``program`` once per (stdin, expected stdout) test, each in a fresh confined process.

    Limits per test: ``timeout_s`` wall clock (CPU time too), ``memory_mb`` address space per
    process, ``max_output_bytes`` of stdout or of stderr (at least twice the expected output),
    ``max_procs`` processes/threads, ``tmp_mb`` of files in /tmp. Output passes when it equals
    the expected one after removing trailing whitespace per line and trailing empty lines.
    ``python`` is the interpreter for the program (default: this process's base interpreter).
    ``allow_unsandboxed=True`` runs with rlimits only when namespaces are unavailable (a
    warning is issued); without it such a machine gets ``sandbox_error`` results.
    """
    limits = _checked_limits(timeout_s, memory_mb, max_output_bytes, max_procs, tmp_mb, python)
    tests = _checked_tests(program, tests)
    if not tests:
        return []
    # Text that UTF-8 cannot carry (a lone surrogate) is the program's or that test's fault, not the
    # sandbox's: such a program crashes every test, such a test is not run; the others run.
    if why := _unencodable(program):
        return [TestResult(False, "crashed", 0.0, detail=f"not run: the program text {why}") for _ in tests]
    unrunnable = {}
    for index, (stdin_text, expected) in enumerate(tests):
        for what, text in (("input", stdin_text), ("expected output", expected)):
            if index not in unrunnable and (why := _unencodable(text)):
                unrunnable[index] = TestResult(False, "failed", 0.0, detail=f"not run: test {index}'s {what} {why}")
    runnable = [test for index, test in enumerate(tests) if index not in unrunnable]
    ran = iter(_run_checked(program, runnable, allow_unsandboxed, limits) if runnable else [])
    return [unrunnable[index] if index in unrunnable else next(ran) for index in range(len(tests))]


#: Below this address-space limit the interpreter cannot start: every test would report "memory".
MIN_MEMORY_MB = 64


def _checked_limits(timeout_s, memory_mb, max_output_bytes, max_procs, tmp_mb, python) -> dict:
    """``run_tests``'s limits, checked (ValueError naming the argument)."""
    from aligntrain.validation import check_int, check_real

    if python is not None and not (isinstance(python, str) and os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ValueError(f"python must be the path of an executable interpreter, got {python!r}")
    return {
        "timeout_s": check_real(timeout_s, "timeout_s", low=0, low_open=True, finite=True),
        "memory_mb": check_int(memory_mb, "memory_mb", MIN_MEMORY_MB),
        "max_output_bytes": check_int(max_output_bytes, "max_output_bytes", 1),
        "max_procs": check_int(max_procs, "max_procs", 1),
        "tmp_mb": check_int(tmp_mb, "tmp_mb", 1),
        "python": python,
    }


def _checked_tests(program: object, tests: object) -> list[tuple[str, str]]:
    """``program`` a str and ``tests`` (stdin, expected stdout) pairs of str (ValueError naming which)."""
    from aligntrain.validation import preview

    if not isinstance(program, str):
        raise ValueError(f"program must be a str (the program's text), got {type(program).__name__}")
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Iterable):
        raise ValueError(f"tests must be a sequence of (stdin, expected stdout) pairs, got {type(tests).__name__}")
    checked = []
    for index, test in enumerate(tests):
        if not (isinstance(test, (tuple, list)) and len(test) == 2 and all(isinstance(t, str) for t in test)):
            raise ValueError(f"tests[{index}] must be a (stdin, expected stdout) pair of str, got {preview(test)}")
        checked.append((test[0], test[1]))
    return checked


def _unencodable(text: str) -> str:
    """'' if ``text`` encodes as UTF-8, else where it does not."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"cannot be encoded as UTF-8: {text[err.start]!r} at index {err.start} (a lone surrogate)"
    return ""


def _run_checked(program: str, tests: list[tuple[str, str]], allow_unsandboxed: bool, limits: dict):
    isolate = True
    if allow_unsandboxed and (why := _probe()):
        warnings.warn(
            f"aligntrain sandbox unavailable ({why}); running WITHOUT namespaces", RuntimeWarning, stacklevel=2
        )
        isolate = False
    return _run(program, tests, isolate=isolate, **limits)


class SandboxPool:
    """Runs many programs in parallel, at most ``max_workers`` (default: CPU count) at a time.

    Each worker thread only waits on its supervisor process, so the pool is cheap to keep
    for a whole training run. ``limits`` are ``run_tests`` keyword arguments. Unless
    ``allow_unsandboxed`` is given, construction fails with SandboxUnavailable when the
    sandbox cannot work here (rather than every reward silently becoming 0)."""

    def __init__(self, max_workers: int | None = None, **limits) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if not limits.get("allow_unsandboxed"):
            check_sandbox()
        self.max_workers = max_workers or os.cpu_count() or 1
        self._limits = limits
        self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="sandbox")

    def submit(self, program: str, tests: Sequence[tuple[str, str]]):
        """One program; returns a Future of its list[TestResult]."""
        return self._executor.submit(run_tests, program, tests, **self._limits)

    def map(self, jobs: Iterable[tuple[str, Sequence[tuple[str, str]]]]) -> list[list[TestResult]]:
        """Results for (program, tests) pairs, in the order given."""
        futures = [self.submit(program, tests) for program, tests in jobs]
        return [f.result() for f in futures]

    run_many = map

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
