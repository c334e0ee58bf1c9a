"""Stage functions on a tiny saved warm-up model: every objective kind trains and saves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aligntrain.config import parse_params
from aligntrain.models import load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.paths import StudyPaths
from aligntrain.stages import training

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def study(tmp_path, tiny_model):
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["train"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["rl"].update(steps=2, batch_size=8, num_generations=4, max_completion_length=12, checkpoint_every=1)
    raw["variants"]["loo"] = {"objective": "rl", "rule": "loo_pass_at_k"}
    params = parse_params(raw)
    paths = StudyPaths(tmp_path)
    save_model_and_tokenizer(*tiny_model, paths.warmup_model)
    return params, paths


@pytest.mark.parametrize("variant", ["warmup", "pass_at_n", "grpo", "loo"])
def test_train_variant_saves_a_model(study, arith_rows, variant):
    params, paths = study
    metrics = training.train_variant(params, paths, variant, arith_rows["train"], arith_rows["validation"][:4])
    model, _ = load_model_and_tokenizer(paths.variant_model(variant))
    assert model.config.model_type == "llama"
    if params.variant(variant).options.kind == "rl":
        assert metrics["resumed_from_step"] == 0 and "reward" in metrics
        assert not any((paths.root / "checkpoints").glob("train-*")), "checkpoints removed after success"
    if variant == "warmup":
        assert metrics == {"train_steps": 0.0}


def test_rl_variant_that_does_not_fit_fails_before_training():
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["variants"]["bad"] = {"objective": "rl", "rule": "pkpo", "budget": 99}
    with pytest.raises(ValueError, match=r"variants\.bad: rule 'pkpo': option budget \(99\) must be <= the group size"):
        parse_params(raw)
    raw["variants"]["bad"] = {"objective": "rl", "rule": "no_such_rule"}
    with pytest.raises(ValueError, match=r"variants\.bad: .*known"):
        parse_params(raw)
    raw["variants"].pop("bad")
    raw.pop("rl")
    with pytest.raises(ValueError, match=r"variants\.grpo is an RL variant"):
        parse_params(raw)


def _prepared(tmp_path, arith_rows, edit=None):
    import pandas as pd

    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    params, paths = parse_params(raw), StudyPaths(tmp_path)
    for split, rows in arith_rows.items():
        frame = pd.DataFrame(rows)
        if edit and split == "test":
            frame = edit(frame)
        paths.split(split).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(paths.split(split))
    return params, paths


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda f: f.assign(answer=[None] + list(f.answer[1:])), "answer"),  # NaN after the parquet round trip
        (lambda f: f.assign(answer=[7] * len(f)).astype({"answer": "int64"}), "answer"),  # integers, not strings
        (lambda f: f.assign(answer=["banana"] + list(f.answer[1:])), "banana"),
        (lambda f: f.iloc[:0], "no rows"),
    ],
    ids=["nan-answer", "integer-answers", "wrong-answer", "empty"],
)
def test_stages_validate_the_rows_they_read(tmp_path, arith_rows, edit, says):
    """data/ edited or corrupted after prepare: the reading stage names the file (and the row), at once."""
    from aligntrain.stages.prepare import read_split

    params, paths = _prepared(tmp_path, arith_rows, edit)
    assert len(read_split(params, paths, "train")) == len(arith_rows["train"])
    with pytest.raises(ValueError, match="test.parquet") as err:
        read_split(params, paths, "test")
    assert says in str(err.value)
    if says != "no rows":
        assert arith_rows["test"][0]["id"] in str(err.value) or "row" in str(err.value)


def test_a_prompt_longer_than_the_context_is_named_before_sampling(tiny_model, arith_rows):
    from aligntrain.stages.rollouts import check_prompt_lengths

    _, tokenizer = tiny_model
    rows = [dict(arith_rows["test"][0]), dict(arith_rows["test"][1])]
    check_prompt_lengths(rows, tokenizer, context=128, max_new_tokens=32)
    rows[1]["prompt"] = "Q: " + "1+" * 5000 + "1=?\nA: "
    with pytest.raises(ValueError, match=rf"row {rows[1]['id']!r}.*context of 128 tokens.*max_new_tokens = 32"):
        check_prompt_lengths(rows, tokenizer, context=128, max_new_tokens=32)


@pytest.mark.parametrize(
    ("prompt_split", "variant", "reads"),
    [
        ("test", "grpo", "test"),
        ("train", "grpo", "train"),
        ("test", "pass_at_n", "train"),  # SFT always trains on the training split
    ],
)
def test_rl_trains_on_the_split_rl_prompt_split_names(tmp_path, arith_rows, monkeypatch, prompt_split, variant, reads):
    """rl.prompt_split=test: the RL stage trains on the prompts the study evaluates on (Tang et al.'s training-set
    curves); the stage reads exactly that split's rows, and SFT variants are unaffected."""
    from aligntrain import pipeline

    params, paths = _prepared(tmp_path, arith_rows)
    params = params.model_copy(update={"rl": params.rl.model_copy(update={"prompt_split": prompt_split})})
    seen = {}

    def fake_train_variant(params, paths, variant, train_rows, val_rows, callbacks=()):
        seen["ids"] = [r["id"] for r in train_rows]
        return {}

    class _Run:
        def trainer_callback(self):
            return None

    monkeypatch.setattr(training, "train_variant", fake_train_variant)
    pipeline.get_stage("train").run(params, paths, variant, _Run())
    assert seen["ids"] == [r["id"] for r in arith_rows[reads]]
    assert not set(seen["ids"]) & {r["id"] for r in arith_rows["train" if reads == "test" else "test"]}


def test_rl_prompt_split_is_a_known_split():
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["rl"]["prompt_split"] = "validation"
    with pytest.raises(ValueError, match=r"rl\.prompt_split"):
        parse_params(raw)
