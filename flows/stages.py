"""Prefect flows: one per DVC stage, plus ``study`` that runs the whole DAG in one process.

Each flow loads and validates params.yaml, opens its MLflow child run, and
composes the tasks of ``tasks/``. They run with no Prefect server configured
(ephemeral mode) or against ``PREFECT_API_URL``. Task modules are imported inside
each flow, so a stage loads only the libraries it uses.
"""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow

from aligntrain import tracking
from aligntrain.config import Params, load_params
from aligntrain.paths import StudyPaths


def _context(params_file: str, root: str) -> tuple[Params, StudyPaths, Path]:
    return load_params(Path(root) / params_file), StudyPaths(Path(root)), Path(root)


def _run(params: Params, root: Path, stage: str, variant: str | None, logged: dict):
    return tracking.stage_run(
        study=params.study.name,
        experiment=params.study.experiment,
        stage=stage,
        variant=variant,
        params=logged,
        root=root,
    )


@flow(name="prepare")
def prepare_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import prepare as t

    with _run(params, root_, "prepare", None, {"problem": params.problem.model_dump(), "seed": params.study.seed}) as run:
        splits = t.generate_rows(params)
        t.validate_rows(params, splits)
        corpus = t.pretrain_corpus(params)
        counts = t.write_prepared(paths, splits, corpus)
        run.log_metrics(counts)
    return counts


@flow(name="pretrain")
def pretrain_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    logged = {"model": params.model.model_dump(), "pretrain": params.pretrain.model_dump()}
    import pandas as pd

    from tasks import prepare, training

    with _run(params, root_, "pretrain", None, logged) as run:
        corpus = pd.read_parquet(paths.pretrain_corpus)["text"].tolist()
        splits = {s: prepare.read_split(paths, s) for s in ("train", "validation", "test")}
        metrics = training.pretrain(params, paths, corpus, splits, callbacks=[run.trainer_callback()])
        run.log_metrics(metrics)
    return metrics


@flow(name="warmup")
def warmup_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import prepare, training

    with _run(params, root_, "warmup", None, {"warmup": params.warmup.model_dump()}) as run:
        train_rows, val_rows = prepare.read_split(paths, "train"), prepare.read_split(paths, "validation")
        metrics = training.warmup(params, paths, train_rows, val_rows, callbacks=[run.trainer_callback()])
        run.log_metrics(metrics)
    return metrics


@flow(name="train")
def train_flow(variant: str, params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import prepare, training

    schedule = params.rl if params.variant(variant).options.kind == "rl" else params.train
    logged = {"variant": params.variant(variant).model_dump(), "schedule": schedule.model_dump() if schedule else {}}
    with _run(params, root_, "train", variant, logged) as run:
        train_rows, val_rows = prepare.read_split(paths, "train"), prepare.read_split(paths, "validation")
        metrics = training.train_variant(params, paths, variant, train_rows, val_rows, callbacks=[run.trainer_callback()])
        run.log_metrics(metrics)
    return metrics


@flow(name="rollouts")
def rollouts_flow(variant: str, params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    logged = {"variant": params.variant(variant).model_dump(), "rollouts": params.rollouts.model_dump()}
    from tasks import evaluation, prepare

    with _run(params, root_, "rollouts", variant, logged) as run:
        metrics = evaluation.generate_pool(params, paths, variant, prepare.read_split(paths, "test"))
        run.log_metrics(metrics)
    return metrics


@flow(name="evaluate")
def evaluate_flow(variant: str, params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    logged = {"variant": params.variant(variant).model_dump(), "evaluate": params.evaluate.model_dump()}
    from tasks import evaluation, prepare

    with _run(params, root_, "evaluate", variant, logged) as run:
        summary = evaluation.evaluate_pool(params, paths, variant, prepare.read_split(paths, "test"))
        run.log_metrics(summary)
        run.log_artifact(paths.metrics(variant))
        run.log_artifact(paths.curve(variant))
    return summary


@flow(name="compare")
def compare_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import evaluation

    with _run(params, root_, "compare", None, {"compare": params.compare.model_dump()}) as run:
        summary = evaluation.compare_variants(params, paths)
        run.log_metrics(summary)
        for name in ("compare.md", "compare.csv", "scaling.png"):
            run.log_artifact(paths.reports / name, artifact_path="reports")
    return summary


@flow(name="diagnose")
def diagnose_flow(variant: str, params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    logged = {"variant": params.variant(variant).model_dump(), "diagnostics": params.diagnostics.model_dump()}
    from tasks import diagnostics, prepare

    with _run(params, root_, "diagnose", variant, logged) as run:
        summary = diagnostics.diagnose_variant(params, paths, variant, prepare.read_split(paths, "test"))
        run.log_metrics(summary)
        run.log_artifact(paths.diagnostics_metrics(variant))
    return summary


@flow(name="oracle-gradient")
def oracle_gradient_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import diagnostics, prepare

    with _run(params, root_, "oracle_gradient", None, {"oracle": params.diagnostics.oracle.model_dump()}) as run:
        summary = diagnostics.oracle_gradient(params, paths, prepare.read_split(paths, "test"))
        run.log_metrics(summary)
        run.log_artifact(paths.diagnostics("oracle_gradient") / "summary.csv")
    return summary


@flow(name="synthetic")
def synthetic_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import diagnostics

    with _run(params, root_, "synthetic", None, {"synthetic": params.diagnostics.synthetic.model_dump()}) as run:
        summary = diagnostics.synthetic_checks(params, paths)
        run.log_metrics(summary)
    return summary


@flow(name="report")
def report_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    params, paths, root_ = _context(params_file, root)
    from tasks import diagnostics

    with _run(params, root_, "report", None, {"run": params.run_variants}) as run:
        summary = diagnostics.build_report(params, paths)
        run.log_metrics(summary)
        run.log_artifact(paths.reports / "index.md", artifact_path="reports")
        run.log_artifact(paths.figures, artifact_path="reports")
    return summary


@flow(name="study")
def study_flow(params_file: str = "params.yaml", root: str = ".") -> dict:
    """The whole DAG in one process, under one fresh MLflow parent run (no DVC caching)."""
    params, _, root_ = _context(params_file, root)
    os.environ[tracking.PARENT_ENV] = tracking.start_study_run(params.study.name, params.study.experiment, root_)
    prepare_flow(params_file, root)
    pretrain_flow(params_file, root)
    warmup_flow(params_file, root)
    for variant in params.run_variants:
        train_flow(variant, params_file, root)
        rollouts_flow(variant, params_file, root)
        evaluate_flow(variant, params_file, root)
        diagnose_flow(variant, params_file, root)
    compare_flow(params_file, root)
    oracle_gradient_flow(params_file, root)
    synthetic_flow(params_file, root)
    return report_flow(params_file, root)
