"""Hub models, LoRA and QLoRA: any causal LM loaded one way, adapters trained and merged into plain models.

Everything runs offline on tiny models saved here with ``save_pretrained`` (a Llama and
a Mistral, with a character tokenizer that has a chat template); a hub id is served from
a Hugging Face cache laid out in a temporary folder, exactly as ``hf download`` lays it
out. The QLoRA test needs CUDA and bitsandbytes and is skipped without them.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import yaml
from interruption import Crash
from pydantic import ValidationError
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from aligntrain.config import OptimConfig, RLConfig, parse_params
from aligntrain.models import (
    ModelNotAvailableError,
    apply_lora,
    build_char_tokenizer,
    chat_prompt,
    check_target_modules,
    load_model_and_tokenizer,
    load_pretrained,
    policy_rows,
    save_model_and_tokenizer,
    with_chat_template,
)
from aligntrain.models.settings import LoraSettings, ModelConfig
from aligntrain.objectives import CrossEntropy, PassAtN
from aligntrain.paths import StudyPaths
from aligntrain.stages import training
from aligntrain.training.rl import train_rl
from aligntrain.training.sft import train_sft

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
#: a chat template in the tokenizer's alphabet that writes the BOS token itself, as many instruct templates do
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
SHA = "0123456789abcdef0123456789abcdef01234567"


# --------------------------------------------------------------------------- tiny models saved like hub models


@pytest.fixture(scope="module")
def chat_tokenizer():
    from aligntrain.problems import get_problem

    rows = get_problem("arith").generate_splits({"train": 48, "validation": 8, "test": 6}, levels=[1, 2], seed=0)
    texts = [r[f] for split in rows.values() for r in split for f in ("prompt", "completion")]
    tokenizer = build_char_tokenizer([*texts, "[user] [assistant] \n"])
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def _tiny(kind: str, tokenizer):
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))
    return MistralForCausalLM(MistralConfig(**common, sliding_window=None))


def _save(kind: str, tokenizer, folder: Path) -> Path:
    _tiny(kind, tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _hub_cache(tmp_path: Path, tokenizer, repo_id: str = "aligntrain-test/tiny-mistral") -> Path:
    """A Hugging Face cache holding ``repo_id`` at commit SHA, with ``main`` pointing at it."""
    cache = tmp_path / "hub"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    _save("mistral", tokenizer, repo / "snapshots" / SHA)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SHA)
    return cache


@pytest.fixture()
def offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


# --------------------------------------------------------------------------- loading any causal LM one way


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_a_saved_model_loads_by_path_with_dtype_chat_template_and_left_padding(kind, chat_tokenizer, tmp_path):
    folder = _save(kind, chat_tokenizer, tmp_path / kind)
    model, tokenizer = load_pretrained(ModelConfig(base_model=str(folder), chat_template=True))
    assert type(model).__name__ == f"{kind.capitalize()}ForCausalLM" and model.dtype == torch.float32
    assert tokenizer.padding_side == "left"

    prompt = "Q: 1+2=?"
    rendered = chat_prompt(tokenizer, prompt)
    assert rendered == f"[user] {prompt}\n[assistant] ", "the template's own BOS is dropped: the tokenizer adds it"
    ids = tokenizer(rendered)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.bos_token_id not in ids[1:], "exactly one BOS"

    # Left padding: a batch of unequal prompts continues each one as it would alone.
    prompts = [chat_prompt(tokenizer, p) for p in ("Q: 1+2=?", "Q: 12+30=?")]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    assert batch["input_ids"][0, 0] == tokenizer.pad_token_id and batch["attention_mask"][0, 0] == 0
    greedy = dict(do_sample=False, max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)
    together = model.generate(**batch, **greedy)[:, batch["input_ids"].shape[1] :]
    for row, text in enumerate(prompts):
        alone = tokenizer(text, return_tensors="pt")
        assert torch.equal(model.generate(**alone, **greedy)[0, alone["input_ids"].shape[1] :], together[row])

    half, _ = load_pretrained(ModelConfig(base_model=str(folder), dtype="bfloat16"))
    assert half.dtype == torch.bfloat16


def test_chat_template_needs_a_tokenizer_that_has_one(chat_tokenizer, tmp_path):
    plain = copy.deepcopy(chat_tokenizer)
    plain.chat_template = None
    folder = _save("llama", plain, tmp_path / "m")
    with pytest.raises(
        ValueError, match=rf"tokenizer of '{folder}' has no chat template .* set model\.chat_template: false"
    ):
        load_pretrained(ModelConfig(base_model=str(folder), chat_template=True))
    load_pretrained(ModelConfig(base_model=str(folder)))  # a base model without a template is fine


def test_a_hub_id_loads_from_the_cache_offline_at_its_revision(chat_tokenizer, tmp_path, offline):
    cache = _hub_cache(tmp_path, chat_tokenizer)
    for revision in (SHA, "main"):
        model, tokenizer = load_pretrained(
            ModelConfig(base_model="aligntrain-test/tiny-mistral", revision=revision), cache_dir=cache
        )
        assert isinstance(model, MistralForCausalLM) and tokenizer.padding_side == "left"


@pytest.mark.parametrize(
    ("repo_id", "revision"),
    [
        ("aligntrain-test/absent", SHA),
        ("aligntrain-test/tiny-mistral", "f" * 40),
        ("aligntrain-test/tiny-mistral", "v2"),
    ],
    ids=["unknown-id", "uncached-commit", "uncached-tag"],
)
def test_a_model_missing_offline_is_named_with_how_to_prefetch_it(repo_id, revision, chat_tokenizer, tmp_path, offline):
    cache = _hub_cache(tmp_path, chat_tokenizer)
    with pytest.raises(ModelNotAvailableError) as caught:
        load_pretrained(ModelConfig(base_model=repo_id, revision=revision), cache_dir=cache)
    message = str(caught.value)
    assert f"hub model {repo_id!r} at revision {revision!r} is not in the local Hugging Face cache" in message
    assert "offline (HF_HUB_OFFLINE=1)" in message
    assert f"`hf download {repo_id} --revision {revision} --cache-dir {cache}`" in message
    assert f"`huggingface-cli download {repo_id} --revision {revision} --cache-dir {cache}`" in message
    assert "set model.base_model to a local directory" in message


def test_a_partial_snapshot_is_refused_before_loading(chat_tokenizer, tmp_path, offline):
    cache = _hub_cache(tmp_path, chat_tokenizer)
    for weights in (cache / "models--aligntrain-test--tiny-mistral" / "snapshots" / SHA).glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(ModelNotAvailableError, match=r"has no weights \(\*\.safetensors, or pytorch_model\*\.bin"):
        load_pretrained(ModelConfig(base_model="aligntrain-test/tiny-mistral", revision=SHA), cache_dir=cache)


# --------------------------------------------------------------------------- the stand-ins' real template forms


@pytest.fixture(scope="module")
def standin_models(tmp_path_factory):
    """aligntrain.standins' models: the Mistral and Llama stand-ins carry their hub families' chat templates."""
    from aligntrain.standins import write_standins

    return write_standins(tmp_path_factory.mktemp("standins"), train_size=16, test_size=4)


#: "Q: 1+2=?" as one user turn with the generation prompt, written out by hand, and its length in tokens (the
#: tokenizer's BOS, then one token per character and per special token); the template's own BOS is dropped
STANDIN_PROMPTS = {
    "mistral": ("[INST] Q: 1+2=? [/INST]", 1 + 7 + 8 + 8),
    "llama": (
        "<|start_header_id|>user<|end_header_id|>\n\nQ: 1+2=?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        1 + (1 + 4 + 1 + 2) + 8 + 1 + (1 + 9 + 1 + 2),
    ),
}


def _standin(standin_models, family: str, **settings):
    return load_pretrained(ModelConfig(base_model=str(standin_models[family]), **settings))


@pytest.mark.parametrize("family", ["mistral", "llama"])
def test_chat_prompts_on_the_stand_ins_take_their_hub_families_forms(standin_models, family):
    """chat_prompt and policy_rows render Mistral's [INST] turn and Llama 3's header turn, with exactly one BOS."""
    _, tokenizer = _standin(standin_models, family, chat_template=True)
    expected, length = STANDIN_PROMPTS[family]
    rendered = chat_prompt(tokenizer, "Q: 1+2=?")
    assert rendered == expected
    ids = tokenizer(rendered)["input_ids"]
    assert len(ids) == length and tokenizer.unk_token_id not in ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.bos_token_id not in ids[1:], "exactly one BOS"
    assert tokenizer.decode(ids) == tokenizer.bos_token + rendered, "special tokens decode whole"
    rows = [{"id": "arith-1", "prompt": "Q: 1+2=?", "answer": "3"}]
    config = ModelConfig(base_model=str(standin_models[family]), chat_template=True)
    assert policy_rows(config, tokenizer, rows) == [{**rows[0], "prompt": expected}]
    assert policy_rows(config.model_copy(update={"chat_template": False}), tokenizer, rows) == rows


@pytest.mark.parametrize("family", ["mistral", "llama"])
def test_rollouts_count_the_whole_rendered_prompt_and_refuse_rather_than_truncate_it(standin_models, family):
    """No prompt is cut to fit the context (its generation prompt would go): one too long is an error naming it."""
    from aligntrain.stages.rollouts import check_prompt_lengths

    _, tokenizer = _standin(standin_models, family, chat_template=True)
    _, length = STANDIN_PROMPTS[family]
    rows = with_chat_template([{"id": "arith-1", "prompt": "Q: 1+2=?"}], tokenizer)
    check_prompt_lengths(rows, tokenizer, context=length + 6, max_new_tokens=6)
    with pytest.raises(ValueError, match=rf"row 'arith-1': its prompt is {length} tokens, .* leaves {length - 1}$"):
        check_prompt_lengths(rows, tokenizer, context=length + 5, max_new_tokens=6)


@pytest.mark.parametrize("family", ["mistral", "llama"])
def test_sft_truncation_keeps_the_rendered_prompt_whole_and_cuts_the_completions_end(standin_models, family, tmp_path):
    """TRL keeps a sequence's start: the prompt up to its generation prompt stays; the completion and EOS are cut."""
    from datasets import Dataset

    from aligntrain.training.sft import StrategySFTTrainer, _sft_config

    model, tokenizer = _standin(standin_models, family, chat_template=True)
    prompt, length = STANDIN_PROMPTS[family]
    completion = " 3 #### 3"

    def prepared(max_length: int) -> dict:
        args = _sft_config(
            OptimConfig(steps=1, batch_size=1), tmp_path / str(max_length), max_length=max_length, seed=0,
            completion_only=True, eval_steps=None,
        )  # fmt: skip
        rows = Dataset.from_dict({"prompt": [prompt], "completion": [completion]})
        trainer = StrategySFTTrainer(
            model=model, args=args, train_dataset=rows, processing_class=tokenizer, objective=CrossEntropy()
        )
        [row] = trainer.train_dataset
        return row

    whole = prepared(128)
    assert whole["input_ids"] == tokenizer(prompt + completion + tokenizer.eos_token)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(whole["input_ids"][-1]) == {"mistral": "</s>", "llama": "<|eot_id|>"}[family]
    cut = prepared(length + 3)
    assert cut["input_ids"] == whole["input_ids"][: length + 3]
    assert tokenizer.decode(cut["input_ids"][:length]) == tokenizer.bos_token + prompt, "the prompt is whole"
    assert tokenizer.decode(cut["input_ids"][length:]) == " 3 "
    assert cut["labels"] == [-100] * length + cut["input_ids"][length:], "the loss is on the completion's start only"


# --------------------------------------------------------------------------- pickled weights, read weights-only


def _save_pickled_gpt2(tokenizer, folder: Path, extra: dict | None = None):
    """A tiny GPT-2 (ProtGPT2's architecture) saved with its weights in ``pytorch_model.bin`` only.

    transformers 5 has dropped ``save_pretrained(safe_serialization=False)`` (it writes
    safetensors whatever it is told), so the file is written the way transformers 4 wrote it:
    ``torch.save`` of the state dict, beside ``config.json``. ``extra`` joins the state dict.
    """
    from aligntrain.standins import tiny_causal_lm

    model = tiny_causal_lm("gpt2", tokenizer, max_length=128).eval()
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    torch.save({**model.state_dict(), **(extra or {})}, folder / "pytorch_model.bin")
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".safetensors")) == ["pytorch_model.bin"]
    return model


@pytest.mark.parametrize("source", ["local", "hub-cache"])
def test_a_pickled_only_checkpoint_loads_weights_only_with_the_same_logits(source, chat_tokenizer, tmp_path, offline):
    """ProtGPT2's case (only pytorch_model.bin at main): it loads through aligntrain's loader, weights unchanged."""
    if source == "local":
        folder = tmp_path / "gpt2"
        config = ModelConfig(base_model=str(folder))
    else:
        repo = tmp_path / "hub" / "models--aligntrain-test--tiny-gpt2"
        folder = repo / "snapshots" / SHA
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(SHA)
        config = ModelConfig(base_model="aligntrain-test/tiny-gpt2", revision="main")
    folder.mkdir(parents=True)
    original = _save_pickled_gpt2(chat_tokenizer, folder)
    loaded, tokenizer = load_pretrained(config, cache_dir=tmp_path / "hub")
    assert type(loaded).__name__ == "GPT2LMHeadModel" and tokenizer.padding_side == "left"
    batch = tokenizer(["Q: 1+2=?\nA: ", "Q: 12*3-4=?\nA: 36-4"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, original(**batch).logits)


def test_a_pickle_that_would_run_code_is_refused_naming_the_file(chat_tokenizer, tmp_path):
    """A pytorch_model.bin holding an object whose unpickling runs code: refused by name, and the code never ran."""
    from aligntrain.models.weights import UnsafeCheckpointError

    marker = tmp_path / "the-payload-ran"

    class Payload:  # unpickling calls open(marker, "w"): a file appears if it ever runs
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = tmp_path / "gpt2"
    folder.mkdir()
    _save_pickled_gpt2(chat_tokenizer, folder, extra={"payload": Payload()})
    with pytest.raises(UnsafeCheckpointError, match=rf"refusing to load {folder / 'pytorch_model.bin'}: .*io\.open"):
        load_model_and_tokenizer(folder)
    with pytest.raises(UnsafeCheckpointError, match="pytorch_model.bin"):
        load_pretrained(ModelConfig(base_model=str(folder)))
    assert not marker.exists(), "nothing in the file ran"
    # The payload is live: an unrestricted unpickler would have run it.
    torch.load(folder / "pytorch_model.bin", weights_only=False)
    assert marker.exists()


def test_pickled_weights_are_downloaded_only_when_the_revision_has_no_safetensors(tmp_path, monkeypatch):
    """Online, *.bin is fetched in a second pass only for a revision without safetensors (nferruz/ProtGPT2 at main)."""
    import fnmatch

    import huggingface_hub

    from aligntrain.models import hub

    asked: list[list[str]] = []

    def fake_snapshot_download(name, *, revision, cache_dir, allow_patterns, local_files_only=False):
        asked.append(list(allow_patterns))
        remote, local = tmp_path / "remote" / name, tmp_path / "local" / name
        local.mkdir(parents=True, exist_ok=True)
        for file in remote.iterdir():
            if any(fnmatch.fnmatch(file.name, pattern) for pattern in allow_patterns):
                (local / file.name).write_bytes(file.read_bytes())
        return str(local)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    for name, files in (("pickled", ["pytorch_model.bin"]), ("both", ["model.safetensors", "pytorch_model.bin"])):
        (tmp_path / "remote" / name).mkdir(parents=True)
        for file in ["config.json", "tokenizer.json", "flax_model.msgpack", *files]:
            (tmp_path / "remote" / name / file).write_text("x")
    asked.clear()
    folder = Path(hub._download("pickled", "main", None))
    assert asked == [hub.MODEL_FILES, ["pytorch_model*.bin"]]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "pytorch_model.bin", "tokenizer.json"]
    asked.clear()
    folder = Path(hub._download("both", "main", None))
    assert asked == [hub.MODEL_FILES], "never the .bin beside safetensors"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ({"base_model": "Qwen/Qwen2.5-0.5B-Instruct"}, "is a hub id (no such local directory): pin it with revision"),
        ({"base_model": "./no/such/dir", "revision": SHA}, "applies to hub ids; base_model './no/such/dir' is a local"),
        ({"base_model": "not a/valid//id", "revision": SHA}, "is neither an existing directory nor a hub id"),
        ({"revision": SHA}, "revision needs base_model"),
        ({"chat_template": True}, "chat_template needs base_model"),
        ({"dtype": "float64"}, "model.dtype: Input should be 'float32', 'bfloat16' or 'float16'"),
        ({"lora": {"quantization": "int8"}}, "model.lora.quantization: Input should be 'none' or 'nf4'"),
        ({"lora": {"target_modules": []}}, "target_modules needs at least one non-empty module name"),
        ({"lora": {"target_modules": ["q_proj", "q_proj"]}}, "target_modules must not repeat"),
        ({"lora": {"r": 0}}, "model.lora.r: Input should be greater than or equal to 1"),
        ({"lora": {"alpha": True}}, "model.lora.alpha"),
        ({"lora": {"rank": 8}}, "model.lora.rank: Extra inputs are not permitted"),
    ],
)
def test_bad_model_settings_are_refused_naming_the_key(model, says):
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["model"].update(model)
    with pytest.raises(ValueError, match="invalid parameters") as caught:
        parse_params(raw)
    assert says in str(caught.value)


def test_model_settings_default_to_the_tiny_model_and_full_fine_tuning():
    config = ModelConfig()
    assert (config.base_model, config.revision, config.dtype, config.chat_template, config.lora) == (
        None,
        None,
        "float32",
        False,
        None,
    )
    assert LoraSettings().target_modules == "all-linear" and LoraSettings().quantization == "none"
    assert ModelConfig(base_model="org/name", revision="main").revision == "main"
    with pytest.raises(ValidationError):
        LoraSettings(dropout=1.0)


# --------------------------------------------------------------------------- LoRA


LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])


def _base_name(peft_name: str) -> str:
    """``base_model.model.X.base_layer.weight`` -> ``X.weight``: the base model's name of a wrapped parameter."""
    return peft_name.removeprefix("base_model.model.").replace(".base_layer", "")


def _check_only_adapters_trained(peft_model, before: dict[str, torch.Tensor]) -> None:
    """Only the ``default`` adapter trained: base weights as they were, every B moved from zero.

    GRPO with a KL term adds a frozen ``ref`` copy of the initial adapter (B = 0: the base model).
    """
    trained_b = 0
    for name, param in peft_model.named_parameters():
        if ".default." in name:
            assert param.requires_grad, name
            if "lora_B" in name:
                trained_b += 1
                assert param.abs().max() > 0, f"{name} never moved from its zero start"
        elif ".ref." in name:
            assert not param.requires_grad and ("lora_A" in name or not param.any()), f"reference adapter {name}"
        else:
            assert "lora_" not in name and not param.requires_grad, name
            assert torch.equal(param.detach(), before[_base_name(name)]), f"base weight {name} changed"
    assert trained_b == 2 * len(LORA.target_modules)  # two layers


def _module_name(layer: int, module: str) -> str:
    return f"model.layers.{layer}.{'self_attn' if module in ('q_proj', 'v_proj') else 'mlp'}.{module}"


def _delta(peft_model, layer: int, module: str) -> torch.Tensor:
    """(alpha / r) · B · A of one adapted layer."""
    target = peft_model.get_base_model().get_submodule(_module_name(layer, module))
    a, b = target.lora_A["default"].weight, target.lora_B["default"].weight
    return (LORA.alpha / LORA.r) * (b @ a).detach()


def _check_merged_save(peft_model, tokenizer, before, folder: Path) -> None:
    """The saved folder is a plain model equal to base + (alpha/r)·B·A, with the adapter beside it."""
    ids = tokenizer(["Q: 1+2=?", "Q: 40+2=?"], return_tensors="pt", padding=True)
    peft_model.eval()
    with torch.no_grad():
        adapted_logits = peft_model(**ids).logits
    deltas = {(layer, m): _delta(peft_model, layer, m) for layer in (0, 1) for m in LORA.target_modules}
    trained = [k for k in peft_model.state_dict() if ".default." in k]

    save_model_and_tokenizer(peft_model, tokenizer, folder)

    assert (folder / "config.json").is_file() and not (folder / "adapter_config.json").exists()
    saved = load_file(folder / "adapter" / "adapter_model.safetensors")
    assert len(saved) == len(trained) and all("lora_" in k for k in saved), "the trained adapter only"
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert isinstance(reloaded, LlamaForCausalLM), "a plain transformers model, no peft wrapper"
    state = reloaded.state_dict()
    assert set(state) == set(before), "the base model's tensors, no adapter tensors"
    for (layer, module), delta in deltas.items():
        key = f"{_module_name(layer, module)}.weight"
        torch.testing.assert_close(state[key], before[key] + delta)  # W + (alpha/r) B A
        assert delta.abs().max() > 0
    for key in ("model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.up_proj.weight", "lm_head.weight"):
        assert torch.equal(state[key], before[key]), f"untargeted {key} changed"
    reloaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**ids).logits, adapted_logits, rtol=1e-4, atol=1e-5)
    loaded, _ = load_model_and_tokenizer(folder)
    assert isinstance(loaded, LlamaForCausalLM)


@pytest.mark.parametrize("objective", [CrossEntropy(), PassAtN(budget=4)], ids=["ce", "pass_at_n"])
def test_lora_sft_trains_only_the_adapter_and_saves_the_merged_model(objective, tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = tokenizer(["Q: 1+2=?"], return_tensors="pt")
    with torch.no_grad():
        base_logits = model(**ids).logits
    peft_model = apply_lora(model, LORA, seed=0)
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) == 2 * 4 * (32 + 32 + 32 + 32 + 64 + 32)
    with torch.no_grad():  # B = 0: the wrapped model computes what the base did
        torch.testing.assert_close(peft_model(**ids).logits, base_logits)
    optim = OptimConfig(steps=3, batch_size=8, learning_rate=1e-2, lr_warmup_ratio=0.0, log_every=1)
    metrics = train_sft(
        peft_model,
        tokenizer,
        arith_rows["train"][:24],
        optim,
        tmp_path / "ck",
        objective=objective,
        eval_rows=arith_rows["validation"][:4],
        max_length=128,
        seed=0,
    )
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["eval_loss"])
    _check_only_adapters_trained(peft_model, before)
    _check_merged_save(peft_model, tokenizer, before, tmp_path / "model")


def test_an_interrupted_lora_run_resumes_to_the_same_adapter(tiny_model, arith_rows, tmp_path):
    """Checkpoints hold the adapter (and optimizer state): a resumed run ends where an uninterrupted one does."""
    model, tokenizer = tiny_model
    rows = arith_rows["train"][:24]
    optim = OptimConfig(steps=6, batch_size=4, learning_rate=1e-2, lr_warmup_ratio=0.0, checkpoint_every=2, log_every=1)
    run = dict(objective=PassAtN(budget=4), max_length=128, seed=0)
    reference = apply_lora(copy.deepcopy(model), LORA, seed=0)
    train_sft(reference, tokenizer, rows, optim, tmp_path / "ref", **run)

    with pytest.raises(KeyboardInterrupt):
        train_sft(
            apply_lora(copy.deepcopy(model), LORA, seed=0),
            tokenizer,
            rows,
            optim,
            tmp_path / "run",
            callbacks=[Crash(at_step=3)],
            **run,
        )
    assert (tmp_path / "run" / "checkpoint-2" / "adapter_model.safetensors").is_file(), "an adapter checkpoint"
    resumed = apply_lora(copy.deepcopy(model), LORA, seed=1)  # other initial A: the checkpoint must replace it
    metrics = train_sft(resumed, tokenizer, rows, optim, tmp_path / "run", **run)
    assert metrics["resumed_from_step"] == 2
    want = {k: v for k, v in reference.state_dict().items() if "lora_" in k}
    got = {k: v for k, v in resumed.state_dict().items() if "lora_" in k}
    assert set(got) == set(want)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-6)


def _even_length(text, row):
    return float(len(text) % 2 == 0)


@pytest.mark.parametrize(
    ("rule", "beta"),
    [
        ({"name": "grpo"}, 0.0),
        ({"name": "grpo"}, 0.1),
        ({"name": "cat_pass_at_n", "budget": 4, "p_source": "sequence"}, 0.0),
    ],
    ids=["grpo", "grpo-kl-reference", "cat-sequence-logps"],
)
def test_lora_rl_trains_only_the_adapter_and_saves_the_merged_model(rule, beta, tiny_model, arith_rows, tmp_path):
    """Through train_rl: TRL's sampling, the rule's logps (TRL's per-token pass) and the KL reference (the
    adapter's frozen copy) all run on the PeftModel."""
    model, tokenizer = tiny_model
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    peft_model = apply_lora(model, LORA, seed=0)
    config = RLConfig(
        rule=rule,
        num_generations=4,
        max_completion_length=10,
        beta=beta,
        steps=2,
        batch_size=8,
        learning_rate=1e-2,
        lr_warmup_ratio=0.0,
        log_every=1,
    )
    metrics = train_rl(
        peft_model,
        tokenizer,
        arith_rows["train"][:8],
        config,
        tmp_path / "ck",
        reward_fn=_even_length,
        binary_rewards=True,
        seed=0,
    )
    assert metrics["unscorable_total"] == 0.0 and math.isfinite(metrics["reward"])
    _check_only_adapters_trained(peft_model, before)
    _check_merged_save(peft_model, tokenizer, before, tmp_path / "model")


def test_a_target_module_the_model_lacks_is_named_before_training(tiny_model):
    model, _ = tiny_model
    bad = LORA.model_copy(update={"target_modules": ["q_proj", "qkv_proj", "self_attn"]})
    with pytest.raises(ValueError) as caught:
        apply_lora(model, bad, seed=0)
    message = str(caught.value)
    assert message.startswith("model.lora.target_modules: 'qkv_proj' (matches nothing), 'self_attn' (matches ")
    assert "LlamaAttention modules, not linear layers) in LlamaForCausalLM" in message
    assert (
        "its linear layers are ['down_proj', 'gate_proj', 'k_proj', 'lm_head', 'o_proj', 'q_proj', 'up_proj', 'v_proj']"
        in message
    )
    assert not any("lora_" in name for name, _ in model.named_parameters()), "the model was left as it was"
    check_target_modules(model, "all-linear")
    check_target_modules(model, ["layers.0.self_attn.q_proj", "mlp.up_proj"])  # dotted suffixes match as in peft


# --------------------------------------------------------------------------- the stages


@pytest.fixture()
def lora_study(tmp_path, tiny_model):
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["train"].update(steps=2, batch_size=4, checkpoint_every=1)
    raw["rl"].update(steps=2, batch_size=8, num_generations=4, max_completion_length=12, checkpoint_every=1)
    raw["model"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    paths = StudyPaths(tmp_path)
    save_model_and_tokenizer(*tiny_model, paths.warmup_model)
    return raw, paths


@pytest.mark.parametrize("variant", ["pass_at_n", "grpo", "warmup"])
def test_stages_train_lora_and_save_plain_merged_models(lora_study, arith_rows, variant):
    raw, paths = lora_study
    params = parse_params(raw)
    training.train_variant(params, paths, variant, arith_rows["train"], arith_rows["validation"][:4])
    folder = paths.variant_model(variant)
    model, _ = load_model_and_tokenizer(folder)
    warm, _ = load_model_and_tokenizer(paths.warmup_model)
    assert set(model.state_dict()) == set(warm.state_dict()), "a plain model: no adapter tensors"
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, warm.state_dict()[k])}
    if variant == "warmup":  # objective none: copied, never wrapped
        assert not changed and not (folder / "adapter").exists()
        return
    assert all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), changed
    if variant == "pass_at_n":  # (the random model's arith rewards are all 0: GRPO's advantages vanish)
        assert changed
    assert (folder / "adapter" / "adapter_config.json").is_file()
    assert not any((paths.root / "checkpoints").glob("train-*")), "checkpoints removed after success"


def test_stages_load_a_local_pretrained_model_and_train_on_chat_prompts(
    chat_tokenizer, arith_rows, tmp_path, monkeypatch
):
    """pretrain copies the pretrained model to models/base (left padding kept); warm-up trains on chat prompts."""
    folder = _save("mistral", chat_tokenizer, tmp_path / "pretrained")
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["model"].update(base_model=str(folder), chat_template=True, lora={"r": 2, "target_modules": ["q_proj"]})
    raw["warmup"].update(steps=2, batch_size=4)
    params, paths = parse_params(raw), StudyPaths(tmp_path / "study")
    assert training.pretrain(params, paths, corpus=None, splits=None) == {"pretrain_skipped": 1.0}
    base, tokenizer = load_model_and_tokenizer(paths.base_model)
    assert isinstance(base, MistralForCausalLM) and tokenizer.padding_side == "left"

    seen = []
    train = training.train_sft

    def spy(model, tokenizer, rows, *args, eval_rows=None, **kwargs):
        seen.append((rows, eval_rows))
        return train(model, tokenizer, rows, *args, eval_rows=eval_rows, **kwargs)

    monkeypatch.setattr(training, "train_sft", spy)
    training.warmup(params, paths, arith_rows["train"][:8], arith_rows["validation"][:4])
    ((rows, eval_rows),) = seen
    for got, original in ((rows, arith_rows["train"]), (eval_rows, arith_rows["validation"])):
        assert [r["prompt"] for r in got] == [f"[user] {r['prompt']}\n[assistant] " for r in original[: len(got)]]
        assert [r["completion"] for r in got] == [r["completion"] for r in original[: len(got)]]
    warm, _ = load_model_and_tokenizer(paths.warmup_model)
    assert isinstance(warm, MistralForCausalLM) and (paths.warmup_model / "adapter").is_dir()


def test_stages_refuse_a_missing_target_module_before_training(lora_study, arith_rows):
    raw, paths = lora_study
    raw["model"]["lora"]["target_modules"] = ["q_proj", "query_key_value"]
    with pytest.raises(ValueError, match=r"'query_key_value' \(matches nothing\) in LlamaForCausalLM"):
        training.train_variant(parse_params(raw), paths, "pass_at_n", arith_rows["train"], arith_rows["validation"])
    assert not (paths.root / "checkpoints").exists() and not paths.variant_model("pass_at_n").exists()


# --------------------------------------------------------------------------- QLoRA


def test_nf4_is_refused_without_cuda_before_any_work(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    save_model_and_tokenizer(*tiny_model, tmp_path / "m")
    with pytest.raises(RuntimeError, match=r"'nf4' \(QLoRA\) needs a CUDA GPU: .* Use quantization: none"):
        load_model_and_tokenizer(tmp_path / "m", quantization="nf4")
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["model"]["lora"] = {"quantization": "nf4"}
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):  # pretrain's first act, before the corpus is read
        training.pretrain(parse_params(raw), StudyPaths(tmp_path), corpus=None, splits=None)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_4bit_config_stores_the_packed_weights_in_the_compute_dtype(dtype):
    """QLoRA's BitsAndBytesConfig (transformers builds it without bitsandbytes): NF4 with double quantization,
    computing in ``dtype`` and storing the packed 4-bit weights in it too, as FSDP and ZeRO-3 need to shard them."""
    from transformers import BitsAndBytesConfig

    from aligntrain.models.adapters import quantization_config

    config = quantization_config(dtype)
    assert isinstance(config, BitsAndBytesConfig) and config.load_in_4bit and not config.load_in_8bit
    assert (config.bnb_4bit_quant_type, config.bnb_4bit_use_double_quant) == ("nf4", True)
    assert config.bnb_4bit_compute_dtype == getattr(torch, dtype)
    assert config.bnb_4bit_quant_storage == config.bnb_4bit_compute_dtype, "not bitsandbytes' default uint8"
    saved = config.to_dict()  # as a quantized model's config.json records it
    assert saved["bnb_4bit_quant_storage"] == saved["bnb_4bit_compute_dtype"] == dtype


def _bitsandbytes_cuda() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _bitsandbytes_cuda(), reason="QLoRA needs CUDA and bitsandbytes")
def test_qlora_trains_on_a_4bit_base_and_saves_an_unquantized_merged_model(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    save_model_and_tokenizer(model.to(torch.bfloat16), tokenizer, tmp_path / "base")
    quantized, tokenizer = load_model_and_tokenizer(tmp_path / "base", dtype="bfloat16", quantization="nf4")
    assert quantized.is_loaded_in_4bit
    qlora = LORA.model_copy(update={"quantization": "nf4"})
    peft_model = apply_lora(quantized, qlora, seed=0)
    optim = OptimConfig(steps=3, batch_size=8, learning_rate=1e-2, lr_warmup_ratio=0.0, log_every=1)
    train_sft(peft_model, tokenizer, arith_rows["train"][:24], optim, tmp_path / "ck", max_length=128, seed=0)
    ids = tokenizer(["Q: 1+2=?"], return_tensors="pt").to(peft_model.device)
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(**ids).logits.float().cpu()
    save_model_and_tokenizer(peft_model, tokenizer, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert getattr(merged.config, "quantization_config", None) is None and merged.dtype == torch.bfloat16
    assert (tmp_path / "merged" / "adapter" / "adapter_model.safetensors").is_file()
    base, _ = load_model_and_tokenizer(tmp_path / "base", dtype="bfloat16")
    state, base_state = merged.state_dict(), base.state_dict()
    assert not torch.equal(
        state["model.layers.0.self_attn.q_proj.weight"], base_state["model.layers.0.self_attn.q_proj.weight"]
    )
    assert torch.equal(
        state["model.layers.0.self_attn.k_proj.weight"], base_state["model.layers.0.self_attn.k_proj.weight"]
    )
    with torch.no_grad():  # the 4-bit model's outputs, up to its quantization error
        merged_logits = merged(**ids.to("cpu")).logits.float()
    assert (merged_logits.softmax(-1) - adapted.softmax(-1)).abs().max() < 0.1
