"""Prefect tasks: one thin wrapper per library call, no logic of their own.

One module per group of stages (``tasks.prepare``, ``tasks.training``,
``tasks.evaluation``), so a stage imports only what it runs: evaluate and
compare never import transformers or TRL. Results stay in memory (models, row
lists), so tasks never hash their inputs for caching (``NO_CACHE``); DVC, not
Prefect, decides what needs re-running.
"""

from prefect.cache_policies import NO_CACHE

TASK_OPTIONS = dict(cache_policy=NO_CACHE)
