"""Benchmark: the sandbox's cost against a bare ``python -c`` subprocess, measured in the same run.

Run: .venv/bin/python benchmarks/bench_sandbox.py   (about 30 s; prints a table, writes nothing)

  (a) one trivial program with one test, sequentially: ``run_tests`` against a bare
      ``subprocess.run([python, "-I", "-S", "-c", program], input=...)`` of the same
      interpreter (the sandbox runs programs with -I -S too; plain ``python -I``, which
      also imports ``site``, is shown as a second baseline);
  (b) the marginal cost of one more test of the same program (10 tests minus 1 test):
      the namespace setup is paid once per program, each test is one more interpreter;
  (c) throughput through ``SandboxPool`` (one worker per core) against bare subprocesses
      from a thread pool of the same size.
Times are medians of wall time (time.perf_counter); the machine may be shared, so
compare the ratios, which are measured side by side.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from aligntrain.sandbox import SandboxPool, run_tests

PROGRAM = "print(sum(map(int, input().split())))"
TEST = ("1 2\n", "3\n")
REPEATS = 30
POOL_JOBS = 60
PYTHON = os.path.realpath(sys.executable)  # the interpreter run_tests uses by default


def bare(flags: tuple[str, ...] = ("-I", "-S")) -> None:
    out = subprocess.run([PYTHON, *flags, "-c", PROGRAM], input=TEST[0].encode(), capture_output=True, timeout=30)
    assert out.stdout.decode().strip() == TEST[1].strip()


def sandboxed(tests=(TEST,)) -> None:
    results = run_tests(PROGRAM, list(tests))
    assert all(r.passed for r in results), results


def median_s(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up (page cache, the sandbox's availability probe)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(submit_all) -> float:
    t0 = time.perf_counter()
    submit_all()
    return POOL_JOBS / (time.perf_counter() - t0)


def main() -> None:
    workers = os.cpu_count() or 1
    print(f"python {platform.python_version()} ({PYTHON}), {workers} CPU cores, load average {os.getloadavg()[0]:.1f}")

    base = median_s(bare)
    base_site = median_s(lambda: bare(("-I",)))
    one = median_s(sandboxed)
    ten = median_s(lambda: sandboxed([TEST] * 10), repeats=REPEATS // 3)
    marginal = (ten - one) / 9

    jobs = [(PROGRAM, [TEST])] * POOL_JOBS
    with SandboxPool() as pool:
        pool.map(jobs[:workers])  # warm-up
        sandbox_rate = throughput(lambda: pool.map(jobs))
    with ThreadPoolExecutor(workers) as ex:
        bare_rate = throughput(lambda: list(ex.map(lambda _: bare(), range(POOL_JOBS))))

    rows = [
        ("(a) one program, one test", f"{1000 * one:.1f} ms", f"{1000 * base:.1f} ms", f"{one / base:.2f}x"),
        (
            "(a) same, baseline with site",
            f"{1000 * one:.1f} ms",
            f"{1000 * base_site:.1f} ms",
            f"{one / base_site:.2f}x",
        ),
        ("(a) overhead per program", f"{1000 * (one - base):.1f} ms", "", ""),
        ("(b) each further test", f"{1000 * marginal:.1f} ms", f"{1000 * base:.1f} ms", f"{marginal / base:.2f}x"),
        (
            f"(c) programs/s, {workers} workers",
            f"{sandbox_rate:.1f}/s",
            f"{bare_rate:.1f}/s",
            f"{bare_rate / sandbox_rate:.2f}x slower",
        ),
    ]
    print(f"| {'measure':<32} | {'sandbox':>12} | {'bare -I -S':>12} | {'ratio':>12} |")
    print(f"|{'-' * 34}|{'-' * 14}|{'-' * 14}|{'-' * 14}|")
    for name, a, b, r in rows:
        print(f"| {name:<32} | {a:>12} | {b:>12} | {r:>12} |")


if __name__ == "__main__":
    main()
