"""Start-up cost of a stage command, against the cost the Prefect layer used to add to every stage.

    python benchmarks/bench_stage_startup.py [--repeats 5]

Each stage is its own process (DVC starts `aligntrain <stage>`), so what it imports
before working is paid once per stage. Times, in the same run, the median wall time of:
- `python -c pass` (the interpreter alone: the baseline),
- `aligntrain <stage> --help` (the command line: typer, the table of stages, the
  validated parameters' models, torch),
- a stage that fails at parameter validation (everything a stage loads before work),
- `import prefect` + `from prefect import flow, task` (what every stage imported before
  the stage commands stopped importing Prefect; starting Prefect's temporary server,
  5-15 s more per stage, is not counted).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def _time(cmd: list[str], repeats: int, cwd: Path | None = None) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "params.yaml").write_text("study: {seed: -1.5}\n")  # fails validation: no work done
        rows = {
            "python -c pass (baseline)": _time([sys.executable, "-c", "pass"], args.repeats),
            "aligntrain train --help": _time([str(BIN / "aligntrain"), "train", "--help"], args.repeats),
            "aligntrain prepare (stops at validation)": _time(
                [str(BIN / "aligntrain"), "prepare", "--root", tmp], args.repeats
            ),
            "import prefect (flow, task)": _time(
                [sys.executable, "-c", "from prefect import flow, task"], args.repeats
            ),
        }
    base = rows["python -c pass (baseline)"]
    print(f"{'command':44s} {'median s':>9s} {'x baseline':>11s}")
    for name, seconds in rows.items():
        print(f"{name:44s} {seconds:9.2f} {seconds / base:11.1f}")


if __name__ == "__main__":
    main()
