"""Shared fixtures: a tiny tokenizer/model pair and small arith rows."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arith_rows():
    from aligntrain.problems import get_problem

    sizes = {"train": 48, "validation": 8, "test": 6}
    return get_problem("arith").generate_splits(sizes, levels=[1, 2], seed=0)


@pytest.fixture()
def tiny_model(arith_rows):
    """A fresh 2-layer Llama over the arith alphabet (random weights, seed 0)."""
    from aligntrain.models import build_char_tokenizer, build_tiny_llama

    texts = [r[f] for rows in arith_rows.values() for r in rows for f in ("prompt", "completion")]
    tokenizer = build_char_tokenizer(texts)
    model = build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=128, seed=0
    )
    return model, tokenizer
