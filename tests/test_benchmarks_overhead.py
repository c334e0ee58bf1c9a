"""The overhead benchmarks run: each script's --quick smoke run exits 0 and prints its ratio lines.

Slow: each builds several real trainers (TRL's SFT and GRPO trainers) and trains
a few steps, 30 s to 2 min on the shared 2-core machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "ratio"),
    [
        ("bench_sft_overhead.py", r"^ratio (pass_at_n|majority|contrastive)/ce \(CPU per step\): \d+\.\d+ "),
        (
            "bench_rl_overhead.py",
            r"^ratio (grpo|grpo_z|loo_pass_at_k|cat_pass_at_n|tea)/trl \(CPU per step\): \d+\.\d+ ",
        ),
    ],
)
def test_overhead_benchmark_quick_run(script, ratio, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
        cwd=tmp_path,  # the scripts write nothing; run elsewhere to make sure
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, f"{script} --quick failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    lines = re.findall(ratio, out.stdout, flags=re.MULTILINE)
    expected = 3 if script.startswith("bench_sft") else 5
    assert len(lines) == expected, out.stdout
    assert list(tmp_path.iterdir()) == []
