"""The accelerate configs every study launches with (accelerate/*.yaml at the root), read by accelerate itself.

Each file is what ``accelerate launch --config_file ../../accelerate/<name>.yaml -m aligntrain.cli
train --variant V``, run in a study's folder (``pipelines/<study>``), reads: it is loaded with
accelerate's own config loader (``load_config_from_file``), turned into launch arguments by the
same function ``accelerate launch`` uses (``_validate_launch_command``), and into the environment
the launcher hands the worker processes (``prepare_multi_gpu_env`` / ``prepare_deepspeed_cmd_env``);
for FSDP2 the plugin the workers build from that environment is constructed too. Nothing is
launched and no GPU is needed. The expected values are written out here, one table per file.

The four files serve every study (one node of 8 GPUs, bf16 as aligntrain's trainers ask on a GPU,
FSDP2 wrapping each model's own ``_no_split_modules``) from one folder: a test checks that no study
keeps a copy of its own and that every ``--config_file`` the studies' READMEs and docs/ name is
one of them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "accelerate"
STUDIES = sorted(p.parent.name for p in (ROOT / "pipelines").glob("*/params.yaml"))
NAMES = ("ddp", "zero2", "zero3", "fsdp2")
#: what `accelerate launch` must make of each file: launch flags, processes, precision, ZeRO stage, FSDP version
EXPECTED = {
    "ddp": dict(multi_gpu=True, use_deepspeed=False, use_fsdp=False, zero_stage=None, fsdp_version=None),
    "zero2": dict(multi_gpu=False, use_deepspeed=True, use_fsdp=False, zero_stage=2, fsdp_version=None),
    "zero3": dict(multi_gpu=False, use_deepspeed=True, use_fsdp=False, zero_stage=3, fsdp_version=None),
    "fsdp2": dict(multi_gpu=False, use_deepspeed=False, use_fsdp=True, zero_stage=None, fsdp_version=2),
}


def _launch_args(path: Path):
    """The arguments `accelerate launch --config_file PATH -m aligntrain.cli train --variant ce` runs with."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(path), "-m", "aligntrain.cli", "train", "--variant", "ce"])
    args, defaults, precision_from_config = _validate_launch_command(args)
    return args, defaults, precision_from_config


def test_one_folder_holds_the_four_configs_and_no_study_keeps_a_copy():
    assert {"cat_math_sft", "dco_math", "tang_math", "hydro"} <= set(STUDIES)
    assert sorted(p.name for p in FOLDER.iterdir()) == sorted(f"{n}.yaml" for n in NAMES)
    copies = [
        str(path.relative_to(ROOT))
        for study in (ROOT / "pipelines").iterdir()
        for path in [*(study / "accelerate").glob("*.yaml"), *(study / f"{n}.yaml" for n in NAMES)]
        if path.exists()
    ]
    assert copies == [], "the accelerate configs live in accelerate/ only"


def _config_files(text: str) -> list[str]:
    return re.findall(r"--config_file\s+(\S+\.yaml)", text)


def test_every_config_file_the_documentation_names_is_one_of_the_four():
    """A README's `--config_file` is run in its study's folder; docs/ name paths from the repository's root."""
    named = {}
    for readme in sorted((ROOT / "pipelines").glob("*/README.md")):
        for path in _config_files(readme.read_text()):
            named[f"{readme.relative_to(ROOT)}: {path}"] = (readme.parent / path).resolve()
    for doc in sorted([ROOT / "README.md", ROOT / "pipelines" / "README.md", *(ROOT / "docs").glob("*.md")]):
        for path in _config_files(doc.read_text()):
            base = ROOT / "pipelines" / STUDIES[0] if path.startswith("../") else ROOT
            named[f"{doc.relative_to(ROOT)}: {path}"] = (base / path).resolve()
    assert any("../../accelerate/" in where for where in named), "the studies' READMEs name the configs"
    configs = {(FOLDER / f"{n}.yaml").resolve() for n in NAMES}
    assert {where: path for where, path in named.items() if path not in configs} == {}


@pytest.mark.parametrize("name", NAMES)
def test_accelerate_loads_the_config(name):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DistributedType

    config = load_config_from_file(str(FOLDER / f"{name}.yaml"))
    assert isinstance(config, ClusterConfig)
    kind = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP"}[name]
    assert config.distributed_type == DistributedType[kind]
    assert (config.num_machines, config.num_processes, config.mixed_precision) == (1, 8, "bf16")
    assert config.use_cpu is False and config.gpu_ids == "all"
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1]) and config.fsdp_config == {}
        assert (
            config.deepspeed_config["offload_optimizer_device"]
            == config.deepspeed_config["offload_param_device"]
            == ("none")
        )
        assert config.deepspeed_config["zero3_init_flag"] is (name == "zero3")
        # ZeRO-3's final save gathers the shards into one 16-bit model (ZeRO-2 keeps the whole model on every GPU)
        assert config.deepspeed_config.get("zero3_save_16bit_model", False) is (name == "zero3")
    elif name == "fsdp2":
        assert config.fsdp_config["fsdp_version"] == 2 and config.deepspeed_config == {}
        assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert "fsdp_transformer_layer_cls_to_wrap" not in config.fsdp_config, "the model's own layers are wrapped"
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT", "the final save gathers the shards"
    else:
        assert config.deepspeed_config == {} and config.fsdp_config == {}


@pytest.mark.parametrize("name", NAMES)
def test_accelerate_launch_reads_the_config_as_intended(name):
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args, defaults, precision_from_config = _launch_args(FOLDER / f"{name}.yaml")
    expected = EXPECTED[name]
    assert (args.multi_gpu, args.use_deepspeed, args.use_fsdp) == (
        expected["multi_gpu"],
        expected["use_deepspeed"],
        expected["use_fsdp"],
    )
    assert (args.num_processes, args.num_machines, args.mixed_precision) == (8, 1, "bf16")
    assert args.module and args.training_script == "aligntrain.cli"
    assert args.training_script_args == ["train", "--variant", "ce"]
    if args.use_deepspeed:
        # as `accelerate launch` does before it calls the DeepSpeed launcher (which needs deepspeed installed)
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if precision_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        args.main_process_port = 0  # a free port: the launcher checks that it is unused
        _, env = prepare_deepspeed_cmd_env(args)
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(expected["zero_stage"])
        assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == str(expected["zero_stage"] == 3).lower()
        saves_16bit = env.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false")
        assert saves_16bit == str(expected["zero_stage"] == 3).lower(), "ZeRO-3's final save gathers the shards"
    else:
        env = prepare_multi_gpu_env(args)
        assert ("ACCELERATE_USE_FSDP" in env) is args.use_fsdp
        if args.use_fsdp:
            assert env["FSDP_VERSION"] == "2" and env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
            assert env["FSDP_RESHARD_AFTER_FORWARD"] == "true" and env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_the_fsdp2_plugin_the_workers_build(monkeypatch):
    """Each worker process builds accelerate's FSDP plugin from the launcher's environment: FSDP2, as configured."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env
    from torch.distributed.fsdp import CPUOffloadPolicy

    args, _, _ = _launch_args(FOLDER / "fsdp2.yaml")
    env = prepare_multi_gpu_env(args)
    for key in [k for k in os.environ if k.startswith(("FSDP_", "ACCELERATE_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True  # FSDP2's form of FULL_SHARD
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"
    assert plugin.cpu_ram_efficient_loading is True
    assert not isinstance(plugin.cpu_offload, CPUOffloadPolicy), "parameters stay on the GPU"
    assert plugin.auto_wrap_policy.__name__ == "transformer_auto_wrap_policy"
