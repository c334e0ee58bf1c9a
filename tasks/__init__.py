"""Prefect tasks: one thin wrapper per library call, no logic of their own.

Results stay in memory (models, row lists), so tasks never hash their inputs
for caching (``NO_CACHE``); DVC, not Prefect, decides what needs re-running.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from aligntrain.stages import evaluation, prepare, training

_task = dict(cache_policy=NO_CACHE)

# prepare
generate_rows = task(prepare.generate_rows, name="generate-rows", **_task)
validate_rows = task(prepare.validate_rows, name="validate-rows", **_task)
pretrain_corpus = task(prepare.pretrain_corpus, name="pretrain-corpus", **_task)
write_prepared = task(prepare.write_outputs, name="write-prepared", **_task)
read_split = task(prepare.read_split, name="read-split", **_task)

# pretrain / warmup / train@variant
pretrain = task(training.pretrain, name="pretrain", **_task)
warmup = task(training.warmup, name="warmup", **_task)
train_variant = task(training.train_variant, name="train-variant", **_task)

# rollouts / evaluate / compare
generate_pool = task(evaluation.generate_pool, name="generate-pool", **_task)
evaluate_pool = task(evaluation.evaluate_pool, name="evaluate-pool", **_task)
compare_variants = task(evaluation.compare_variants, name="compare-variants", **_task)
