"""Benchmark: the two costly diagnostics against their baselines, in the same run.

Run: .venv/bin/python benchmarks/bench_diagnostics.py   (prints a table, writes nothing)

(a) Oracle-gradient score vectors (``last_block_scores``: the layers below the last
    block once without gradients, then ``vmap(grad)`` over the block and the head)
    against the baseline a reader would write first: one autograd backward per
    completion over the whole model, keeping the last block's gradient. A Llama of
    the default study's shape (width 96, 3 layers; random weights: the cost does not
    depend on them), M completions of 20–40 tokens behind a 20-token prompt.
(b) Diagonal efficiency of majority vote on a pool of 200 prompts × 64 answers
    (``pool_efficiencies``, budgets 4, 8, 16, 32): the exact dynamic programme
    against CAT's Monte Carlo (5000 draws per sensitivity, seed 42), with the
    largest difference between the two.
Times are medians of CPU time (time.thread_time) over repeats, one torch thread.
"""

from __future__ import annotations

import platform
import time

import numpy as np
import pandas as pd
import torch

from aligntrain.diagnostics.oracle_gradient import last_block_scores
from aligntrain.diagnostics.pool_efficiency import pool_efficiencies
from aligntrain.models import build_char_tokenizer, build_tiny_llama

torch.set_num_threads(1)
REPEATS = 3


def cpu_time(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return float(np.median(times))


def loop_scores(model, prompt_ids: list[int], completions: list[list[int]]) -> torch.Tensor:
    """Baseline: one full forward/backward per completion."""
    params = list(model.model.layers[-1].parameters())
    rows = []
    for ids in completions:
        sequence = torch.tensor([prompt_ids + ids])
        logits = model(input_ids=sequence).logits[0, len(prompt_ids) - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids)[:, None]).sum()
        grads = torch.autograd.grad(logp, params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def bench_scores() -> list[tuple]:
    alphabet = "0123456789+-*/=() #\n"
    tokenizer = build_char_tokenizer([alphabet])
    model = build_tiny_llama(
        tokenizer, hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_length=128, seed=0
    )
    model.eval()
    rng = np.random.default_rng(0)
    vocab = [i for i in range(len(tokenizer)) if i not in tokenizer.all_special_ids]
    prompt = tokenizer.decode(rng.choice(vocab, 20).tolist())
    prompt_ids = tokenizer(prompt)["input_ids"]
    rows = []
    for m in (64, 256):
        completions = [rng.choice(vocab, int(rng.integers(20, 41))).tolist() for _ in range(m)]
        fast = cpu_time(lambda c=completions: last_block_scores(model, tokenizer, prompt, c))
        slow = cpu_time(lambda c=completions: loop_scores(model, prompt_ids, c), repeats=1)
        a = last_block_scores(model, tokenizer, prompt, completions)
        b = loop_scores(model, prompt_ids, completions)
        error = float((a - b).abs().max() / b.abs().max())
        rows.append((m, fast, slow, slow / fast, error))
    return rows


def synthetic_pool(prompts: int = 200, samples: int = 64, seed: int = 0) -> pd.DataFrame:
    """Answer classes per prompt: gold class 0 with a prompt-specific share, rivals Zipf-like, some unparseable."""
    rng = np.random.default_rng(seed)
    records = []
    for p in range(prompts):
        correct_share = rng.beta(1.2, 1.5)
        rivals = rng.integers(1, 12)
        weights = np.concatenate(([correct_share], (1 - correct_share) * rng.dirichlet(np.ones(rivals))))
        weights = 0.93 * weights
        weights = np.concatenate((weights, [0.07]))  # unparseable
        draws = rng.choice(len(weights), samples, p=weights / weights.sum())
        for d in draws:
            cls = None if d == len(weights) - 1 else str(d)
            correct = cls == "0"
            records.append({"prompt_id": f"p{p}", "answer_class": cls, "correct": correct, "reward": float(correct)})
    return pd.DataFrame.from_records(records)


def bench_efficiency() -> tuple[float, float, float]:
    pool = synthetic_pool()
    gold = {f"p{p}": "0" for p in range(200)}
    budgets = [4, 8, 16, 32]
    exact = cpu_time(lambda: pool_efficiencies(pool, budgets, "majority", gold, method="exact"), repeats=1)
    mc = cpu_time(lambda: pool_efficiencies(pool, budgets, "majority", gold, method="monte_carlo"), repeats=1)
    a = pool_efficiencies(pool, budgets, "majority", gold, method="exact").efficiency.to_numpy()
    b = pool_efficiencies(pool, budgets, "majority", gold, method="monte_carlo").efficiency.to_numpy()
    both = np.isfinite(a) & np.isfinite(b)
    return exact, mc, float(np.max(np.abs(a[both] - b[both])))


def main() -> None:
    print(f"python {platform.python_version()}, torch {torch.__version__}, 1 thread, CPU seconds (median)")
    print("\n(a) last-block score vectors: vmap(grad) vs one backward per completion")
    print(f"{'M':>5} {'vmap s':>8} {'loop s':>8} {'loop/vmap':>10} {'max rel diff':>13}")
    for m, fast, slow, ratio, error in bench_scores():
        print(f"{m:>5} {fast:>8.2f} {slow:>8.2f} {ratio:>9.1f}x {error:>13.1e}")
    exact, mc, diff = bench_efficiency()
    print("\n(b) majority diagonal efficiency, 200 prompts x 64 answers, N in {4, 8, 16, 32}")
    print(
        f"exact DP {exact:.2f} s, Monte Carlo (5000 draws) {mc:.2f} s: {mc / exact:.1f}x; "
        f"max |MC - exact| efficiency {diff:.3f}"
    )


if __name__ == "__main__":
    main()
