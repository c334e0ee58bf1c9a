"""Training stages launched as several processes (aligntrain/launch.py) and the gathered final save.

The end-to-end launch (two gloo processes under ``accelerate launch``, started by the stage's
own command in ``dvc repro``) is in tests/test_standin_studies.py; here the parts each on its own:
the command, the params section and what dvc.yaml tracks, and the save of weights gathered from
a sharded model, which must be written instead of the module's own.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from aligntrain import launch
from aligntrain.config import ParamsError, parse_params
from aligntrain.models import apply_lora, build_tiny_llama, load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.models.settings import LoraSettings
from aligntrain.pipeline import dvc_pipeline

ROOT = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((ROOT / "params.yaml").read_text())


def test_the_launch_command_runs_the_stage_module_on_each_process():
    args = ["train", "--params", "params.yaml", "--root", ".", "--variant", "ce"]
    assert launch.launch_command(2, None, 1, args, 29517) == [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--multi_gpu",
        "--num_cpu_threads_per_process",
        "1",
        "--main_process_port",
        "29517",
        "-m",
        "aligntrain.cli",
        *args,
    ]
    fsdp = launch.launch_command(8, Path("../../accelerate/fsdp2.yaml"), 0, ["warmup"], 29600)
    assert fsdp[3:7] == ["--num_processes", "8", "--config_file", "../../accelerate/fsdp2.yaml"]
    assert "--multi_gpu" not in fsdp and "--num_cpu_threads_per_process" not in fsdp


def test_rank_and_launch_marks_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv(launch.LAUNCHED, raising=False)
    assert launch.main_process() and not launch.launched()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(launch.LAUNCHED, "1")
    assert not launch.main_process() and launch.launched()
    assert 0 < launch.free_port() < 65536


def _launched(**section) -> dict:
    raw = copy.deepcopy(RAW)
    raw["launch"] = section
    return raw


def test_only_a_launched_study_tracks_its_launch_in_dvc_yaml():
    plain = dvc_pipeline(parse_params(RAW))["stages"]
    assert all("launch" not in entry.get("do", entry).get("params", []) for entry in plain.values())
    launched = dvc_pipeline(parse_params(_launched(num_processes=2, config_file="accelerate/fsdp2.yaml")))["stages"]
    for name in ("pretrain", "warmup", "train"):
        body = launched[name].get("do", launched[name])
        assert "launch" in body["params"] and "accelerate/fsdp2.yaml" in body["deps"], name
        assert body["cmd"].endswith(" --processes 2"), body["cmd"]  # checked by the stage against params
    for name in ("prepare", "rollouts", "evaluate", "compare", "report"):
        body = launched[name].get("do", launched[name])
        assert "launch" not in body.get("params", []), name


def test_the_launch_section_is_checked():
    with pytest.raises(ParamsError, match="launch.num_processes"):
        parse_params(_launched(num_processes=0))
    monitored = _launched(num_processes=2)
    monitored["monitor"]["enabled"] = True
    with pytest.raises(ParamsError, match="monitor.enabled samples in one process"):
        parse_params(monitored)
    assert parse_params(_launched(num_processes=1)).launch.multi_process is False


# ---------------------------------------------------------------- the gathered save


def _tiny(tokenizer, seed: int):
    return build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=128, seed=seed
    )


def test_gathered_weights_are_saved_instead_of_the_modules_own(tiny_model, tmp_path):
    model, tokenizer = tiny_model
    other = _tiny(tokenizer, seed=1).state_dict()  # other weights
    expected = {k: v.clone() for k, v in other.items()}  # save_pretrained may consume the dict it is given
    save_model_and_tokenizer(model, tokenizer, tmp_path / "model", state_dict={k: v.clone() for k, v in other.items()})
    saved = load_file(tmp_path / "model" / "model.safetensors")
    assert len(expected) > 20 and set(expected) <= set(saved), "every gathered tensor was written"
    for key, tensor in expected.items():
        assert torch.equal(saved[key], tensor), key
    assert not torch.equal(saved["model.embed_tokens.weight"], model.state_dict()["model.embed_tokens.weight"])
    broken = {k: v.clone() for k, v in other.items()}
    broken["model.norm.weight"][0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        save_model_and_tokenizer(model, tokenizer, tmp_path / "never", state_dict=broken)
    assert not (tmp_path / "never").exists()


def test_a_gathered_lora_adapter_is_merged_into_the_reloaded_base(tiny_model, tmp_path):
    model, tokenizer = tiny_model
    save_model_and_tokenizer(model, tokenizer, tmp_path / "base")
    base, tokenizer = load_model_and_tokenizer(tmp_path / "base")
    before = {k: v.clone() for k, v in base.state_dict().items()}
    lora = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    peft_model = apply_lora(base, lora, seed=0)  # its own B is zero: merging it would change nothing
    gathered = {k: v.clone() for k, v in peft_model.state_dict().items()}
    generator = torch.Generator().manual_seed(3)
    for key in gathered:
        if "lora_B" in key:
            gathered[key] = torch.randn(gathered[key].shape, generator=generator)
    given = {k: v.clone() for k, v in gathered.items()}  # save_pretrained may consume the dict it is given
    save_model_and_tokenizer(peft_model, tokenizer, tmp_path / "merged", state_dict=given)
    saved = load_file(tmp_path / "merged" / "model.safetensors")
    targeted = 0
    for layer in range(2):
        for module in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            a, b = gathered[f"{prefix}.lora_A.default.weight"], gathered[f"{prefix}.lora_B.default.weight"]
            key = f"model.layers.{layer}.self_attn.{module}.weight"
            torch.testing.assert_close(saved[key], before[key] + (8 / 4) * b @ a)  # W + (alpha/r) B A
            targeted += 1
    assert targeted == 4
    assert torch.equal(
        saved["model.layers.0.self_attn.k_proj.weight"], before["model.layers.0.self_attn.k_proj.weight"]
    )


def test_a_stage_refuses_a_dvc_yaml_written_for_another_process_count(tmp_path):
    """params say 2 processes, the command (a dvc.yaml not regenerated) says 1: refused before any work."""
    from typer.testing import CliRunner

    from aligntrain.cli import app

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_launched(num_processes=2)))
    out = CliRunner().invoke(app, ["train", "--variant", "ce", "--root", str(tmp_path)])
    assert out.exit_code == 2
    assert "launch.num_processes is 2 but dvc.yaml was written for 1" in out.stderr
    assert "aligntrain pipeline --root" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"], "nothing ran, no MLflow store"
