"""Stage ``rollouts@variant``: M sampled completions per prompt of each evaluated split, graded into a pool.

Its own module, so that the code of ``evaluate`` and ``compare`` is not a dependency of
``rollouts`` in dvc.yaml: editing how pools are scored or compared re-samples nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from aligntrain.config import Params
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.pool import build_pool, write_pool
from aligntrain.stages.prepare import problem_of


def generate_pool(
    params: Params, paths: StudyPaths, variant: str, test_rows: Sequence[dict], split: str = "test"
) -> dict:
    """Sample, grade and write the variant's pool of one split (``pools/<variant>.parquet`` for test,
    ``pools/<split>/<variant>.parquet`` for another); returns throughput metrics.

    Prompts are rendered as the policy was trained on them (``model.chat_template``), the
    model is loaded in ``model.dtype``, and ``rollouts.backend`` samples (docs/models.md).
    """
    # Imported here: the stage command imports every stage module, and only this one needs models.
    from transformers import AutoConfig, AutoTokenizer

    from aligntrain.models import policy_rows
    from aligntrain.rollouts.backends import report_logp_gap
    from aligntrain.rollouts.generate import SamplingConfig
    from aligntrain.rollouts.search import StepSearch

    cfg = params.rollouts
    model_dir = paths.variant_model(variant)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = policy_rows(params.model, tokenizer, test_rows)
    context = AutoConfig.from_pretrained(model_dir).max_position_embeddings
    check_prompt_lengths(rows, tokenizer, context=context, max_new_tokens=cfg.max_new_tokens)
    problem = problem_of(params)
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    start = time.perf_counter()
    calls = None
    if isinstance(problem, StepSearch):  # a tactic at a time, each checked (DCO §5.3's search; hf: config checks)
        sampled, calls = cfg.backend.search(
            model_dir,
            problem,
            rows,
            cfg.samples_per_prompt,
            sampling,
            dtype=params.model.dtype,
            batch_size=cfg.batch_size,
            seed=params.study.seed,
        )
    else:
        sampled = cfg.backend.sample(
            model_dir,
            [r["prompt"] for r in rows],
            [r["id"] for r in rows],
            cfg.samples_per_prompt,
            sampling,
            dtype=params.model.dtype,
            batch_size=cfg.batch_size,
            seed=params.study.seed,
        )
    seconds = time.perf_counter() - start
    pool = build_pool(test_rows, sampled.completions, problem, sampled.sampler_logps)
    if calls is not None:
        pool["verifier_calls"] = calls
    write_pool(pool, paths.pool(variant, split), sampled.record.as_dict())
    tokens = int(pool.num_tokens.sum())
    gap = report_logp_gap(sampled.completions, sampled.sampler_logps)
    return {
        "completions": float(len(pool)),
        "tokens_generated": float(tokens),
        "generation_seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "unfinished_fraction": float(1 - pool.finished.mean()),
        "mean_reward": float(pool.reward.mean()),
        "sampler_logp_gap_mean": gap["mean"],
        "sampler_logp_gap_max": gap["max"],
        **({"verifier_calls_per_attempt": float(pool.verifier_calls.mean())} if calls is not None else {}),
    }


def check_prompt_lengths(rows: Sequence[dict], tokenizer, *, context: int, max_new_tokens: int) -> None:
    """Every prompt leaves room for ``max_new_tokens`` in the model's context; else name the row.

    A prompt that does not fit would be truncated silently, or make batched generation
    allocate for a sequence the model cannot attend over (a 1 MB prompt ran out of memory).
    """
    limit = context - max_new_tokens
    for row in rows:
        length = len(tokenizer(row["prompt"], add_special_tokens=True)["input_ids"])
        if length > limit:
            raise ValueError(
                f"row {row.get('id')!r}: its prompt is {length} tokens, but the model's context of {context} tokens "
                f"minus rollouts.max_new_tokens = {max_new_tokens} leaves {limit}"
            )
