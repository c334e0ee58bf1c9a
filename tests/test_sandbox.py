"""aligntrain.sandbox: correctness of the judging, and containment of hostile programs.

Every hostile program must come back as not passed with the expected status, within a
bounded wall time, leaving no process (none in a PID namespace that did not exist before
the run, none running as the sandbox uid, none mentioning the sandbox paths) and no file
outside its private directory. Fork bombs run bounded (500 forks) before unbounded.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from aligntrain import sandbox
from aligntrain.sandbox import SandboxPool, SandboxUnavailable, TestResult, check_sandbox, run_tests

REPO = Path(__file__).resolve().parents[1]
ADD = "print(sum(map(int, input().split())))"


def _procs() -> dict[int, tuple[str, str, int, str]]:
    """pid -> (start time, pid namespace, real uid, command line) for every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                start = f.read().rsplit(")", 1)[1].split()[19]
            with open(f"/proc/{entry}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            out[int(entry)] = (start, os.readlink(f"/proc/{entry}/ns/pid"), uid, cmd)
        except (OSError, StopIteration, IndexError):
            pass  # exited while we looked
    return out


def _other_workers() -> set[int]:
    """The other pytest-xdist workers (this worker's siblings under the pytest master), or nothing when
    pytest runs alone: under `make test` a second worker runs sandboxed programs of its own meanwhile."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    siblings = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getppid() and int(entry) != os.getpid():
            siblings.add(int(entry))
    return siblings


def _ancestors(pid: int) -> set[int]:
    chain = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


@pytest.fixture
def contained(monkeypatch):
    """Check, after the test body, that the sandbox left no processes and no directories.

    The directories are those this test's sandbox calls made (recorded as they are made), and the
    processes those not started by another xdist worker: the check holds with a second worker running
    sandboxed programs at the same time."""
    before = _procs()
    namespaces = {ns for _, ns, _, _ in before.values()}
    made: list[str] = []
    real_mkdtemp = sandbox.tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", recording_mkdtemp)
    yield

    def leftovers() -> list[tuple]:
        others, found = _other_workers(), []
        for pid, (start, ns, uid, cmd) in _procs().items():
            if before.get(pid, (None,))[0] == start or _ancestors(pid) & others:
                continue  # existed before the run, or another worker's
            if ns not in namespaces or uid == sandbox.SANDBOX_ID or "prog.py" in cmd or "aligntrain-sandbox-" in cmd:
                found.append((pid, start, ns, uid, cmd))
        return found

    left = leftovers()
    if left:  # a process of the other worker caught while it starts or exits is gone a moment later
        time.sleep(1.0)
        left = [proc for proc in leftovers() if proc in left]
    assert left == [], f"processes survived the sandbox: {left}"
    assert [d for d in made if os.path.exists(d)] == [], "a sandbox directory was not removed"


def _run(program: str, tests=(("", ""),), *, max_s: float = 20.0, **kw) -> list[TestResult]:
    """run_tests with a wall-clock bound on the caller."""
    t0 = time.monotonic()
    results = run_tests(textwrap.dedent(program), list(tests), **kw)
    elapsed = time.monotonic() - t0
    assert elapsed < max_s, f"the caller waited {elapsed:.1f} s"
    assert len(results) == len(tests)
    return results


def _one(program: str, status: str | set[str], **kw) -> TestResult:
    [res] = _run(program, **kw)
    assert not res.passed
    assert res.status in ({status} if isinstance(status, str) else status), (res, res.stdout, res.detail)
    return res


# ---------------------------------------------------------------- correctness


def test_correct_program_passes_every_test(contained):
    results = _run(ADD, [("1 2\n", "3\n"), ("10 -4", "6"), ("0 0\n", "0")])
    assert [r.status for r in results] == ["passed"] * 3
    assert all(r.passed and 0 < r.wall_s < 5 for r in results)


def test_wrong_answer_is_failed_and_others_still_pass(contained):
    results = _run(ADD, [("1 2", "3"), ("2 2", "5"), ("3 4", "7")])
    assert [r.status for r in results] == ["passed", "failed", "passed"]
    assert results[1].stdout == "4\n"


@pytest.mark.parametrize("program", ["print(1 +)", "raise ValueError('boom')", "import sys; print(3); sys.exit(3)"])
def test_syntax_error_exception_or_nonzero_exit_is_crashed(program, contained):
    res = _one(program, "crashed", tests=[("1 2", "3")])
    assert res.detail  # the traceback tail is kept for debugging


@pytest.mark.parametrize(
    ("output", "passed"),
    [
        ("3\n", True),
        ("3", True),
        ("3   \t\n\n\n", True),  # trailing whitespace and empty lines
        ("a b  \r\nc\r\n", True),  # CRLF
        ("\n3", False),  # a leading empty line counts
        (" 3", False),  # leading whitespace counts
        ("a b\n\nc", False),  # an inner empty line counts
        ("3\n4", False),
    ],
)
def test_comparison_strips_only_trailing_whitespace(output, passed):
    expected = "a b\nc\n" if output.startswith("a") else "3\n"
    [res] = _run(f"import sys; sys.stdout.write({output!r})", [("", expected)])
    assert res.passed is passed and res.status == ("passed" if passed else "failed")


def test_expected_output_is_normalized_too_and_exit_works():
    results = _run("print(3)\nexit()\nprint(4)", [("", "3  \n\n\n"), ("", "3\n4")])
    assert [r.status for r in results] == ["passed", "failed"]


def test_large_input_and_moderate_memory_are_fine(contained):
    numbers = " ".join(["1"] * 500_000)
    program = "import sys\nblob = bytearray(100 << 20)\nprint(sum(map(int, sys.stdin.read().split())))"
    [res] = _run(program, [(numbers, "500000")])
    assert res.status == "passed", res.detail


def test_each_test_gets_an_empty_tmp(contained):
    program = "import os\nprint(sorted(os.listdir('/tmp')), os.getcwd())\nopen('/tmp/state', 'w').write('x')"
    results = _run(program, [("", "[] /tmp")] * 3)
    assert [r.status for r in results] == ["passed"] * 3


def test_no_tests_no_run():
    assert run_tests(ADD, []) == []


# ---------------------------------------------------------------- hostile programs


def test_bounded_fork_stops_at_the_process_limit(contained):
    program = """
        import os, time
        ok = fail = 0
        for _ in range(500):
            try:
                pid = os.fork()
            except OSError:
                fail += 1
                continue
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            ok += 1
        print(ok, fail)
    """
    res = _one(program, "failed", tests=[("", "500 0")], max_procs=16)
    ok, fail = map(int, res.stdout.split())
    assert ok < 16 and ok + fail == 500


def test_fork_bomb(contained):
    _one("import os\nwhile True:\n    os.fork()", {"crashed", "timeout"}, timeout_s=2.0)
    _one(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "timeout",
        timeout_s=2.0,
    )


@pytest.mark.parametrize(
    "program",
    [
        "while True:\n    pass",
        "import time\ntime.sleep(10**6)",
        "import os, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.close(1)\nos.close(2)\nwhile True:\n    pass",
    ],
)
def test_infinite_loop_and_sleep_time_out(program, contained):
    results = _run(program, [("", "")] * 2, timeout_s=1.0, max_s=15.0)
    for res in results:
        assert res.status == "timeout" and 1.0 <= res.wall_s < 2.0


@pytest.mark.parametrize("program", ["x = bytearray(8 << 30)", "x = []\nwhile True:\n    x.append(bytearray(1 << 20))"])
def test_memory_bomb(program, contained):
    _one(program, "memory", memory_mb=256)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_gigabytes_of_output_are_cut_off(stream, contained):
    res = _one(
        f"import sys\nwhile True:\n    sys.{stream}.buffer.write(b'x' * 65536)",
        "output_limit",
        timeout_s=10.0,
        max_output_bytes=1 << 20,
    )
    assert res.wall_s < 5 and len(res.stdout) <= sandbox.KEEP_BYTES


def test_big_file_is_limited(contained):
    _one("f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))", "crashed", tmp_mb=8)


def test_cannot_write_outside_its_directory(contained):
    escape = REPO / "SANDBOX_ESCAPE"
    host_tmp = Path("/tmp") / f"sandbox-escape-{uuid.uuid4().hex}"
    program = f"""
        import os
        report = []
        for path in [{str(escape)!r}, {str(host_tmp)!r}, "/escape", "/usr/escape", "/sandbox/prog.py",
                     "/etc/escape", "/dev/escape"]:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                report.append("wrote " + path)
            except OSError as exc:
                report.append("blocked " + path)
        print("\\n".join(report))
    """
    res = _one(program, "failed", tests=[("", "nothing")])
    assert not escape.exists() and not host_tmp.exists()
    # /tmp inside is the sandbox's own tmpfs; everything else is read-only or absent.
    assert f"wrote {host_tmp}" in res.stdout
    assert res.stdout.count("blocked") == 6, res.stdout


def test_cannot_read_host_files(contained):
    secret = (REPO / "params.yaml").read_text()
    program = f"""
        import os
        for path in [{str(REPO / "params.yaml")!r}, "/proc/1/root{REPO / "params.yaml"}", "/proc/1/environ",
                     "/proc/1/mem", "/etc/shadow", "/root/.bash_history"]:
            try:
                print(open(path, errors="replace").read())
            except OSError as exc:
                print("blocked", path, type(exc).__name__)
        print(os.listdir("/"))
    """
    res = _one(program, "failed", tests=[("", secret)])
    assert secret.strip().splitlines()[0] not in res.stdout
    assert res.stdout.count("blocked") == 6, res.stdout
    assert "'work'" not in res.stdout and "'home'" not in res.stdout


def test_no_network(contained):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    program = f"""
        import socket
        for host in ["127.0.0.1", "localhost", "8.8.8.8"]:
            try:
                socket.create_connection((host, {port}), timeout=1).close()
                print("connected", host)
            except OSError:
                print("blocked", host)
    """
    try:
        res = _one(program, "failed", tests=[("", "connected 127.0.0.1")], timeout_s=5.0)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert res.stdout.split() == ["blocked", "127.0.0.1", "blocked", "localhost", "blocked", "8.8.8.8"]


def test_killing_its_parent_and_everyone_fails(contained):
    program = """
        import os, signal
        for target in [os.getppid(), 1, -1]:
            for sig in [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]:
                try:
                    os.kill(target, sig)
                except OSError as exc:
                    print("refused", target, sig)
        print("alive")
    """
    results = _run(program, [("", "nope"), ("", "nope")])
    assert [r.status for r in results] == ["failed", "failed"]  # the supervisor survived
    assert "alive" in results[1].stdout


def test_background_processes_are_killed_and_not_waited_for(contained):
    program = """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(2)
                print(3, flush=True)     # too late: the program has ended
                time.sleep(10**6)
            os._exit(0)
        os.wait()
    """
    results = _run(program, [("", "3")] * 2, timeout_s=5.0)
    for res in results:
        assert res.status == "failed" and res.wall_s < 1.5


def test_cannot_raise_its_rlimits(contained):
    program = """
        import resource
        for name in ["RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_FSIZE"]:
            res = getattr(resource, name)
            soft, hard = resource.getrlimit(res)
            try:
                resource.setrlimit(res, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                print("raised", name)
            except (ValueError, OSError):
                print("blocked", name)
    """
    res = _one(program, "failed", tests=[("", "raised")])
    assert res.stdout.count("blocked") == 5, res.stdout


def test_ctypes_is_still_contained(contained):
    program = """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("setuid0", libc.setuid(0))
        print("mount_tmpfs", libc.mount(b"x", b"/tmp", b"tmpfs", 0, None))
        print("umount_tmp", libc.umount2(b"/tmp", 2))
        # A user+mount namespace of its own: mounts inherited from the supervisor stay
        # locked there, so / cannot be made writable and nothing hidden comes back.
        print("unshare", libc.unshare(0x10000000 | 0x00020000))   # refused: no user namespaces
        print("unshare_net", libc.unshare(0x40000000))
        print("remount_rw", libc.mount(None, b"/", None, 32 | 4096, None))
        print("umount_root", libc.umount2(b"/", 2))
        print("work", os.path.exists("/work"))
        children = 0
        for _ in range(200):
            pid = libc.fork()
            if pid == 0:
                libc.pause()
                os._exit(0)
            children += pid > 0
        print("forks", children)
        print("kill_all", libc.kill(-1, 9))
    """
    res = _one(program, {"failed", "crashed"}, tests=[("", "escaped")], timeout_s=5.0)
    lines = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
    assert lines["setuid0"] == "-1" and lines["mount_tmpfs"] == "-1" and lines["umount_tmp"] == "-1"
    assert lines["unshare"] == "-1" and lines["unshare_net"] == "-1"
    assert lines["remount_rw"] == "-1" and lines["work"] == "False"
    assert int(lines.get("forks", 0)) < 16


# ---------------------------------------------------------------- pool and refusal


def test_pool_keeps_order_and_bounds_parallelism(contained):
    jobs = [(f"import time\ntime.sleep(1)\nprint({i})", [("", str(i))]) for i in range(4)]
    with SandboxPool(max_workers=2, timeout_s=5.0) as pool:
        t0 = time.monotonic()
        results = pool.map(jobs)
        elapsed = time.monotonic() - t0
    assert [[r.status for r in rs] for rs in results] == [["passed"]] * 4
    assert [rs[0].stdout for rs in results] == ["0\n", "1\n", "2\n", "3\n"]
    assert 2.0 <= elapsed < 3.9, elapsed  # two waves of two: parallel, but never four at once


def test_caller_does_not_hang_when_the_supervisor_does(monkeypatch, tmp_path, contained):
    stuck = tmp_path / "stuck_supervisor.py"
    stuck.write_text("import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(10**6)\n")
    monkeypatch.setattr(sandbox, "SUPERVISOR", str(stuck))
    monkeypatch.setattr(sandbox, "SUPERVISOR_SLACK_S", 1.0)
    results = _run(ADD, [("1 2", "3")] * 2, timeout_s=0.5, max_s=8.0)  # budget: 1 + 2 x 1.5 s
    assert [r.status for r in results] == ["sandbox_error"] * 2
    assert "budget" in results[0].detail


@pytest.fixture
def no_unshare(monkeypatch):
    sandbox._probe.cache_clear()
    monkeypatch.setattr(sandbox, "UNSHARE_PATH", "/nonexistent/unshare")
    yield
    sandbox._probe.cache_clear()


def test_refuses_to_run_without_isolation(no_unshare, contained):
    [res] = _run(ADD, [("1 2", "3")])
    assert res.status == "sandbox_error" and "refusing" in res.detail
    with pytest.raises(SandboxUnavailable, match="unshare"):
        check_sandbox()
    with pytest.raises(SandboxUnavailable):
        SandboxPool()


def _interpreter_for_nobody() -> str | None:
    """As root, the unsandboxed fallback runs programs as uid 65534: it needs an interpreter
    that uid can execute (a pyenv one under /root, mode 0700, is not)."""
    if os.geteuid() != 0:
        return None
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(candidate)
        parts = Path(real).parents
        if os.path.exists(real) and all(os.stat(p).st_mode & 0o001 for p in parts):
            return real
    pytest.skip("no interpreter executable by uid 65534")


def test_explicit_opt_in_runs_with_rlimits_only(no_unshare, contained):
    python = _interpreter_for_nobody()
    with pytest.warns(RuntimeWarning, match="WITHOUT namespaces"):
        results = _run(ADD, [("1 2", "3"), ("1 1", "3")], allow_unsandboxed=True, python=python)
    assert [r.status for r in results] == ["passed", "failed"]
    with pytest.warns(RuntimeWarning):
        _one("while True:\n    pass", "timeout", timeout_s=1.0, allow_unsandboxed=True, python=python)
        # a double fork with setsid escapes the process group; the sub-reaper sweep still kills it
        _one(
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(10**6)\n    os._exit(0)\nos.wait()",
            "failed",
            tests=[("", "x")],
            allow_unsandboxed=True,
            python=python,
        )


# ---------------------------------------------------------------- its own edges


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": -1.0}, "timeout_s"),
        ({"memory_mb": 0}, "memory_mb must be >= 64, got 0"),
        ({"memory_mb": 8}, "memory_mb must be >= 64, got 8"),
        ({"memory_mb": True}, "memory_mb must be an integer, got True"),
        ({"max_output_bytes": 0}, "max_output_bytes must be >= 1"),
        ({"max_procs": 0}, "max_procs must be >= 1"),
        ({"tmp_mb": 2.5}, "tmp_mb must be an integer"),
        ({"python": "/no/such/python3"}, "python must be the path of an executable interpreter, got '/no/such/python3'"),
        ({"program": b"print(3)"}, "program must be a str (the program's text), got bytes"),
        ({"tests": [("1 2", "3", "extra")]}, "tests[0] must be a (stdin, expected stdout) pair of str, got ('1 2', '3', 'extra')"),
        ({"tests": [("1 2", 3)]}, "tests[0] must be a (stdin, expected stdout) pair of str"),
        ({"tests": "1 2"}, "tests must be a sequence of (stdin, expected stdout) pairs, got str"),
    ],
)  # fmt: skip
def test_run_tests_checks_its_arguments_naming_each(kwargs, says):
    """Refused at once with the argument's name: no supervisor starts, no traceback from inside."""
    call = {"program": ADD, "tests": [("1 2", "3")], **kwargs}
    start = time.monotonic()
    with pytest.raises(ValueError) as err:
        run_tests(call.pop("program"), call.pop("tests"), **call)
    assert says in str(err.value) and time.monotonic() - start < 1.0


def test_text_utf8_cannot_carry_is_the_programs_or_the_tests_failure_not_the_sandboxs(contained):
    """A lone surrogate: in the program, every test crashes; in one test, that test is not run, the rest are."""
    results = _run("print(1)  # \udc80", [("", "1"), ("", "1")])
    assert [r.status for r in results] == ["crashed", "crashed"]
    assert "the program text cannot be encoded as UTF-8: '\\udc80' at index 12" in results[0].detail
    assert "allow_unsandboxed" not in results[0].detail and "sandbox" not in results[0].detail
    results = _run(ADD, [("1 2", "3"), ("1 \ud800", "3"), ("2 2", "4\udfff"), ("5 5", "10")])
    assert [r.status for r in results] == ["passed", "failed", "failed", "passed"]
    assert results[1].detail.startswith("not run: test 1's input cannot be encoded as UTF-8")
    assert results[2].detail.startswith("not run: test 2's expected output cannot be encoded as UTF-8")


def test_no_path_of_the_checkout_is_visible_from_inside(contained):
    """PID 1's command line, the mounts and the links of /proc name nothing of the repository or its venv."""
    program = f"""
        import os
        texts = []
        for pid in os.listdir("/proc"):
            for name in ("cmdline", "environ", "mountinfo", "maps"):
                try:
                    texts.append(open(f"/proc/{{pid}}/{{name}}", errors="replace").read())
                except OSError:
                    pass
            for name in ("cwd", "exe", "root"):
                try:
                    texts.append(os.readlink(f"/proc/{{pid}}/{{name}}"))
                except OSError:
                    pass
        seen = "".join(texts)
        print(len(texts), {str(REPO)!r} in seen)
    """
    res = _one(program, "failed")
    count, leaked = res.stdout.split()
    assert int(count) >= 4 and leaked == "False", res.stdout
