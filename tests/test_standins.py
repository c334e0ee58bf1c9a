"""Stand-ins for hub models and data (aligntrain/standins.py) and the stand-in runs of pipelines/<study>/."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from aligntrain.config import parse_params
from aligntrain.standins import FAMILIES, MICRO, write_standins
from aligntrain.study_folder import overlay

ROOT = Path(__file__).resolve().parents[1]
STANDIN_STUDIES = sorted(p.parent.name for p in (ROOT / "pipelines").glob("*/standin.yaml"))


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return write_standins(tmp_path_factory.mktemp("standins"), train_size=64, test_size=16)


#: one user turn "2+2?" with the generation prompt, as each hub family's template renders it (written out by hand)
MISTRAL_PROMPT = "<s>[INST] 2+2? [/INST]"
LLAMA3_PROMPT = (
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
#: Qwen2.5-Math-1.5B's template: its default system turn, then ChatML turns (no BOS)
QWEN_MATH_PROMPT = (
    "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
)


def _tokenizer(standins, name):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(standins[name])


@pytest.mark.parametrize(("family", "model_type", "model_class", "prompt"), [
    ("mistral", "mistral", "MistralForCausalLM", MISTRAL_PROMPT),  # Mistral-7B-Instruct-v0.2
    ("llama", "llama", "LlamaForCausalLM", LLAMA3_PROMPT),  # Llama-3 8B, Llama-3.2-1B-Instruct
    ("gpt2", "gpt2", "GPT2LMHeadModel", "[user] 2+2?\n[assistant] "),  # ProtGPT2 (no template of its own)
    ("qwen2", "qwen2", "Qwen2ForCausalLM", QWEN_MATH_PROMPT),  # Qwen2.5-Math-1.5B
])  # fmt: skip
def test_stand_in_models_are_of_the_hub_models_families(standins, family, model_type, model_class, prompt):
    from transformers import AutoModelForCausalLM

    config = json.loads((standins[family] / "config.json").read_text())
    assert config["model_type"] == model_type and config["architectures"] == [model_class]
    model = AutoModelForCausalLM.from_pretrained(standins[family])
    assert type(model).__name__ == model_class
    tokenizer = _tokenizer(standins, family)
    assert (model.config.bos_token_id, model.config.eos_token_id) == (tokenizer.bos_token_id, tokenizer.eos_token_id)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == prompt
    assert set(FAMILIES) == {"mistral", "llama", "gpt2", "qwen2"}


def test_the_mistral_stand_in_renders_conversations_as_mistral_instruct_v02():
    """[INST] turns after one <s>, each reply closed by </s>; no generation prompt; no system turn; turns alternate."""
    from jinja2.exceptions import TemplateError

    from aligntrain.standins import chat_tokenizer

    tokenizer = chat_tokenizer("mistral", ["2+2? 4 and 3*3 9"])
    turns = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3*3?"},
    ]
    chat = tokenizer.apply_chat_template(turns, tokenize=False)
    assert chat == "<s>[INST] 2+2? [/INST]4</s>[INST] and 3*3? [/INST]"
    assert tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) == chat
    with pytest.raises(TemplateError, match="no system turn"):
        tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, *turns], tokenize=False)
    for bad in (turns[:1] * 2, turns[1:]):  # two user turns in a row; an assistant turn first
        with pytest.raises(TemplateError, match="must alternate"):
            tokenizer.apply_chat_template(bad, tokenize=False)


def test_the_llama_stand_ins_render_conversations_as_llama3():
    """Header turns closed by <|eot_id|>, contents stripped, any role; the generation prompt is the assistant header."""
    from aligntrain.standins import chat_tokenizer

    tokenizer = chat_tokenizer("llama", ["Be brief. 2+2? 4"])
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": " 4\n"},
    ]
    assert tokenizer.apply_chat_template(turns, tokenize=False) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
    )
    assert tokenizer.apply_chat_template(turns[1:2], tokenize=False, add_generation_prompt=True) == LLAMA3_PROMPT
    assert tokenizer.apply_chat_template(turns[1:2], tokenize=False) == LLAMA3_PROMPT.removesuffix(
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


@pytest.mark.parametrize("name", ["llama", "reward"])
def test_llama3_special_tokens_are_single_special_tokens(standins, name):
    """Each Llama 3 special token is one id, kept whole inside text, and flagged special (dropped by skip_special_tokens)."""
    tokenizer = _tokenizer(standins, name)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|begin_of_text|>", "<|eot_id|>")
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in LLAMA3_SPECIALS}
    assert len(set(ids.values())) == 5 and tokenizer.unk_token_id not in ids.values()
    for token, token_id in ids.items():
        assert tokenizer(token, add_special_tokens=False)["input_ids"] == [token_id]
        assert token in tokenizer.all_special_tokens
    encoded = tokenizer(LLAMA3_PROMPT, add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(encoded) == [
        "<|begin_of_text|>", "<|start_header_id|>", "u", "s", "e", "r", "<|end_header_id|>", "\n", "\n",
        "2", "+", "2", "?", "<|eot_id|>",
        "<|start_header_id|>", "a", "s", "s", "i", "s", "t", "a", "n", "t", "<|end_header_id|>", "\n", "\n",
    ]  # fmt: skip
    assert tokenizer.decode(encoded, skip_special_tokens=True) == "user\n\n2+2?assistant\n\n"


def test_mistral_special_tokens_are_single_tokens_and_inst_is_text(standins):
    """<s> and </s> are one id each; [INST] and [/INST] are plain text, as in v0.2's tokenizer."""
    tokenizer = _tokenizer(standins, "mistral")
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == ("<s>", "</s>", "<unk>")
    for token in ("<s>", "</s>"):
        assert tokenizer(token, add_special_tokens=False)["input_ids"] == [tokenizer.convert_tokens_to_ids(token)]
    encoded = tokenizer(MISTRAL_PROMPT + "4</s>", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(encoded) == [
        "<s>", "[", "I", "N", "S", "T", "]", " ", "2", "+", "2", "?", " ", "[", "/", "I", "N", "S", "T", "]", "4", "</s>",
    ]  # fmt: skip
    assert tokenizer.unk_token_id not in encoded


def _reward_reference(folder, ids: list[int]) -> float:
    """The stand-in classifier's own logit for one unpadded sequence (no pad token in it: its last position)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def test_the_reward_stand_in_reads_pairs_in_the_llama3_form_and_scores_them_at_the_eot_token(standins):
    """RewardModel renders (prompt, reply) with the Llama 3 template: the text ends with the reply and <|eot_id|>,
    whose position holds each pair's score, in a padded batch as alone."""
    from aligntrain.rewards import RewardModel, RewardModelConfig

    scorer = RewardModel(RewardModelConfig(model=str(standins["reward"]), dtype="float32", batch_size=3))
    assert scorer.render("2+2?", " 4\n") == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
    )
    _, tokenizer = scorer._model()
    prompts = ["Q: 1+2=?\nA:", "Q: 12*3-4=?\nA:", "Q: 7=?\nA:"]
    replies = ["3 #### 3", "36-4=32 #### 32", "7"]
    scores = scorer.score(prompts, replies)
    for prompt, reply, score in zip(prompts, replies, scores, strict=True):
        text = scorer.render(prompt, reply)
        assert text.endswith(f"<|start_header_id|>assistant<|end_header_id|>\n\n{reply}<|eot_id|>")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and tokenizer.bos_token_id not in ids[1:], "one BOS, the template's"
        assert ids[-1] == tokenizer.convert_tokens_to_ids("<|eot_id|>") == tokenizer.eos_token_id
        assert score == pytest.approx(_reward_reference(standins["reward"], ids), abs=1e-5)
    assert len({round(s, 6) for s in scores}) == 3 and scorer.unscorable == 0


def test_reward_truncation_drops_the_pairs_start_and_keeps_the_reply_header_and_eot(standins):
    """A pair over max_length loses its beginning (left truncation): the assistant header, the reply and <|eot_id|>
    are scored; the score is that of those last max_length tokens alone."""
    from aligntrain.rewards import RewardModel, RewardModelConfig

    scorer = RewardModel(RewardModelConfig(model=str(standins["reward"]), dtype="float32", max_length=24))
    _, tokenizer = scorer._model()
    prompt, reply = "Q: 12*3-4+5*6-7=?\nA:", "3 #### 3"
    full = tokenizer(scorer.render(prompt, reply), add_special_tokens=False)["input_ids"]
    assert len(full) > 24
    kept = tokenizer(scorer.render(prompt, reply), add_special_tokens=False, truncation=True, max_length=24)
    assert tokenizer.convert_ids_to_tokens(kept["input_ids"]) == [
        ":", "<|eot_id|>", "<|start_header_id|>", "a", "s", "s", "i", "s", "t", "a", "n", "t", "<|end_header_id|>",
        "\n", "\n", "3", " ", "#", "#", "#", "#", " ", "3", "<|eot_id|>",
    ]  # fmt: skip
    assert kept["input_ids"] == full[-24:]
    [score] = scorer.score([prompt], [reply])
    assert score == pytest.approx(_reward_reference(standins["reward"], full[-24:]), abs=1e-5)
    assert score != pytest.approx(_reward_reference(standins["reward"], full), abs=1e-5)


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


def test_the_qwen2_stand_in_is_a_base_qwen25_math_over_bytes(standins):
    """Qwen2ForCausalLM with tied embeddings and no sliding window; Qwen2Tokenizer (what AutoTokenizer gives for
    qwen2) over the 256 bytes: no BOS, EOS <|endoftext|>, a pad of its own, ChatML tokens one id each."""
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads((standins["qwen2"] / "config.json").read_text())
    assert (config["tie_word_embeddings"], config["use_sliding_window"], config["bos_token_id"]) == (True, False, None)
    model = AutoModelForCausalLM.from_pretrained(standins["qwen2"])
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tokenizer = _tokenizer(standins, "qwen2")
    assert type(tokenizer).__name__ == "Qwen2Tokenizer" and len(tokenizer) == 256 + 4 == model.config.vocab_size
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == (
        None, "<|endoftext|>", "<pad>", None,
    )  # fmt: skip
    assert model.config.eos_token_id == tokenizer.eos_token_id != tokenizer.pad_token_id == model.config.pad_token_id
    assert tokenizer("x")["input_ids"] == [tokenizer.convert_tokens_to_ids("x")], "nothing is prepended"
    ids = tokenizer("<|im_start|>user\n⊢ p<|im_end|><|endoftext|>")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == [
        "<|im_start|>", "u", "s", "e", "r", "Ċ", "â", "Ĭ", "¢", "Ġ", "p", "<|im_end|>", "<|endoftext|>",
    ]  # fmt: skip
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), 260)


def _lean_problem(standins):
    from aligntrain.problems.lean import LeanProblem

    return LeanProblem(leandojo=str(standins["leandojo"]), test_set="leandojo", verifier="standin")


@pytest.mark.parametrize("family", ["qwen2", "llama", "mistral", "gpt2"])
def test_every_stand_in_tokenizer_reads_the_lean_stand_in_texts_back(standins, family):
    """Every step prompt + tactic, theorem prompt and whole gold proof encodes without <unk> and decodes to itself."""
    from aligntrain.problems.lean import read_leandojo, step_rows, theorem_row

    tokenizer = _tokenizer(standins, family)
    texts = []
    for file in ("train.json", "val.json", "test.json"):
        for traced in read_leandojo(standins["leandojo"] / "random" / file):
            texts += [row["prompt"] + row["completion"] for row in step_rows(traced)]
            texts += [theorem_row(traced)["prompt"], "".join(f"{step.tactic}\n" for step in traced.steps)]
    assert any("⊢" in t for t in texts) and any("⟨" in t for t in texts) and any("↔" in t for t in texts)
    assert any("₁" in t for t in texts) and any("∨" in t for t in texts) and any("|" in t for t in texts)
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids) == text


LEANDOJO_FIELDS = ["url", "commit", "file_path", "full_name", "start", "end", "traced_tactics"]
TRACED_FIELDS = ["tactic", "annotated_tactic", "state_before", "state_after"]


def test_the_leandojo_stand_in_is_in_the_release_schema(standins):
    """random/{train,val,test}.json: JSON arrays of theorems with LeanDojo Benchmark 4's fields; 48 + 1, 8, 8."""
    from aligntrain.problems.lean import read_leandojo

    root = standins["leandojo"]
    assert root.parts[-3:] == ("data", "lean", "leandojo_benchmark_4")  # where pipelines/dco_lean keeps the release
    assert {standins[f"leandojo_{split}"] for split in ("train", "val", "test")} == set(
        (root / "random").glob("*.json")
    )
    records = {
        split: json.loads(standins[f"leandojo_{split}"].read_text(encoding="utf-8"))
        for split in ("train", "val", "test")
    }
    assert {split: len(theorems) for split, theorems in records.items()} == {"train": 49, "val": 8, "test": 8}
    for theorem in [theorem for theorems in records.values() for theorem in theorems]:
        assert list(theorem) == LEANDOJO_FIELDS
        assert theorem["url"].startswith("https://") and len(theorem["commit"]) == 40
        assert theorem["file_path"].endswith(".lean") and theorem["end"] > theorem["start"]
        for step in theorem["traced_tactics"]:
            assert list(step) == TRACED_FIELDS and step["annotated_tactic"] == [step["tactic"], []]
        afters = [step["state_after"] for step in theorem["traced_tactics"]]
        assert afters == [] or (afters[-1] == "no goals" and "no goals" not in afters[:-1])
    assert [t["full_name"] for t in records["train"] if not t["traced_tactics"]] == [records["train"][-1]["full_name"]]
    loaded = {split: read_leandojo(standins[f"leandojo_{split}"]) for split in ("train", "val", "test")}
    assert [t.theorem.name for t in loaded["test"]] == [t["full_name"] for t in records["test"]]
    assert loaded["train"][-1].steps == () and loaded["train"][-1].theorem.initial_state is None
    first = loaded["val"][0]
    assert first.theorem.initial_state == records["val"][0]["traced_tactics"][0]["state_before"]


def test_the_standin_verifier_replays_every_traced_tactic_to_its_state_after(standins):
    """From each theorem's start (its first state_before), every tactic gives the recorded state_after; the last
    finishes the proof ("no goals"); and the whole proof checks."""
    from aligntrain.lean import LeanState, ProofFinished, StandinVerifier, check_proof
    from aligntrain.problems.lean import read_leandojo

    verifier = StandinVerifier()
    replayed = 0
    for split in ("train", "val", "test"):
        for traced in read_leandojo(standins[f"leandojo_{split}"]):
            if not traced.steps:
                continue
            state = verifier.start(traced.theorem)
            for index, step in enumerate(traced.steps):
                assert isinstance(state, LeanState) and state.text == step.state_before, (traced.theorem.name, index)
                state = verifier.step(state, step.tactic)
                if index == len(traced.steps) - 1:
                    assert isinstance(state, ProofFinished) and step.state_after == "no goals", traced.theorem.name
                else:
                    assert isinstance(state, LeanState) and state.text == step.state_after, (traced.theorem.name, index)
                replayed += 1
            assert check_proof(verifier, traced.theorem, [step.tactic for step in traced.steps]).proved
    assert replayed > 64


def test_the_leandojo_stand_in_covers_levels_1_to_5_and_its_splits_are_disjoint(standins):
    from collections import Counter

    from aligntrain.problems.lean import read_leandojo

    loaded = {split: read_leandojo(standins[f"leandojo_{split}"]) for split in ("train", "val", "test")}
    levels = Counter(t.level for t in loaded["train"] if t.steps)
    assert set(levels) == {1, 2, 3, 4, 5} and min(levels.values()) >= 9
    assert max(len(t.steps) for t in loaded["train"]) == 6, "level 5 holds proofs of five tactics or more"
    assert {t.level for split in ("val", "test") for t in loaded[split]} == {1, 2, 3, 4, 5}
    names = [t.theorem.name for theorems in loaded.values() for t in theorems]
    states = [t.theorem.initial_state for theorems in loaded.values() for t in theorems if t.steps]
    assert len(set(names)) == len(names) == 65 and len(set(states)) == len(states) == 64
    tactics = {step.tactic.split()[0] for theorems in loaded.values() for t in theorems for step in t.steps}
    assert tactics == {
        "intro",
        "apply",
        "exact",
        "constructor",
        "left",
        "right",
        "rcases",
        "obtain",
        "assumption",
        "trivial",
    }


def test_the_lean_problem_draws_rows_from_the_stand_in_and_grades_its_gold_proofs(standins):
    from aligntrain.problems.lean import read_leandojo

    problem = _lean_problem(standins)
    sizes = {"train": 48, "validation": 8, "test": 8}
    splits = problem.generate_splits(sizes, levels=[1, 2, 3, 4, 5], seed=0)
    assert splits == problem.generate_splits(sizes, levels=[1, 2, 3, 4, 5], seed=0)
    train = read_leandojo(standins["leandojo_train"])
    assert len(splits["train"]) == sum(len(t.steps) for t in train)
    assert len(splits["test"]) == 8 and all(row["completion"] == "" for row in splits["test"])
    for row in [row for rows in splits.values() for row in rows]:
        problem.validate_row(row)
    gold = {t.theorem.name: [step.tactic for step in t.steps] for t in read_leandojo(standins["leandojo_test"])}
    for row in splits["test"]:
        proof = problem.proof_text(gold[json.loads(row["answer"])["name"]])
        unfinished = "\n".join(proof.splitlines()[:-1])  # the proof without its last tactic
        assert problem.grade(proof, row).correct and problem.reward(unfinished, row) == 0.0
    (short,) = problem.generate_splits({"train": 1}, levels=[1], seed=3).values()
    assert len(short) == 1 and short[0]["level"] == 1
    with pytest.raises(ValueError, match=r"asks for 49 theorems but lean's train split has 48"):
        problem.generate_splits({"train": 49}, levels=[0, 1, 2, 3, 4, 5], seed=0)  # the term-mode one is left out
    corpus = problem.pretrain_corpus(16, seed=0)
    steps = {row["prompt"] + row["completion"] for row in splits["train"]}
    assert len(corpus) == 16 and set(corpus) <= steps and all(text.startswith("[GOAL]\n") for text in corpus)
    problem.close()


def test_write_lean_standins_is_seeded_and_sized(tmp_path):
    from aligntrain.standins import write_lean_standins

    one = write_lean_standins(tmp_path / "one", train=10, valid=3, test=4, seed=1)
    two = write_lean_standins(tmp_path / "two", train=10, valid=3, test=4, seed=1)
    other = write_lean_standins(tmp_path / "other", train=10, valid=3, test=4, seed=2)
    assert set(one) == {"leandojo", "leandojo_train", "leandojo_val", "leandojo_test"}
    for split, n in (("train", 11), ("val", 3), ("test", 4)):
        assert len(json.loads(one[f"leandojo_{split}"].read_text(encoding="utf-8"))) == n
        assert one[f"leandojo_{split}"].read_bytes() == two[f"leandojo_{split}"].read_bytes()
    assert one["leandojo_train"].read_bytes() != other["leandojo_train"].read_bytes()


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
