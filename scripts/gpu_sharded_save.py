#!/usr/bin/env python
"""Two SFT steps of a saved model under ``accelerate launch`` and aligntrain's final save: ``make gpu-check``.

Usage (scripts/gpu_check.py runs it): ``accelerate launch --config_file accelerate/fsdp2.yaml
scripts/gpu_sharded_save.py MODEL OUT CHECKPOINTS [BATCH_PER_PROCESS]``. It trains MODEL two steps with CE through
``train_sft`` and saves to OUT as a training stage does (``finish_run``: the weights of a sharded
model, FSDP2 or ZeRO-3, gathered by every process first; process 0 writes). gpu_check.py then
loads OUT with ``from_pretrained`` and checks it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from aligntrain.config import OptimConfig
    from aligntrain.models import load_model_and_tokenizer, save_model_and_tokenizer
    from aligntrain.objectives import CrossEntropy
    from aligntrain.problems import get_problem
    from aligntrain.training.sft import train_sft

    model_path, out, checkpoints = (Path(arg) for arg in sys.argv[1:4])
    batch_size = int(sys.argv[4]) if len(sys.argv) > 4 else 4  # per process: 2 processes x 2 is one process's 4
    model, tokenizer = load_model_and_tokenizer(model_path, dtype="float32")
    rows = get_problem("arith").generate_splits({"train": 32}, levels=[1, 2], seed=0)["train"]
    optim = OptimConfig(steps=2, batch_size=batch_size, learning_rate=1e-3, lr_warmup_ratio=0.0, checkpoint_every=10)
    train_sft(
        model,
        tokenizer,
        rows,
        optim,
        checkpoints,
        objective=CrossEntropy(),
        max_length=256,
        seed=0,
        save_final=lambda state_dict=None: save_model_and_tokenizer(model, tokenizer, out, state_dict=state_dict),
    )


if __name__ == "__main__":
    main()
