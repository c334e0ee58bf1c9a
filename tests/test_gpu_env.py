"""The GPU compute environment (docs/gpu.md): constraints-gpu.txt pins a set that resolves together."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints-gpu.txt"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path = CONSTRAINTS) -> dict[str, Version]:
    """A constraints file as {canonical name: pinned version}; every line must be name==version."""
    pins = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#")[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert match, f"{path.name}:{number}: not an exact pin: {raw!r}"
        name = _canon(match[1])
        assert name not in pins, f"{path.name}:{number}: {name} pinned twice"
        pins[name] = Version(match[2])
    return pins


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_gpu_set_pins_the_versions_docs_gpu_md_explains():
    pins = _pins()
    assert str(pins["torch"]) == "2.13.0"  # no local label: the index's CUDA build, not 2.13.0+cpu
    assert pins["vllm"] == Version("0.31.0")
    assert pins["transformers"] in SpecifierSet(">=5.10.4,<5.18")  # vLLM 0.31's range
    assert pins["trl"] in SpecifierSet("==1.16.*")
    assert pins["fastapi"] < Version("0.137")  # vLLM 0.31: fastapi < 0.137
    for name in ("accelerate", "peft", "bitsandbytes", "deepspeed"):
        assert name in pins, name


def test_the_gpu_set_has_no_prefect():
    """Prefect 3.8 needs fastapi >= 0.139, vLLM 0.31 fastapi < 0.137: the orchestration extra stays out."""
    assert "prefect" not in _pins()


def test_the_cpu_suite_runs_the_gpu_sets_transformers():
    """One version (docs/gpu.md): the CPU tests vouch for the code the GPU environment runs, so the two
    constraint files agree on everything the trainers lean on."""
    cpu, gpu = _pins(ROOT / "constraints.txt"), _pins()
    assert f'"torch=={gpu["torch"]}"' in (ROOT / "Makefile").read_text()  # make venv installs torch itself
    for name in ("transformers", "huggingface-hub", "tokenizers", "trl", "accelerate", "peft", "datasets"):
        assert cpu[name] == gpu[name], f"{name}: constraints.txt {cpu[name]} vs constraints-gpu.txt {gpu[name]}"


@pytest.mark.parametrize("group", ["dependencies", "gpu", "test"])
def test_pyproject_ranges_admit_the_gpu_pins(group):
    """Every range of pyproject's dependencies and [gpu,test] extras holds the version pinned here."""
    project = _project()
    requirements = project["dependencies"] if group == "dependencies" else project["optional-dependencies"][group]
    pins = _pins()
    for text in requirements:
        requirement = Requirement(text)
        name = _canon(requirement.name)
        assert name in pins, f"{name} ({group}) is not pinned in constraints-gpu.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (text, str(pins[name]))


def test_the_gpu_extra_is_the_trl_compatible_vllm_range():
    gpu = {_canon(Requirement(r).name): Requirement(r).specifier for r in _project()["optional-dependencies"]["gpu"]}
    assert Version("0.22") in gpu["vllm"] and Version("0.31.0") in gpu["vllm"]
    assert Version("0.21.0") not in gpu["vllm"] and Version("0.32.0") not in gpu["vllm"]  # TRL 1.16 rejects them
    assert {"bitsandbytes", "deepspeed"} <= set(gpu)


@pytest.mark.slow
def test_the_gpu_set_resolves_with_pips_resolver(gpu_set_resolving):
    """scripts/check_gpu_env.sh: pip's resolver, --dry-run, metadata only (about a minute, ~120 MB).

    Started at the run's first test (tests/conftest.py's gpu_set_resolving); this waits for its end."""
    import time

    deadline = time.monotonic() + 900
    while not (gpu_set_resolving / "gpu-resolve.rc").is_file():
        assert time.monotonic() < deadline, "scripts/check_gpu_env.sh did not end in 15 min"
        time.sleep(1)
    returncode = int((gpu_set_resolving / "gpu-resolve.rc").read_text())
    output = (gpu_set_resolving / "gpu-resolve.log").read_text()
    if returncode == 77:
        pytest.skip(output.strip()[-500:] or "the package index is unreachable")
    assert returncode == 0, output[-6000:]
    assert "OK:" in output


def test_the_gpu_check_says_where_to_run_it_when_there_is_no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: `make gpu-check` runs the real check")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and "no CUDA device" in run.stdout


def test_the_gpu_check_ends_with_a_line_per_check_naming_what_it_skipped():
    """No GPU needed: the summary of a report as written on a GPU machine without vLLM or bitsandbytes."""
    summary_lines = runpy.run_path(str(ROOT / "scripts" / "gpu_check.py"), run_name="gpu_check")["summary_lines"]
    report = {
        "device": "NVIDIA H100 80GB HBM3",
        "generation": {"vllm": {"skipped": "vllm is not installed"}, "hf": {"tokens_per_second": 2067.0}},
        "grpo_step": {"loss": 0.1, "seconds": 9.8},
        "grpo_step_vllm_colocate": {"skipped": "vllm is not installed"},
        "lora_sft_step_dco_a": {"error": "RuntimeError: CUDA out of memory\nmore", "traceback": "Traceback ..."},
        "qlora_sft_step": {"skipped": "bitsandbytes is not installed"},
    }
    checks = [*(key for key in report if key != "device"), "lora_sft_step_pass_at_n"]
    assert summary_lines(report, checks) == [
        "gpu_check: generation: ran; vllm skipped (vllm is not installed)",
        "gpu_check: grpo_step: ran",
        "gpu_check: grpo_step_vllm_colocate: skipped (vllm is not installed)",
        "gpu_check: lora_sft_step_dco_a: failed (RuntimeError: CUDA out of memory)",
        "gpu_check: qlora_sft_step: skipped (bitsandbytes is not installed)",
        "gpu_check: lora_sft_step_pass_at_n: not run",
    ]
