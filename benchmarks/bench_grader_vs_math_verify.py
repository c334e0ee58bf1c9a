"""Our grader against math-verify on the labelled MATH answer pairs (tests/data/math_answer_pairs.csv).

math-verify (Hugging Face, PyPI ``math-verify``) turns LaTeX into sympy through
latex2sympy2 and sympy's own parsing, which evaluates the text: it must never
run in our process or our ``.venv``. This script therefore runs it in a
subprocess with a throwaway virtual environment (``--venv``, default
/tmp/mv-venv, created with ``python -m venv`` and ``pip install
"math-verify[antlr4_13_2]"`` when missing), sends it the table as JSON and
reads its verdicts back. Our grader (``aligntrain.grading.grade``, scope
"math") runs here. ``--old-verify PATH`` adds a third grader: a verify.py
loaded from PATH (e.g. the committed version before the MATH kinds, written by
``git show <commit>:aligntrain/verify.py > /tmp/old_verify.py``), graded with
its own ``canonical_answer`` (a gold it cannot parse counts as "not equal").

A row is graded right when the grader's verdict (equal / not equal) matches
the hand label. Printed: accuracy overall and per answer kind, false
positives (a wrong answer graded right), and seconds per pair (each grader
starts cold: our cache is cleared; math-verify's time excludes its import).

    .venv/bin/python benchmarks/bench_grader_vs_math_verify.py [--old-verify /tmp/old_verify.py]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PAIRS = REPOSITORY / "tests" / "data" / "math_answer_pairs.csv"

# Runs inside the throwaway venv: reads [[gold, candidate], ...] on stdin, writes verdicts and seconds.
_MATH_VERIFY_WORKER = r"""
import json, sys, time
from math_verify import parse, verify
pairs = json.load(sys.stdin)
verdicts = []
start = time.perf_counter()
for gold, candidate in pairs:
    try:
        gold_parsed = parse("$\\boxed{" + gold + "}$")
        candidate_parsed = parse("$\\boxed{" + candidate + "}$")
        verdicts.append(bool(verify(gold_parsed, candidate_parsed)))
    except Exception:
        verdicts.append(False)
seconds = time.perf_counter() - start
json.dump({"verdicts": verdicts, "seconds": seconds}, sys.stdout)
"""


def load_pairs(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for number, row in enumerate(rows, start=2):
        if row.get("equivalent") not in ("true", "false"):
            raise ValueError(f"{path} line {number}: equivalent must be true or false, got {row.get('equivalent')!r}")
    return rows


def ensure_venv(venv: Path) -> Path:
    """The venv's python, creating the venv and installing math-verify when missing."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import math_verify"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "math-verify[antlr4_13_2]"], check=True)
    return python


def grade_with_math_verify(rows: list[dict[str, str]], venv: Path) -> tuple[list[bool], float]:
    python = ensure_venv(venv)
    pairs = [[row["gold"], row["candidate"]] for row in rows]
    result = subprocess.run(
        [str(python), "-c", _MATH_VERIFY_WORKER],
        input=json.dumps(pairs),
        capture_output=True,
        text=True,
        check=True,
        cwd="/tmp",  # never import anything from the repository
        timeout=3600,
    )
    out = json.loads(result.stdout)
    return out["verdicts"], out["seconds"]


def grade_with_ours(rows: list[dict[str, str]]) -> tuple[list[bool], float]:
    from aligntrain import grading

    grading._parse_cached.cache_clear()
    start = time.perf_counter()
    verdicts = []
    for row in rows:
        gold_class = grading.canonical_answer(row["gold"], scope="math")
        candidate_class = grading.canonical_answer(row["candidate"], scope="math")
        verdicts.append(gold_class is not None and gold_class == candidate_class)
    return verdicts, time.perf_counter() - start


def grade_with_old(rows: list[dict[str, str]], path: Path) -> tuple[list[bool], float]:
    spec = importlib.util.spec_from_file_location("old_verify", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--old-verify {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_verify"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    start = time.perf_counter()
    verdicts = []
    for row in rows:
        gold_class = module.canonical_answer(row["gold"])
        verdicts.append(gold_class is not None and gold_class == module.canonical_answer(row["candidate"]))
    return verdicts, time.perf_counter() - start


def report(name: str, rows: list[dict[str, str]], verdicts: list[bool], seconds: float) -> dict[str, float]:
    right = defaultdict(int)
    total = defaultdict(int)
    false_positives = 0
    for row, verdict in zip(rows, verdicts, strict=True):
        label = row["equivalent"] == "true"
        for key in ("all", row["kind"]):
            total[key] += 1
            right[key] += verdict == label
        false_positives += verdict and not label
    accuracy = {key: right[key] / total[key] for key in total}
    print(
        f"{name}: accuracy {accuracy['all']:.3f} ({right['all']}/{total['all']}), false positives {false_positives}, "
        f"{1e3 * seconds / len(rows):.2f} ms per pair"
    )
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS)
    parser.add_argument("--venv", type=Path, default=Path("/tmp/mv-venv"))
    parser.add_argument("--old-verify", type=Path, default=None, help="a verify.py to grade with as well")
    parser.add_argument("--skip-math-verify", action="store_true")
    parser.add_argument("--show-errors", action="store_true", help="print every row each grader gets wrong")
    args = parser.parse_args()
    rows = load_pairs(args.pairs)
    print(f"{len(rows)} pairs from {args.pairs.name}")
    graders: dict[str, tuple[list[bool], float]] = {}
    if args.old_verify is not None:
        graders["before (old verify.py)"] = grade_with_old(rows, args.old_verify)
    graders["aligntrain.grading"] = grade_with_ours(rows)
    if not args.skip_math_verify:
        graders["math-verify"] = grade_with_math_verify(rows, args.venv)
    accuracies = {name: report(name, rows, *result) for name, result in graders.items()}
    if args.show_errors:
        for name, (verdicts, _) in graders.items():
            print(f"\n{name} gets wrong:")
            for row, verdict in zip(rows, verdicts, strict=True):
                if verdict != (row["equivalent"] == "true"):
                    print(f"  [{row['kind']}] {row['gold']!r} vs {row['candidate']!r}: labelled {row['equivalent']}")
    kinds = sorted({row["kind"] for row in rows})
    names = list(graders)
    print("\n| kind | pairs | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for kind in kinds:
        count = sum(row["kind"] == kind for row in rows)
        print(f"| {kind} | {count} | " + " | ".join(f"{accuracies[name][kind]:.3f}" for name in names) + " |")
    if "math-verify" in graders:
        ours, theirs = graders["aligntrain.grading"][1], graders["math-verify"][1]
        print(f"\ntime ratio math-verify / aligntrain.grading (cold): {theirs / ours:.1f}x")


if __name__ == "__main__":
    main()
