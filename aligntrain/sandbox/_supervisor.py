"""The supervisor: the trusted half of aligntrain.sandbox that runs INSIDE the namespaces.

Started by ``aligntrain.sandbox.run_tests`` as ``python -I -S _supervisor.py`` (a script,
not an import: it loads only the standard library, to start fast). It reads its
configuration as JSON on stdin (program, tests, limits), builds the sandbox root, runs
the program once per test and writes one JSON line per test on stdout. With
``"isolate": false`` (the explicit unsandboxed opt-in) it skips the namespace parts.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import select
import signal
import sys
import time

STATUSES = ("passed", "failed", "timeout", "memory", "crashed", "output_limit", "sandbox_error")
SANDBOX_ID = 65534  # "nobody": the uid/gid programs run as
PROG_PATH = "/sandbox/prog.py"  # inside the sandbox root (read-only)
KEEP_BYTES = 4096  # stdout head / stderr tail kept in a TestResult
DEVICES = ("null", "zero", "full", "random", "urandom")
# Programs run under `python -I -S`: isolated from PYTHON* variables and without `site`,
# whose .pth files can cost 30 ms per start (and expose the interpreter's site-packages).
# `site` is also what defines exit() and quit(), which contest solutions use: restore them.
BOOTSTRAP = (
    "import sys, builtins; builtins.exit = builtins.quit = sys.exit; del sys.argv[0]; "
    "__file__ = sys.argv[0]; del sys, builtins; exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))"
)

# Linux constants (not all exposed by the os module).
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 32, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH, CLONE_NEWUSER = 2, 0x10000000
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}


_libc = None


def _sys(name: str, *args) -> None:
    """Call a libc function through ctypes; raise OSError on a non-zero return."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{tuple(a for a in args if isinstance(a, bytes))}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _sys("mount", enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _prctl(option: int, value: int) -> None:
    _sys("prctl", option, *(ctypes.c_ulong(v) for v in (value, 0, 0, 0)))


def _bind(src: str, dst: str, flags: int) -> None:
    """Bind ``src`` on ``dst`` and remount it with ``flags`` (e.g. read-only, nosuid).

    Flags the source mount already has (nodev, noexec, atime) are kept: in a user
    namespace they are locked, and a remount that tried to clear them would fail."""
    _mount(src, dst, None, MS_BIND)
    st = os.statvfs(src).f_flag
    kept = st & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048)  # 1024/2048: noatime, nodiratime
    kept |= MS_RELATIME if st & 4096 else 0  # ST_RELATIME is 4096
    _mount(None, dst, None, MS_REMOUNT | MS_BIND | flags | kept)


def _build_root(cfg: dict) -> None:
    """Make a tmpfs root holding only cfg["ro_paths"], devices, /proc, /tmp and the program; pivot into it."""
    root = cfg["root"]  # an empty host directory, used only as a mount point
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates to the host
    _mount("sandbox", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for src in cfg["ro_paths"]:
        if not os.path.lexists(src):
            continue
        dst = root + src
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
            continue
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            open(dst, "w").close()
        _bind(src, dst, MS_RDONLY | MS_NOSUID | MS_NODEV)
    dev = root + "/dev"
    os.mkdir(dev)
    _mount("sandbox-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        open(f"{dev}/{name}", "w").close()
        _bind(f"/dev/{name}", f"{dev}/{name}", MS_NOSUID | MS_NOEXEC)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dev}/{name}")
    os.symlink("/proc/self/fd", f"{dev}/fd")
    _mount(None, dev, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    os.mkdir(root + "/proc")  # a new procfs shows only this PID namespace's processes
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir(root + "/tmp")  # the only writable place: a tmpfs per test (_fresh_tmp)
    os.makedirs(os.path.dirname(root + PROG_PATH))
    with open(root + PROG_PATH, "w", encoding="utf-8") as f:
        f.write(cfg["program"])
    _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # pivot_root (unlike chroot) leaves no path back to the old root once it is detached;
    # a chrooted process could not create the nested user namespace below either.
    os.chdir(root)
    machine = os.uname().machine
    if machine not in SYS_PIVOT_ROOT:
        raise OSError(f"pivot_root: syscall number unknown on {machine}")
    _sys("syscall", ctypes.c_long(SYS_PIVOT_ROOT[machine]), b".", b".")
    _sys("umount2", b".", MNT_DETACH)
    os.chdir("/")


def _fresh_tmp(cfg: dict) -> None:
    """An empty /tmp for each test, so tests of one program cannot pass state (or a full
    disk) to each other; its size caps what a program can store."""
    if os.path.ismount("/tmp"):
        _sys("umount2", b"/tmp", MNT_DETACH)  # files still open in killed processes go with it
    _mount("sandbox-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={cfg['tmp_mb']}m")


def _exec_program(cfg: dict, stdin_fd: int, out_w: int, err_w: int, report_w: int) -> None:
    """In the forked child: confine this process, then exec the program (never returns)."""
    os.setsid()  # own session and process group
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for fd, target in ((stdin_fd, 0), (out_w, 1), (err_w, 2)):
        os.dup2(fd, target)
    os.closerange(3, report_w)  # report_w is close-on-exec: EOF on it means exec worked
    os.closerange(report_w + 1, 1 << 16)
    os.chdir(cfg["cwd"])
    if cfg["setuid"]:  # real root: become nobody on the host as well
        os.setgroups([])
        os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        _prctl(PR_SET_DUMPABLE, 1)  # else /proc/self stays root's and the maps below are refused
    if cfg["isolate"]:
        # A nested user namespace owned by no one the program can become: the program has
        # no capability over the supervisor's mounts (it cannot unmount /tmp or remount /
        # read-write) nor over the supervisor process. It also gives RLIMIT_NPROC a
        # per-sandbox count (ucounts are per user namespace), so parallel sandboxes as the
        # same uid do not share one budget.
        uid, gid = os.geteuid(), os.getegid()
        _sys("unshare", CLONE_NEWUSER)
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{SANDBOX_ID} {uid} 1"),
            ("gid_map", f"{SANDBOX_ID} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        # No user namespaces below this one: without them the program can create no
        # namespace at all, which removes much of the kernel's unprivileged attack surface.
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
    mib = 1 << 20
    cpu = math.ceil(cfg["timeout_s"]) + 1  # backstop for the wall clock, per process
    for res, value in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, cfg["memory_mb"] * mib),
        (resource.RLIMIT_NPROC, cfg["max_procs"]),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_FSIZE, cfg["tmp_mb"] * mib),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_MEMLOCK, 0),
    ):
        resource.setrlimit(res, (value, value))  # soft == hard: the program cannot raise them
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries cannot regain privileges
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}
    os.execve(cfg["python"], [cfg["python"], "-I", "-S", "-c", BOOTSTRAP, cfg["prog_path"]], env)


def _kill_all(pid: int) -> None:
    """Kill the program and everything it started."""
    if os.getpid() == 1:
        # PID 1 of our namespace: -1 means every process in it except ourselves,
        # including ones that called setsid or live in nested PID namespaces.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # nothing left
        return
    # Unsandboxed fallback (NEVER kill(-1) here: that would be every process we may signal).
    # The process group, then whatever was orphaned to us (we are a child sub-reaper).
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(100):
        children = set()
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as f:
                    children.update(int(c) for c in f.read().split())
        except OSError:
            return  # kernel without /proc/PID/task/TID/children: the process group kill is all
        children.discard(pid)
        if not children:
            return
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            except OSError:
                pass


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _normalize(text: bytes | str) -> list[str]:
    """Lines without trailing whitespace, without trailing empty lines."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _run_one(cfg: dict, stdin_text: str, expected: str) -> dict:
    """Run the program on one test; return the supervisor's JSON record for it."""
    if cfg["isolate"]:
        _fresh_tmp(cfg)
    expected_b = expected.encode()
    cap = max(cfg["max_output_bytes"], 2 * len(expected_b))
    stdin_fd = os.memfd_create("stdin")  # any size of input, no writer thread needed
    os.write(stdin_fd, stdin_text.encode())
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    report_r, report_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _exec_program(cfg, stdin_fd, out_w, err_w, report_w)
        except BaseException as exc:  # noqa: BLE001 - report anything, then die
            os.write(report_w, f"{type(exc).__name__}: {exc}".encode()[:2000])
        os._exit(127)
    for fd in (stdin_fd, out_w, err_w, report_w):
        os.close(fd)
    report = b""
    while chunk := os.read(report_r, 4096):
        report += chunk
    os.close(report_r)
    if report:
        _kill_all(pid)
        os.waitpid(pid, 0)
        os.close(out_r)
        os.close(err_r)
        return {"status": "sandbox_error", "wall_s": 0.0, "detail": "confining the program failed: " + report.decode()}

    out, err, err_total, status, verdict = bytearray(), b"", 0, None, None
    try:
        pidfd = os.pidfd_open(pid)  # readable when the program exits
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    for fd in (out_r, err_r) + ((pidfd,) if pidfd is not None else ()):
        poller.register(fd, select.POLLIN)
    deadline = t0 + cfg["timeout_s"]
    while status is None and verdict is None:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = "timeout"
            break
        for fd, _ in poller.poll(left * 1000 if pidfd is not None else min(left * 1000, 10)):
            if fd == pidfd:
                status = os.waitpid(pid, 0)[1]
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                poller.unregister(fd)
            elif fd == out_r:
                out += chunk
            else:
                err_total += len(chunk)
                err = (err + chunk)[-KEEP_BYTES:]
        if len(out) > cap or err_total > cap:
            verdict = "output_limit"
        if pidfd is None and status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            status = st if done else None
    wall = time.monotonic() - t0
    # The program is done (or out of time): do not wait for pipes that orphans may hold open.
    _kill_all(pid)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
        try:
            while len(out) <= cap and (chunk := os.read(fd, 1 << 16)):
                if fd == out_r:
                    out += chunk
                else:
                    err = (err + chunk)[-KEEP_BYTES:]
        except BlockingIOError:
            pass
        os.close(fd)
    if pidfd is not None:
        os.close(pidfd)
    if status is None:
        status = os.waitpid(pid, 0)[1]
    _reap()
    if verdict is None:
        if len(out) > cap:
            verdict = "output_limit"
        elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            verdict = "timeout"  # RLIMIT_CPU
        elif os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0:
            verdict = "memory" if b"MemoryError" in err else "crashed"
            err += (
                f"\n[killed by {signal.Signals(os.WTERMSIG(status)).name}]"
                if os.WIFSIGNALED(status)
                else f"\n[exit status {os.WEXITSTATUS(status)}]"
            ).encode()
        else:
            verdict = "passed" if _normalize(bytes(out)) == _normalize(expected_b) else "failed"
    return {
        "status": verdict,
        "wall_s": round(wall, 6),
        "stdout": out[:KEEP_BYTES].decode("utf-8", errors="replace"),
        "detail": err.decode("utf-8", errors="replace"),
    }


def _supervise() -> int:
    # As PID 1 we receive from inside the namespace only signals we handle: handle none
    # (Python's SIGINT handler would let a same-uid program abort the supervisor).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cfg = json.loads(sys.stdin.buffer.read())

    def emit(record: dict) -> None:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    try:
        if cfg["isolate"]:
            _build_root(cfg)
        else:
            with open(cfg["prog_path"], "w", encoding="utf-8") as f:
                f.write(cfg["program"])
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except Exception as exc:  # noqa: BLE001 - any failure means "not isolated": refuse
        emit({"setup_error": f"{type(exc).__name__}: {exc}"})
        return 1
    for stdin_text, expected in cfg["tests"]:
        emit(_run_one(cfg, stdin_text, expected))
    return 0


if __name__ == "__main__":
    sys.exit(_supervise())
