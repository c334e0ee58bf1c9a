"""Stand-ins for hub models and data (aligntrain/standins.py) and the stand-in runs of pipelines/<study>/."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from aligntrain.config import parse_params
from aligntrain.standins import FAMILIES, MICRO, overlay, write_standins

ROOT = Path(__file__).resolve().parents[1]
STANDIN_STUDIES = sorted(p.parent.name for p in (ROOT / "pipelines").glob("*/standin.yaml"))


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return write_standins(tmp_path_factory.mktemp("standins"), train_size=64, test_size=16)


def test_overlay_merges_mappings_and_replaces_everything_else():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 4, "e": {"f": {"g": 1}}}
    override = {"a": {"c": [3]}, "d": {"x": 1}, "e": {"f": {"h": 2}}, "new": None}
    assert overlay(base, override) == {
        "a": {"b": 1, "c": [3]},
        "d": {"x": 1},
        "e": {"f": {"g": 1, "h": 2}},
        "new": None,
    }
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 4, "e": {"f": {"g": 1}}}, "the base is not modified"


@pytest.mark.parametrize(("family", "model_type", "model_class"), [
    ("mistral", "mistral", "MistralForCausalLM"),  # Mistral-7B-Instruct-v0.2
    ("llama", "llama", "LlamaForCausalLM"),  # Llama-3 8B, Llama-3.2-1B-Instruct
    ("gpt2", "gpt2", "GPT2LMHeadModel"),  # ProtGPT2
])  # fmt: skip
def test_stand_in_models_are_of_the_hub_models_families(standins, family, model_type, model_class):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((standins[family] / "config.json").read_text())
    assert config["model_type"] == model_type and config["architectures"] == [model_class]
    model = AutoModelForCausalLM.from_pretrained(standins[family])
    assert type(model).__name__ == model_class
    tokenizer = AutoTokenizer.from_pretrained(standins[family])
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "[user] 2+2?\n[assistant] "
    assert set(FAMILIES) == {"mistral", "llama", "gpt2"}


def test_stand_in_data_has_the_hub_schemas_and_no_unknown_characters(standins):
    from transformers import AutoTokenizer

    train = pq.read_table(standins["math_train"])
    assert train.column_names == ["problem", "level", "type", "solution"]  # EleutherAI/hendrycks_math
    assert train.num_rows == 64 and set(train.column("level").to_pylist()) <= {f"Level {k}" for k in range(1, 6)}
    test = [json.loads(line) for line in standins["math500_test"].read_text().splitlines()]
    assert len(test) == 16
    assert list(test[0]) == ["problem", "solution", "answer", "subject", "level", "unique_id"]  # HuggingFaceH4/MATH-500
    assert all(isinstance(r["level"], int) and r["unique_id"].startswith("test/") for r in test)
    tokenizer = AutoTokenizer.from_pretrained(standins["mistral"])
    texts = [*train.column("solution").to_pylist(), *(r["problem"] for r in test)]
    for text in texts:
        assert tokenizer.unk_token_id not in tokenizer(text)["input_ids"], text


def test_the_contest_stand_ins_are_read_by_code_contests_in_the_tokenizers_alphabet(standins):
    """CodeContests and TACO stand-ins beside the others; every prompt and gold completion tokenizes without <unk>."""
    from transformers import AutoTokenizer

    from aligntrain.problems import PROBLEMS

    problem = PROBLEMS.parse(
        "code_contests",
        {
            "train": {"parquet": [str(standins["code_contests_train"])]},
            "validation": {"parquet": [str(standins["code_contests_valid"])]},
            "test": {"parquet": [str(standins["taco_test"])], "format": "TACO"},
        },
    )
    splits = problem.load_splits()
    assert {split: len(rows) for split, rows in splits.items()} == {"train": 15, "validation": 8, "test": 8}
    tokenizer = AutoTokenizer.from_pretrained(standins["llama"])
    for row in [row for rows in splits.values() for row in rows]:
        for text in (row["prompt"], row["completion"]):
            assert tokenizer.unk_token_id not in tokenizer(text)["input_ids"], text


def test_the_math_problem_reads_the_stand_in_data_and_grades_its_gold(standins):
    from aligntrain.problems import PROBLEMS

    problem = PROBLEMS.parse(
        "math",
        {
            "train": {"parquet": [str(standins["math_train"])]},
            "test": {"parquet": [str(standins["math500_test"])], "format": "MATH-500"},
        },
    )
    splits = problem.load_splits()
    assert len(splits["test"]) == 16 and len(splits["train"]) + len(splits["validation"]) == 64
    for row in [*splits["train"], *splits["test"]]:
        assert problem.grade(row["completion"], row).correct, row["id"]


@pytest.mark.parametrize("study", STANDIN_STUDIES)
def test_every_stand_in_override_makes_valid_parameters(study):
    folder = ROOT / "pipelines" / study
    merged = overlay(
        yaml.safe_load((folder / "params.yaml").read_text()), yaml.safe_load((folder / "standin.yaml").read_text())
    )
    params = parse_params(merged)
    assert params.model.base_model is None or params.model.base_model.startswith("./standins/"), "no hub download"
    assert params.model.lora is None or params.model.lora.quantization == "none", "4-bit NF4 needs CUDA"
    micro = parse_params(overlay(merged, MICRO))  # the micro size of tests/test_standin_studies.py
    assert micro.warmup.steps == 2 and micro.diagnostics.synthetic.tea_repetitions == 50


def test_every_stand_in_study_has_its_end_to_end_test():
    """A new pipelines/<study>/standin.yaml needs its run in tests/test_standin_studies.py."""
    source = (ROOT / "tests" / "test_standin_studies.py").read_text()
    missing = [s for s in STANDIN_STUDIES if f"def test_{s}_runs_end_to_end_on_stand_ins(" not in source]
    assert STANDIN_STUDIES and not missing, missing
