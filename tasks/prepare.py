from prefect import task

from aligntrain.stages import prepare
from tasks import TASK_OPTIONS

generate_rows = task(prepare.generate_rows, name="generate-rows", **TASK_OPTIONS)
validate_rows = task(prepare.validate_rows, name="validate-rows", **TASK_OPTIONS)
pretrain_corpus = task(prepare.pretrain_corpus, name="pretrain-corpus", **TASK_OPTIONS)
write_prepared = task(prepare.write_outputs, name="write-prepared", **TASK_OPTIONS)
read_split = task(prepare.read_split, name="read-split", **TASK_OPTIONS)
