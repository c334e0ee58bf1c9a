"""Local stand-ins for hub models and data sets, so a hub-scale study runs end to end on a CPU.

A study in ``pipelines/<study>/`` names hub models and data sets at pinned revisions.
Its ``standin.yaml`` overrides those names with folders this module writes, and
shrinks the sizes: the study then runs every line of the hub path (pretrained
model loading, chat templates, LoRA, hub-schema parsing, grading) except the
download and the GPU kernels, in minutes (``scripts/run_standin.py``).

What is written (:func:`write_standins`), under one folder:

* ``models/<family>``: a freshly initialised causal LM of each architecture family
  the seeds' studies use (:data:`FAMILIES`: Mistral for Mistral-7B-Instruct, Llama for
  Llama-3 and Llama-3.2, GPT-2 for ProtGPT2), saved with ``save_pretrained`` with a
  character tokenizer that has a chat template (``[user] ...\\n[assistant] ``).
  Tiny: 2 layers of width 32 to 64.
* ``data/math/train.parquet``: records in the exact schema of ``EleutherAI/hendrycks_math``
  (``problem``, ``level`` "Level k", ``type`` the subject, ``solution`` with the answer in
  ``\\boxed{}``) and ``data/math500/test.jsonl`` in the schema of ``HuggingFaceH4/MATH-500``
  (``problem``, ``solution``, ``answer``, ``subject``, ``level`` int, ``unique_id``). The
  questions are arithmetic chains (the ``arith`` problem's generator), so the stand-in
  study has something learnable; only the schema is MATH's.
* ``models/reward``: a freshly initialised Llama sequence classifier (one score), standing in
  for Skywork-Reward-V2-Llama-3.1-8B, with the same tokenizer and chat template.
* ``data/ultrafeedback/{train,test}_prefs.parquet`` in the schema of
  ``HuggingFaceH4/ultrafeedback_binarized`` (``prompt``, ``prompt_id``, ``chosen`` and
  ``rejected`` as ``[{role, content}]`` conversations, ``score_chosen``, ``score_rejected``)
  and ``data/hh-rlhf/helpful-base/{train,test}.jsonl.gz`` in the schema of ``Anthropic/hh-rlhf``
  (``chosen``, ``rejected`` as "\n\nHuman: ...\n\nAssistant: ..." text), from the same questions.

The tokenizer's alphabet is every character of the stand-in data and the chat
markers, so no stand-in text meets ``<unk>``.
"""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aligntrain.io import write_text
from aligntrain.models.tiny import build_char_tokenizer
from aligntrain.problems import hydro
from aligntrain.problems.hub import format_prompt
from aligntrain.verify import ANSWER_MARKER

#: the chat template of every stand-in tokenizer: one user turn, then the assistant's reply
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}[user] {{ message['content'] }}\n{% else %}{{ message['content'] }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
)

#: family -> (transformers config class, causal LM class, config keywords); the hub models they stand in for
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Mistral-7B-Instruct-v0.2 (CAT's MATH SFT): grouped-query attention, no sliding window in v0.2
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=None, intermediate_size=128),
    ),
    # Llama-3 8B (DCO, Tang et al.) and Llama-3.2-1B-Instruct (TEA): grouped-query attention
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=True),
    ),
    # ProtGPT2 (CAT's protein best-of-N): a GPT-2 architecture
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_head=4)),
}

SUBJECTS = (
    ("Algebra", "algebra"),
    ("Counting & Probability", "counting_and_probability"),
    ("Geometry", "geometry"),
    ("Intermediate Algebra", "intermediate_algebra"),
    ("Number Theory", "number_theory"),
    ("Prealgebra", "prealgebra"),
    ("Precalculus", "precalculus"),
)


def math_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``EleutherAI/hendrycks_math`` (``problem``, ``level``, ``type``, ``solution``)."""
    records = []
    for index, row in enumerate(rows):
        question = row["prompt"].removeprefix("Q: ").split("=?", 1)[0]
        steps = row["completion"].split(" #### ", 1)[0]
        records.append(
            {
                "problem": f"What is ${question}$?",
                "level": f"Level {row['level']}",
                "type": SUBJECTS[index % len(SUBJECTS)][0],
                "solution": f"We compute ${question}={steps}$, so the answer is $\\boxed{{{row['answer']}}}$.",
            }
        )
    return records


def math500_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``HuggingFaceH4/MATH-500`` (``answer`` column, integer ``level``)."""
    records = []
    for index, (record, row) in enumerate(zip(math_records(rows), rows, strict=True)):
        subject, slug = SUBJECTS[index % len(SUBJECTS)]
        records.append(
            {
                "problem": record["problem"],
                "solution": record["solution"],
                "answer": row["answer"],
                "subject": subject,
                "level": int(row["level"]),
                "unique_id": f"test/{slug}/{index}.json",
            }
        )
    return records


def ultrafeedback_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as ``HuggingFaceH4/ultrafeedback_binarized`` records: the gold reply chosen, a wrong one not."""
    records = []
    for index, row in enumerate(rows):
        prompt, reply = row["prompt"], row["completion"].strip()
        wrong = reply.rsplit(" ", 1)[0] + " 0"
        records.append(
            {
                "prompt": prompt,
                "prompt_id": f"{index:064x}",
                "chosen": [{"content": prompt, "role": "user"}, {"content": reply, "role": "assistant"}],
                "rejected": [{"content": prompt, "role": "user"}, {"content": wrong, "role": "assistant"}],
                "messages": [{"content": prompt, "role": "user"}, {"content": reply, "role": "assistant"}],
                "score_chosen": 8.0,
                "score_rejected": 2.0,
            }
        )
    return records


def hh_rlhf_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``Anthropic/hh-rlhf`` (two dialogues as text per record)."""
    return [
        {
            "chosen": f"\n\nHuman: {r['prompt']}\n\nAssistant: {r['completion'].strip()}",
            "rejected": f"\n\nHuman: {r['prompt']}\n\nAssistant: 0",
        }
        for r in rows
    ]


def tiny_reward_model(tokenizer, *, hidden_size: int = 32, num_layers: int = 2, max_length: int = 512):
    """A freshly initialised Llama sequence classifier with one score over ``tokenizer``'s vocabulary."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        max_position_embeddings=max_length,
        num_labels=1,
        **FAMILIES["llama"][2],
    )
    torch.manual_seed(1)
    return transformers.LlamaForSequenceClassification(config)


def tiny_causal_lm(family: str, tokenizer, *, hidden_size: int = 32, num_layers: int = 2, max_length: int = 512):
    """A freshly initialised causal LM of ``family`` (:data:`FAMILIES`) over ``tokenizer``'s vocabulary."""
    import torch
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; stand-ins exist for {sorted(FAMILIES)}")
    config_name, model_name, extra = FAMILIES[family]
    special = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if family == "gpt2":
        sizes = dict(n_embd=hidden_size, n_layer=num_layers, n_positions=max_length)
    else:
        sizes = dict(hidden_size=hidden_size, num_hidden_layers=num_layers, max_position_embeddings=max_length)
    config = getattr(transformers, config_name)(**special, **sizes, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config)


def write_standins(folder: str | Path, *, train_size: int = 256, test_size: int = 32) -> dict[str, Path]:
    """Write every stand-in under ``folder`` (module docstring); returns their paths by name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aligntrain.problems import get_problem

    folder = Path(folder)
    splits = get_problem("arith").generate_splits(
        {"train": train_size, "test": test_size}, levels=[1, 2, 3, 4, 5], seed=0
    )
    train, test = math_records(splits["train"]), math500_records(splits["test"])
    paths = {
        "math_train": folder / "data" / "math" / "train.parquet",
        "math500_test": folder / "data" / "math500" / "test.jsonl",
    }
    paths["math_train"].parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(train), paths["math_train"])
    write_text(paths["math500_test"], "".join(json.dumps(record) + "\n" for record in test))
    for split, split_rows in (("train", splits["train"]), ("test", splits["test"])):
        paths[f"ultrafeedback_{split}"] = folder / "data" / "ultrafeedback" / f"{split}_prefs.parquet"
        paths[f"ultrafeedback_{split}"].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(ultrafeedback_records(split_rows)), paths[f"ultrafeedback_{split}"])
        paths[f"hh_rlhf_{split}"] = folder / "data" / "hh-rlhf" / "helpful-base" / f"{split}.jsonl.gz"
        paths[f"hh_rlhf_{split}"].parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps(record) + "\n" for record in hh_rlhf_records(split_rows))
        paths[f"hh_rlhf_{split}"].write_bytes(gzip.compress(lines.encode(), mtime=0))

    texts = [value for record in [*train, *test] for value in record.values() if isinstance(value, str)]
    # The 20 residues and the hydro task markers, so that the GPT-2 stand-in (ProtGPT2) reads hydro rows too.
    texts += [format_prompt("?"), ANSWER_MARKER, "[user] [assistant] \n0123456789", hydro.ALPHABET, "U:C:"]
    tokenizer = build_char_tokenizer(texts)
    tokenizer.chat_template = CHAT_TEMPLATE
    for family in FAMILIES:
        paths[family] = folder / "models" / family
        tiny_causal_lm(family, tokenizer).save_pretrained(paths[family])
        tokenizer.save_pretrained(paths[family])
    paths["reward"] = folder / "models" / "reward"
    tiny_reward_model(tokenizer).save_pretrained(paths["reward"])
    tokenizer.save_pretrained(paths["reward"])
    return paths


def overlay(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it: mappings merge key by key, anything else is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = overlay(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
