"""Reward models (aligntrain/rewards.py) and the chat problem (aligntrain/problems/chat.py) on local stand-ins."""

from __future__ import annotations

import gzip
import json
import logging
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from aligntrain.problems import PROBLEMS
from aligntrain.problems.chat import first_exchange_of_dialogue
from aligntrain.problems.hub import DataRowError
from aligntrain.rewards import RewardModel, RewardModelConfig
from aligntrain.standins import write_standins
from aligntrain.training.rl import batch_reward_fn


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return write_standins(tmp_path_factory.mktemp("standins"), train_size=24, test_size=6)


def _chat(standins, fmt="UltraFeedback", **extra):
    if fmt == "UltraFeedback":
        sources = {"train": {"parquet": [str(standins["ultrafeedback_train"])]}}
        sources["test"] = {"parquet": [str(standins["ultrafeedback_test"])]}
    else:
        sources = {"train": {"parquet": [str(standins["hh_rlhf_train"])], "format": fmt}}
        sources["test"] = {"parquet": [str(standins["hh_rlhf_test"])], "format": fmt}
    reward = {"model": str(standins["reward"]), "dtype": "float32", "batch_size": 4}
    return PROBLEMS.parse("chat", {**sources, "reward_model": reward, **extra})


def _reference_score(folder, prompt: str, response: str) -> float:
    """The classifier's logit for one pair, unbatched: the rendered conversation, no padding."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float(model(input_ids=ids).logits[0, 0])


def test_batched_scores_equal_one_pair_at_a_time(standins):
    scorer = RewardModel(RewardModelConfig(model=str(standins["reward"]), dtype="float32", batch_size=3))
    prompts = ["Q: 1+2=?\nA:", "Q: 12*3-4=?\nA:", "Q: 7=?\nA:", "Q: 5+5+5+5=?\nA:"]
    responses = ["3 #### 3", "36-4=32 #### 32", "7", "20 #### 20 and some more text"]
    scores = scorer.score(prompts, responses)
    for prompt, response, score in zip(prompts, responses, scores, strict=True):
        assert score == pytest.approx(_reference_score(standins["reward"], prompt, response), abs=1e-5)
    assert len({round(s, 6) for s in scores}) == 4, "different pairs, different scores"
    assert scorer.unscorable == 0


#: a template whose assistant turn ends with EOS, as Llama 3's ends with <|eot_id|>
EOS_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}[user] {{ m['content'] }}\n"
    "{% else %}[assistant] {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module")
def padless_reward(standins, tmp_path_factory):
    """The reward stand-in re-made over a tokenizer with NO pad token, whose template ends each reply with EOS."""
    from transformers import AutoTokenizer

    from aligntrain.standins import tiny_reward_model

    tokenizer = AutoTokenizer.from_pretrained(standins["reward"])
    tokenizer.pad_token = None
    tokenizer.chat_template = EOS_TEMPLATE
    folder = tmp_path_factory.mktemp("padless")
    model = tiny_reward_model(tokenizer)
    assert model.config.pad_token_id is None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _alone_score(folder, prompt: str, response: str) -> float:
    """The classifier's own logit for one pair run alone: no padding, its last position (pad_token_id unset)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert tokenizer.pad_token is None and model.config.pad_token_id is None
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids[0, -1] == tokenizer.eos_token_id, "the text ends with EOS, the token the loader pads with"
    with torch.no_grad():
        return float(model(input_ids=ids).logits[0, 0])


@pytest.mark.parametrize("side", ["right", "left"])
def test_scores_are_read_at_the_last_real_token_without_a_pad_token(padless_reward, side):
    """Each pair of a padded batch (lengths 6 to 33 characters apart) scores as it does alone, to 1e-5."""
    scorer = RewardModel(RewardModelConfig(model=str(padless_reward), dtype="float32", batch_size=4))
    _, tokenizer = scorer._model()
    assert tokenizer.pad_token == tokenizer.eos_token  # none of its own: the loader pads with EOS
    tokenizer.padding_side = side
    prompts = ["Q: 1+2=?\nA:", "Q: 12*3-4=?\nA:", "Q: 7=?\nA:", "Q: 5+5+5+5=?\nA:", "Q: 9-1=?\nA:"]
    responses = ["3 #### 3", "36-4=32 #### 32", "7", "20 #### 20 and some more text", "8"]
    texts = [scorer.render(p, r) for p, r in zip(prompts, responses, strict=True)]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert len(set(lengths[:4])) == 4, "every batch of 4 pads"
    scores = scorer.score(prompts, responses)
    alone = [_alone_score(padless_reward, p, r) for p, r in zip(prompts, responses, strict=True)]
    for score, reference in zip(scores, alone, strict=True):
        assert score == pytest.approx(reference, abs=1e-5)
    assert len({round(s, 6) for s in scores}) == 5 and scorer.unscorable == 0


def test_a_failing_batch_is_scored_pair_by_pair_and_only_the_bad_pair_is_lost(standins, caplog):
    scorer = RewardModel(RewardModelConfig(model=str(standins["reward"]), dtype="float32", batch_size=4))
    model, tokenizer = scorer._model()
    forward = model.base_model.forward  # scores are read from the base model's hidden states
    poison = tokenizer.convert_tokens_to_ids("9")

    def fragile_forward(input_ids=None, **kwargs):  # a device error on one particular pair
        if bool((input_ids == poison).any()):
            raise RuntimeError("CUDA error: an illegal memory access (injected)")
        return forward(input_ids=input_ids, **kwargs)

    model.base_model.forward = fragile_forward
    with caplog.at_level(logging.WARNING, logger="aligntrain.rewards"):
        scores = scorer.score(["Q: 1+2=?\nA:"] * 3, ["3", "9", "4"])
    assert math.isfinite(scores[0]) and math.isnan(scores[1]) and math.isfinite(scores[2])
    assert scorer.unscorable == 1
    assert "scoring it pair by pair" in caplog.text and "1 of 3 pairs unscorable" in caplog.text


def test_a_reward_model_needs_a_pinned_hub_revision_and_one_label(standins, tmp_path):
    with pytest.raises(ValueError, match="pin it with revision"):
        RewardModelConfig(model="Skywork/Skywork-Reward-V2-Llama-3.1-8B")
    with pytest.raises(ValueError, match="applies to hub ids"):
        RewardModelConfig(model=str(standins["reward"]), revision="main")
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    config = AutoConfig.from_pretrained(standins["reward"])
    config.num_labels = 2  # a preference classifier, not a reward model
    AutoModelForSequenceClassification.from_config(config).save_pretrained(tmp_path / "two")
    AutoTokenizer.from_pretrained(standins["reward"]).save_pretrained(tmp_path / "two")
    with pytest.raises(ValueError, match="has 2 labels"):
        RewardModel(RewardModelConfig(model=str(tmp_path / "two"), dtype="float32")).load()


def test_an_uncached_hub_reward_model_names_the_prefetch_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    config = RewardModelConfig(model="Skywork/Skywork-Reward-V2-Llama-3.1-8B", revision="main")
    with pytest.raises(FileNotFoundError, match="hf download Skywork/Skywork-Reward-V2-Llama-3.1-8B --revision main"):
        RewardModel(config).load()


@pytest.mark.parametrize("fmt", ["UltraFeedback", "hh-rlhf"])
def test_the_chat_problem_reads_both_schemas_into_the_same_rows(standins, fmt):
    problem = _chat(standins, fmt)
    splits = problem.load_splits()
    assert {k: len(v) for k, v in splits.items()} == {"train": 23, "validation": 1, "test": 6}
    row = splits["test"][0]
    problem.validate_row(row)
    assert row["answer"] == "" and row["level"] == 1 and row["id"].startswith("chat-L1-")
    assert row["prompt"].startswith("Q: ") and "####" in row["completion"]


def test_both_schemas_give_identical_rows(standins):
    ultra = _chat(standins).load_splits(["test"])["test"]
    hh = _chat(standins, "hh-rlhf").load_splits(["test"])["test"]
    assert ultra == hh


def test_bad_chat_records_are_named(tmp_path, standins):
    good = json.loads(gzip.decompress(standins["hh_rlhf_test"].read_bytes()).decode().splitlines()[0])
    bad = tmp_path / "bad.jsonl.gz"
    records = [good, {"chosen": "\n\nAssistant: hello"}]
    bad.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    problem = PROBLEMS.parse(
        "chat",
        {
            "train": {"parquet": [str(bad)], "format": "hh-rlhf"},
            "test": {"parquet": [str(standins["hh_rlhf_test"])], "format": "hh-rlhf"},
            "reward_model": {"model": str(standins["reward"])},
        },
    )
    with pytest.raises(DataRowError, match=r"bad\.jsonl\.gz: row 1: field 'chosen' is not a dialogue"):
        problem.load_splits(["train"])

    swapped = tmp_path / "swapped.parquet"
    record = {
        "prompt": "hi",
        "prompt_id": "x",
        "chosen": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
    }
    pq.write_table(pa.Table.from_pylist([record]), swapped)
    problem = PROBLEMS.parse(
        "chat",
        {
            "train": {"parquet": [str(swapped)]},
            "test": {"parquet": [str(standins["ultrafeedback_test"])]},
            "reward_model": {"model": str(standins["reward"])},
        },
    )
    with pytest.raises(DataRowError, match=r"row 0 \(prompt_id 'x'\): field 'chosen' must start with a user turn"):
        problem.load_splits(["train"])


def test_first_exchange_of_an_hh_dialogue():
    text = "\n\nHuman: What is 2+2?\n\nAssistant: 4.\n\nHuman: Sure?\n\nAssistant: Yes."
    assert first_exchange_of_dialogue(text) == ("What is 2+2?", "4.")
    with pytest.raises(ValueError):
        first_exchange_of_dialogue("Human: no leading blank lines")


def test_chat_grades_are_the_reward_models_scores(standins):
    problem = _chat(standins, correct_above=0.0)
    rows = problem.load_splits(["test"])["test"][:3]
    completions = ["1 #### 1", "22 #### 22", "hello"]
    grades = problem.grade_batch(completions, rows)
    for row, completion, grade in zip(rows, completions, grades, strict=True):
        assert grade.reward == pytest.approx(_reference_score(standins["reward"], row["prompt"], completion), abs=1e-5)
        assert grade.correct == (grade.reward > 0.0) and grade.answer_class is None
    assert problem.reward(completions[0], rows[0]) == pytest.approx(grades[0].reward)


def test_rl_batch_rewards_lose_only_what_fails(caplog):
    from types import SimpleNamespace

    rows = {"a": {"id": "a", "prompt": "p"}, "b": {"id": "b", "prompt": "q"}}

    def grade_batch(texts, batch_rows):
        assert [r["id"] for r in batch_rows] == ["a", "b", "a"]
        return [SimpleNamespace(reward=1.5), SimpleNamespace(reward=math.nan), SimpleNamespace(reward=-2.0)]

    reward = batch_reward_fn(grade_batch, rows)
    assert reward(["p", "q", "p"], ["x", "y", "z"], id=["a", "b", "a"]) == [1.5, None, -2.0]

    def broken(texts, batch_rows):
        raise RuntimeError("reward server gone")

    with caplog.at_level(logging.WARNING):
        assert batch_reward_fn(broken, rows)(["p"], ["x"], id=["a"]) == [None]
    assert "reward server gone" in caplog.text
