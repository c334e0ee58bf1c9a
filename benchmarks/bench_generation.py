"""Rollout throughput: batched generation (left padding, KV cache) vs one prompt at a time.

    .venv/bin/python benchmarks/bench_generation.py [--model models/variants/ce]

Both sides sample the same number of completions from the same model with
:func:`aligntrain.rollouts.generate.sample_completions`; the baseline calls it
once per (prompt, sample) with batch size 1. Without ``--model`` a tiny Llama of
the default size is initialised at random (throughput does not depend on the
weights, only on the lengths generated, which are capped and reported).
"""

from __future__ import annotations

import argparse
import time

import torch

from aligntrain.models import build_char_tokenizer, build_tiny_llama, load_model_and_tokenizer
from aligntrain.problems import get_problem
from aligntrain.rollouts.generate import SamplingConfig, sample_completions


def _tokens(completions) -> int:
    return sum(c.num_tokens for c in completions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="saved model directory (default: random tiny Llama)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=16, help="completions per prompt")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--baseline-completions", type=int, default=32, help="timed one at a time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the study's default is 1)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    problem = get_problem("arith")
    sizes = {"train": 1, "validation": 1, "test": args.prompts}
    rows = problem.generate_splits(sizes, levels=[1, 2, 3, 4, 5], seed=0)["test"]
    prompts = [r["prompt"] for r in rows]
    if args.model:
        model, tokenizer = load_model_and_tokenizer(args.model)
    else:
        tokenizer = build_char_tokenizer(problem.pretrain_corpus(200, seed=0))
        model = build_tiny_llama(
            tokenizer, hidden_size=128, num_layers=4, num_heads=4, intermediate_size=384, max_length=192, seed=0
        )
    # Generation runs to the cap for a random model: force fixed-length work on both sides.
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)

    start = time.perf_counter()
    batched = sample_completions(
        model, tokenizer, prompts, args.samples, sampling, batch_size=args.batch_size, seed=0, progress=False
    )
    batched_s = time.perf_counter() - start
    batched_tps = _tokens(batched) / batched_s

    single_prompts = [prompts[i % len(prompts)] for i in range(args.baseline_completions)]
    start = time.perf_counter()
    single = sample_completions(model, tokenizer, single_prompts, 1, sampling, batch_size=1, seed=0, progress=False)
    single_s = time.perf_counter() - start
    single_tps = _tokens(single) / single_s

    print(f"model: {args.model or 'random tiny Llama (128 wide, 4 layers)'}; torch threads: {torch.get_num_threads()}")
    print(f"{'mode':<28}{'completions':>12}{'tokens':>10}{'seconds':>10}{'tokens/s':>12}")
    batched_label = f"batched (bs={args.batch_size})"
    print(f"{batched_label:<28}{len(batched):>12}{_tokens(batched):>10}{batched_s:>10.2f}{batched_tps:>12.0f}")
    print(f"{'one prompt at a time':<28}{len(single):>12}{_tokens(single):>10}{single_s:>10.2f}{single_tps:>12.0f}")
    print(f"throughput ratio batched / one-at-a-time: {batched_tps / single_tps:.1f}x")


if __name__ == "__main__":
    main()
