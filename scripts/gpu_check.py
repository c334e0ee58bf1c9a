#!/usr/bin/env python
"""The checks to run when a GPU is lent: ``make gpu-check`` (GPU environment, make venv-gpu).

On a small local Llama (random weights, the stand-ins' character tokenizer, written here:
nothing is downloaded) it measures, and writes to ``build/gpu_check.json``:

1. pool generation, vLLM against transformers' generate (the two ``rollouts.backend``
   entries, aligntrain.rollouts.backends): tokens per second and their ratio;
2. bf16 sequence log-probabilities, vLLM's sums against the transformers forward pass that
   re-scores vLLM's samples: mean and largest |Δ log p|;
3. one GRPO step with vLLM colocated (``rl.vllm: colocate``) through StrategyGRPOTrainer, and
   that the rule's advantages reached the loss (the run logs the rule's statistics);
4. one QLoRA SFT step (4-bit NF4 base through bitsandbytes, LoRA adapters).

Each check runs on its own and reports its error rather than stopping the others.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def small_model(folder: Path, *, hidden_size: int, num_layers: int) -> Path:
    """A Llama of the given size over the stand-ins' tokenizer, saved in bfloat16 (random weights)."""
    import torch

    from aligntrain.standins import tiny_causal_lm, write_standins

    standins = write_standins(folder / "standins", train_size=64, test_size=64)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(standins["llama"])
    model = tiny_causal_lm("llama", tokenizer, hidden_size=hidden_size, num_layers=num_layers, max_length=1024)
    path = folder / "model"
    model.to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def arith_rows(count: int) -> list[dict]:
    from aligntrain.problems import get_problem

    return get_problem("arith").generate_splits({"train": count}, levels=[1, 2, 3], seed=0)["train"]


def check_generation(model: Path, prompts: list[str], samples: int, max_new_tokens: int) -> dict:
    from aligntrain.rollouts.backends import HfBackend, VllmBackend
    from aligntrain.rollouts.generate import SamplingConfig

    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    ids = [f"p{i}" for i in range(len(prompts))]
    result = {}
    for name, backend in (("hf", HfBackend()), ("vllm", VllmBackend(gpu_memory_utilization=0.5))):
        start = time.perf_counter()
        sampled = backend.sample(model, prompts, ids, samples, sampling, dtype="bfloat16", batch_size=256, seed=0)
        seconds = time.perf_counter() - start
        tokens = sum(c.num_tokens for c in sampled.completions)
        result[name] = {"seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds}
        if name == "vllm":
            gaps = [abs(c.logp - s) for c, s in zip(sampled.completions, sampled.sampler_logps, strict=True)]
            result["bf16_logp_gap"] = {"mean": sum(gaps) / len(gaps), "max": max(gaps), "samples": len(gaps)}
    result["vllm_over_hf_throughput"] = result["vllm"]["tokens_per_second"] / result["hf"]["tokens_per_second"]
    return result


def check_grpo_step_with_vllm(model: Path, folder: Path) -> dict:
    import torch

    from aligntrain.config import RLConfig
    from aligntrain.models import load_model_and_tokenizer
    from aligntrain.problems import get_problem
    from aligntrain.training.rl import train_rl

    policy, tokenizer = load_model_and_tokenizer(model, dtype="bfloat16")
    config = RLConfig(
        rule="loo_pass_at_k",
        steps=1,
        batch_size=32,
        num_generations=8,
        max_completion_length=32,
        learning_rate=1e-5,
        lr_warmup_ratio=0.0,
        checkpoint_every=10,
        log_every=1,
        vllm="colocate",
        vllm_gpu_memory_utilization=0.3,
    )
    problem = get_problem("arith")
    start = time.perf_counter()
    metrics = train_rl(
        policy.to("cuda"),
        tokenizer,
        arith_rows(64),
        config,
        folder / "grpo",
        reward_fn=problem.reward,
        answer_class=problem.answer_class,
        binary_rewards=True,
        seed=0,
    )
    metrics["seconds"] = time.perf_counter() - start
    metrics["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return metrics


def check_qlora_sft_step(model: Path, folder: Path) -> dict:
    import torch

    from aligntrain.config import LoraSettings, OptimConfig
    from aligntrain.models import apply_lora, load_model_and_tokenizer
    from aligntrain.objectives import CrossEntropy
    from aligntrain.training.sft import train_sft

    base, tokenizer = load_model_and_tokenizer(model, dtype="bfloat16", quantization="nf4")
    lora = LoraSettings(r=16, alpha=32, target_modules=["q_proj", "v_proj"], quantization="nf4")
    policy = apply_lora(base, lora, seed=0)
    optim = OptimConfig(steps=1, batch_size=8, learning_rate=2e-4, lr_warmup_ratio=0.0, checkpoint_every=10)
    start = time.perf_counter()
    metrics = train_sft(
        policy, tokenizer, arith_rows(32), optim, folder / "qlora", objective=CrossEntropy(), max_length=256, seed=0
    )
    metrics["seconds"] = time.perf_counter() - start
    metrics["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return metrics


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "gpu_check.json"))
    parser.add_argument("--hidden-size", type=int, default=1024)
    parser.add_argument("--num-layers", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run it where a GPU is lent, in the GPU environment (make venv-gpu)")
        return 2
    report: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = small_model(folder, hidden_size=args.hidden_size, num_layers=args.num_layers)
        report["model"] = {"hidden_size": args.hidden_size, "num_layers": args.num_layers}
        prompts = [r["prompt"] for r in arith_rows(args.prompts)]
        checks = {
            "generation": lambda: check_generation(model, prompts, args.samples, args.max_new_tokens),
            "grpo_step_vllm_colocate": lambda: check_grpo_step_with_vllm(model, folder),
            "qlora_sft_step": lambda: check_qlora_sft_step(model, folder),
        }
        for name, check in checks.items():
            try:
                report[name] = check()
            except Exception as err:  # report it, run the other checks
                report[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
            finally:
                torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 1 if any(isinstance(v, dict) and "error" in v for v in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
