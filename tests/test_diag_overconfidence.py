"""Overconfidence diagnostics: hand-computed summaries, and the greedy probability is the teacher-forced one."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from aligntrain.diagnostics.overconfidence import (
    greedy_confidence,
    plot_confidence,
    plot_reward_shift,
    reward_distribution,
    summarize_confidence,
)
from aligntrain.problems import get_problem


def _frame(probs, correct, tokens=None):
    tokens = tokens if tokens is not None else [1] * len(probs)
    return pd.DataFrame(
        {
            "greedy_prob": probs,
            "greedy_logp": np.log(np.asarray(probs, dtype=float)),
            "correct": correct,
            "num_tokens": tokens,
        }
    )


def test_summary_by_hand():
    frame = _frame([0.9, 0.2, 0.6, 0.7, 0.1], [True, True, False, False, False])
    s = summarize_confidence(frame, confident=0.5)
    assert s["greedy_accuracy"] == pytest.approx(2 / 5)
    assert s["median_prob_correct"] == pytest.approx(0.55)
    assert s["median_prob_wrong"] == pytest.approx(0.6)
    assert s["mean_prob"] == pytest.approx(2.5 / 5)
    assert s["confidently_wrong"] == pytest.approx(2 / 5)  # 0.6 and 0.7
    per_token = summarize_confidence(_frame([0.25, 0.5, 0.001], [True, False, True], tokens=[2, 1, 3]))
    assert per_token["median_token_prob"] == pytest.approx(0.5)  # 0.25^(1/2), 0.5, 0.001^(1/3) = 0.5, 0.5, 0.1
    only_right = summarize_confidence(_frame([0.3], [True]))
    assert math.isnan(only_right["median_prob_wrong"]) and only_right["confidently_wrong"] == 0.0


def test_summary_rejects_bad_input():
    with pytest.raises(ValueError, match="confident"):
        summarize_confidence(_frame([0.5], [True]), confident=1.0)
    with pytest.raises(ValueError, match="no prompts"):
        summarize_confidence(_frame([], []))


def test_reward_distribution_binary_is_per_prompt_success_rate():
    pool = pd.DataFrame({"prompt_id": ["b", "b", "a", "a", "a", "b"], "reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]})
    np.testing.assert_allclose(reward_distribution(pool, binary=True), [1 / 3, 2 / 3])
    np.testing.assert_allclose(reward_distribution(pool, binary=False), pool.reward)


def test_greedy_confidence_scores_the_greedy_completion(tiny_model, arith_rows, tmp_path):
    model, tokenizer = tiny_model
    rows = arith_rows["test"][:3]
    problem = get_problem("arith")
    frame = greedy_confidence(model, tokenizer, rows, problem, max_new_tokens=6, batch_size=2)
    assert list(frame.prompt_id) == [r["id"] for r in rows]
    for row, (_, got) in zip(rows, frame.iterrows()):
        ids = tokenizer(row["prompt"])["input_ids"]
        greedy, logp = [], 0.0
        with torch.no_grad():
            for _ in range(6):
                logits = model(input_ids=torch.tensor([ids + greedy])).logits[0, -1].double()
                token = int(logits.argmax())
                logp += float(torch.log_softmax(logits, -1)[token])
                greedy.append(token)
                if token == tokenizer.eos_token_id:
                    break
        text = tokenizer.decode(greedy, skip_special_tokens=True)
        assert got.greedy_prob == pytest.approx(math.exp(logp), rel=1e-3)
        assert got.correct == problem.grade(text, row).correct
    plot_confidence({"a": frame, "b": frame}, tmp_path / "c.png")
    plot_reward_shift({"a": np.array([0.1, 0.5]), "b": np.array([0.2])}, tmp_path / "r.png", binary=True)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
