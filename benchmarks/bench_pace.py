"""The machine's pace: training steps per second of the default study's model, 1 and 2 threads.

A VM's speed drifts from hour to hour (docs/timings.md), so a wall time such as `make study`'s
means little without the pace it ran at. This probe is the default study's own workload: one
AdamW step of the params.yaml Llama (width 96, 3 layers, 4 heads, MLP 256; a 48-symbol
vocabulary as the character tokenizer's) on a batch of 64 sequences of 100 tokens, timed over
20 steps after 5 of warm-up, in a fresh process per thread count. It prints steps/s with 1 and
2 threads and their ratio (what 2 threads buy the stages that run alone: pretrain, warmup).
Run it just before and after a timed run: `.venv/bin/python benchmarks/bench_pace.py`.
"""

from __future__ import annotations

import subprocess
import sys
import time

STEPS, WARMUP = 20, 5


def steps_per_second(threads: int) -> float:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=48,
        hidden_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, 48, (64, 100))
    for step in range(STEPS + WARMUP):
        if step == WARMUP:
            start = time.perf_counter()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return STEPS / (time.perf_counter() - start)


def main() -> None:
    if len(sys.argv) == 2:  # the child: one thread count in a fresh process
        print(steps_per_second(int(sys.argv[1])))
        return
    rates = {}
    for threads in (1, 2):
        out = subprocess.run([sys.executable, __file__, str(threads)], capture_output=True, text=True, check=True)
        rates[threads] = float(out.stdout.strip().splitlines()[-1])
    print("| threads | steps/s |\n|---|---|")
    for threads, rate in rates.items():
        print(f"| {threads} | {rate:.2f} |")
    print(f"2 threads / 1 thread: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
