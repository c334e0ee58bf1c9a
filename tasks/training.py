from prefect import task

from aligntrain.stages import training
from tasks import TASK_OPTIONS

pretrain = task(training.pretrain, name="pretrain", **TASK_OPTIONS)
warmup = task(training.warmup, name="warmup", **TASK_OPTIONS)
train_variant = task(training.train_variant, name="train-variant", **TASK_OPTIONS)
