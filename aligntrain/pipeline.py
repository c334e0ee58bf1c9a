"""The table of the study's stages: what each runs, logs, reads and writes.

This is the one place a stage is defined. The ``aligntrain`` command line
(:mod:`aligntrain.cli`) makes one sub-command per entry, and :func:`render_dvc_yaml`
writes ``dvc.yaml`` from it, so DVC's DAG, the commands and the code never drift
apart. The library knows nothing of DVC: the rendered file is plain data here.

Each entry's ``run`` gets the validated parameters, the study's paths, the variant
(per-variant stages) and the open MLflow child run, and returns the headline
metrics logged on that run.

Paths in ``deps``/``outs`` are templates: ``{v}`` is the stage's own variant
(``foreach`` over ``study.run``); an entry with ``{each}`` is repeated for every
variant the study runs (what ``compare`` and ``report`` read, file by file, so
outputs left behind by an earlier experiment never change their inputs); an entry with
``{held}`` once for every held-out split of ``rollouts.splits`` (none when the study
evaluates the test split alone); an entry with ``{rep}`` once for every replicate
(``study.seeds``); ``{base}`` is the variant a replicate repeats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aligntrain.config import LaunchConfig, Params, SelectionConfig
from aligntrain.paths import StudyPaths

RunFn = Callable[[Params, StudyPaths, "str | None", Any], dict]


@dataclass(frozen=True)
class Stage:
    """One DVC stage of the study and the ``aligntrain <name>`` command that runs it."""

    name: str
    """DVC stage name and sub-command (``oracle_gradient`` is ``aligntrain oracle-gradient``)."""
    summary: str
    """One line for ``aligntrain --help`` and ``aligntrain stages``."""
    run: RunFn
    """Does the work: ``run(params, paths, variant, mlflow_run) -> metrics``."""
    logged: Callable[[Params, str | None], Mapping[str, Any]]
    """The parameters logged on the stage's MLflow run."""
    per_variant: bool = False
    """One stage per variant of ``study.run`` (DVC ``foreach``; ``--variant`` on the command line)."""
    accelerator: bool = False
    """Trains or samples a model: scheduled on the GPU pool of agents when there is one."""
    replicated: bool = False
    """Run again for every seed of ``study.seeds`` (a per-variant stage: ``train@ce--s1``, ...)."""
    launched: bool = False
    """Trains: runs as ``launch.num_processes`` processes under accelerate launch when that is > 1."""
    selects: bool = False
    """Trains variants: tracks the ``selection`` section when a study writes one (checkpoint selection)."""
    deps: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    uncached_outs: tuple[str, ...] = ()
    """Small outputs kept in git (``cache: false``): reports, CSVs."""
    metrics: tuple[str, ...] = ()
    plots: tuple[str, ...] = ()
    artifacts: tuple[tuple[str, str | None], ...] = field(default=())
    """(path template, artifact folder) logged to MLflow after the run."""

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")


# ---------------------------------------------------------------- run functions
# Imports inside each function: a stage loads only the libraries it uses
# (evaluate and compare never import transformers or TRL).


def _prepare(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import prepare

    splits = prepare.generate_rows(params)
    prepare.validate_rows(params, splits)
    return prepare.write_outputs(paths, splits, prepare.pretrain_corpus(params))


def _pretrain(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    import pandas as pd

    from aligntrain.stages import prepare, training

    corpus = pd.read_parquet(paths.pretrain_corpus)["text"].tolist()
    splits = {s: prepare.read_split(params, paths, s) for s in prepare.SPLITS}
    return training.pretrain(params, paths, corpus, splits, callbacks=[run.trainer_callback()])


def _warmup(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import prepare, training

    train, val = prepare.read_split(params, paths, "train"), prepare.read_split(params, paths, "validation")
    return training.warmup(params, paths, train, val, callbacks=[run.trainer_callback()])


def _train(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import prepare, training

    # RL may train on the prompts it is evaluated on (rl.prompt_split); SFT always on the training split.
    split = params.rl.prompt_split if params.variant(variant).options.kind == "rl" else "train"
    train, val = prepare.read_split(params, paths, split), prepare.read_split(params, paths, "validation")
    return training.train_variant(params, paths, variant, train, val, callbacks=[run.trainer_callback()])


def _per_split(params: Params, paths: StudyPaths, do: Callable[..., dict]) -> dict:
    """``do(rows, split)`` on every split of ``rollouts.splits``; a held-out split's metrics prefixed by its name."""
    from aligntrain.stages import prepare

    metrics: dict = {}
    for split in params.rollouts.splits:
        done = do(prepare.read_split(params, paths, split), split)
        metrics.update(done if split == "test" else {f"{split}/{k}": v for k, v in done.items() if k != "by_level"})
    return metrics


def _rollouts(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import rollouts

    return _per_split(params, paths, lambda rows, split: rollouts.generate_pool(params, paths, variant, rows, split))


def _evaluate(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import evaluation

    return _per_split(params, paths, lambda rows, split: evaluation.evaluate_pool(params, paths, variant, rows, split))


def _compare(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import compare

    return compare.compare_variants(params, paths)


def _diagnose(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import diagnostics, prepare

    return diagnostics.diagnose_variant(params, paths, variant, prepare.read_split(params, paths, "test"))


def _oracle_gradient(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import diagnostics, prepare

    return diagnostics.oracle_gradient(params, paths, prepare.read_split(params, paths, "test"))


def _synthetic(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import diagnostics

    return diagnostics.synthetic_checks(params, paths)


def _report(params: Params, paths: StudyPaths, variant: str | None, run) -> dict:
    from aligntrain.stages import report

    return report.build_report(params, paths)


def _variant_and(section: str) -> Callable[[Params, str | None], dict]:
    def logged(params: Params, variant: str | None) -> dict:
        return {"variant": params.variant(variant).model_dump(), section: getattr(params, section).model_dump()}

    return logged


def _monitored(params: Params) -> dict:
    """The monitor's parameters, logged on a training stage's run when it is on."""
    return {"monitor": params.monitor.model_dump()} if params.monitor.enabled else {}


def _train_logged(params: Params, variant: str | None) -> dict:
    spec = params.variant(variant)
    schedule = params.rl if spec.options.kind == "rl" else params.train
    return {"variant": spec.model_dump(), "schedule": schedule.model_dump() if schedule else {}, **_monitored(params)}


# Library code each kind of stage runs: a change there re-runs the stage.
_TRAINING_CODE = ("aligntrain/models", "aligntrain/training", "aligntrain/stages/training.py")
_DIAGNOSTICS_CODE = ("aligntrain/diagnostics", "aligntrain/stages/diagnostics.py")
# What grades a completion: the problems, the grader, reward models and the sandbox that runs programs.
_GRADING_CODE = (
    "aligntrain/problems",
    "aligntrain/grading",
    "aligntrain/rewards.py",
    "aligntrain/sandbox",
)
# The training-time monitor (aligntrain/training/monitor.py, in _TRAINING_CODE) samples, grades and estimates.
_MONITOR_CODE = ("aligntrain/rollouts/generate.py", "aligntrain/rollouts/pool.py", "aligntrain/estimators.py")

STAGES: tuple[Stage, ...] = (
    Stage(
        "prepare",
        "Generate (or load) and validate the train/val/test rows and the pretraining corpus.",
        _prepare,
        lambda p, v: {"problem": p.problem.model_dump(), "seed": p.study.seed},
        deps=(*_GRADING_CODE, "aligntrain/stages/prepare.py"),
        params=("study.seed", "problem"),
        outs=("data",),
    ),
    Stage(
        "pretrain",
        "Train the tiny base model from scratch on the synthetic corpus.",
        _pretrain,
        lambda p, v: {"model": p.model.model_dump(), "pretrain": p.pretrain.model_dump()},
        accelerator=True,
        launched=True,
        deps=("data", *_TRAINING_CODE),
        params=("study.seed", "model", "pretrain"),
        outs=("models/base",),
    ),
    Stage(
        "warmup",
        "CE SFT warm-up from the base model (the shared start of all variants).",
        _warmup,
        lambda p, v: {"warmup": p.warmup.model_dump(), **_monitored(p)},
        accelerator=True,
        launched=True,
        deps=("data", "models/base", *_TRAINING_CODE, *_MONITOR_CODE, *_GRADING_CODE),
        # The monitor samples and grades (problem): read by the stage only when monitor.enabled.
        params=("study.seed", "model", "problem", "warmup", "monitor"),
        outs=("models/warmup",),
        plots=("plots/monitor/warmup.csv",),
    ),
    Stage(
        "train",
        "Fine-tune one variant from the warm-up checkpoint.",
        _train,
        _train_logged,
        per_variant=True,
        accelerator=True,
        replicated=True,
        launched=True,
        selects=True,
        deps=(
            "data",
            "models/warmup",
            *_TRAINING_CODE,
            "aligntrain/losses.py",
            "aligntrain/advantages",
            *_MONITOR_CODE,
            *_GRADING_CODE,
        ),
        params=("study.seed", "model", "problem", "train", "rl", "variants.{base}", "monitor"),
        outs=("models/variants/{v}",),
        plots=("plots/monitor/variants/{v}.csv",),
    ),
    Stage(
        "rollouts",
        "Sample M completions per test prompt into pools/<variant>.parquet (and per held-out prompt).",
        _rollouts,
        _variant_and("rollouts"),
        per_variant=True,
        accelerator=True,
        replicated=True,
        deps=(
            "data/test.parquet",
            "data/{held}.parquet",
            "models/variants/{v}",
            "aligntrain/rollouts",
            *_GRADING_CODE,
            "aligntrain/models",
            "aligntrain/stages/rollouts.py",
        ),
        params=("study.seed", "model", "problem", "rollouts"),
        outs=("pools/{v}.parquet", "pools/{held}/{v}.parquet"),
    ),
    Stage(
        "evaluate",
        "pass@k and maj@k curves of a variant's pool.",
        _evaluate,
        _variant_and("evaluate"),
        per_variant=True,
        replicated=True,
        deps=(
            "data/test.parquet",
            "data/{held}.parquet",
            "pools/{v}.parquet",
            "pools/{held}/{v}.parquet",
            "aligntrain/evaluation",
            "aligntrain/estimators.py",
            "aligntrain/rollouts/pool.py",
            *_GRADING_CODE,
            "aligntrain/stages/evaluation.py",
        ),
        params=("evaluate",),
        outs=("metrics/per_prompt/{v}.parquet", "metrics/per_prompt/{held}/{v}.parquet"),
        metrics=("metrics/{v}.json", "metrics/{held}/{v}.json"),
        plots=("plots/curves/{v}.csv",),
        artifacts=(("metrics/{v}.json", None), ("plots/curves/{v}.csv", None)),
    ),
    Stage(
        "compare",
        "All variants side by side, paired against the baseline.",
        _compare,
        lambda p, v: {"compare": p.compare.model_dump()},
        deps=(
            "metrics/per_prompt/{rep}.parquet",
            "metrics/per_prompt/{held}/{rep}.parquet",
            "aligntrain/evaluation",
            "aligntrain/estimators.py",
            "aligntrain/stages/compare.py",
        ),
        params=("compare", "evaluate", "study.run"),
        uncached_outs=("reports/compare.md", "reports/compare.csv"),
        metrics=("reports/compare.json",),
        plots=("reports/scaling.png",),
        artifacts=(
            ("reports/compare.md", "reports"),
            ("reports/compare.csv", "reports"),
            ("reports/scaling.png", "reports"),
        ),
    ),
    Stage(
        "diagnose",
        "Diagnostics of one variant: diagonal efficiency, QQ tails, greedy confidence.",
        _diagnose,
        _variant_and("diagnostics"),
        per_variant=True,
        deps=(
            "data/test.parquet",
            "pools/{v}.parquet",
            "models/variants/{v}",
            *_DIAGNOSTICS_CODE,
            "aligntrain/rollouts",
            "aligntrain/models",
            *_GRADING_CODE,
        ),
        params=(
            "study.seed",
            "diagnostics.budgets",
            "diagnostics.tail_fraction",
            "diagnostics.majority_consensus",
            "diagnostics.majority_ties",
            "model",
            "problem",
            "rollouts.max_new_tokens",
        ),
        outs=("diagnoses/{v}",),
        metrics=("metrics/diagnostics/{v}.json",),
        artifacts=(("metrics/diagnostics/{v}.json", None),),
    ),
    Stage(
        "oracle_gradient",
        "Cosine of each RL rule's group gradient with the oracle gradient of the target strategy.",
        _oracle_gradient,
        lambda p, v: {"oracle": p.diagnostics.oracle.model_dump()},
        deps=(
            "data/test.parquet",
            "models/variants/${diagnostics.oracle.variant}",
            *_DIAGNOSTICS_CODE,
            "aligntrain/advantages",
            "aligntrain/rollouts",
            "aligntrain/models",
            *_GRADING_CODE,
        ),
        # The rules compared are those of every RL variant of the catalog, hence all of `variants`.
        params=("study.seed", "model", "problem", "rollouts", "diagnostics.oracle", "variants"),
        outs=("diagnoses/oracle_gradient",),
        metrics=("metrics/diagnostics/oracle_gradient.json",),
        artifacts=(("diagnoses/oracle_gradient/summary.csv", None),),
    ),
    Stage(
        "synthetic",
        "The synthetic checks with known answers: Tang bandit, TEA Gaussian tail.",
        _synthetic,
        lambda p, v: {"synthetic": p.diagnostics.synthetic.model_dump()},
        deps=("aligntrain/diagnostics/synthetic.py", "aligntrain/advantages", "aligntrain/stages/diagnostics.py"),
        params=("study.seed", "diagnostics.synthetic"),
        outs=("diagnoses/synthetic",),
        metrics=("metrics/diagnostics/synthetic.json",),
    ),
    Stage(
        "report",
        "reports/index.md: setup, scaling curves, comparisons and diagnostics on one page.",
        _report,
        lambda p, v: {"run": p.run_variants},
        deps=(
            "reports/compare.csv",
            "pools/{each}.parquet",
            "diagnoses/{each}",
            "metrics/diagnostics/{each}.json",
            "diagnoses/oracle_gradient",
            "metrics/diagnostics/oracle_gradient.json",
            "diagnoses/synthetic",
            "metrics/diagnostics/synthetic.json",
            "aligntrain/stages/report.py",
            "aligntrain/diagnostics",
        ),
        params=("study.run", "compare", "diagnostics"),
        uncached_outs=("reports/index.md", "reports/figures"),
        artifacts=(("reports/index.md", "reports"), ("reports/figures", "reports")),
    ),
)

STAGE_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}


def get_stage(name: str) -> Stage:
    try:
        return STAGE_BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGE_BY_NAME)}") from None


# ---------------------------------------------------------------- dvc.yaml

DVC_HEADER = """\
# Generated by `aligntrain pipeline` from the table of stages in aligntrain/pipeline.py
# and params.yaml's study.run. Do not edit by hand: change the table (or study.run) and
# re-run `aligntrain pipeline` (`make study` does). `make test` checks it is current.
#
# prepare -> pretrain -> warmup -> train@v -> rollouts@v -> evaluate@v -> compare
#                                                        -> diagnose@v -> report
"""


def _expand(templates: tuple[str, ...], study: Params, item: Mapping[str, str] | None) -> list[str]:
    """Path and parameter templates as dvc.yaml writes them for ``study``.

    ``item``: what ``{v}`` and ``{base}`` stand for inside a ``foreach`` (None outside one).
    """
    out: list[str] = []
    # {held}: once per held-out split of rollouts.splits (none when the study evaluates test alone)
    held = study.rollouts.held_out
    templates = tuple(t.replace("{held}", split) for t in templates for split in (held if "{held}" in t else [""]))
    for t in templates:
        if "{each}" in t:
            out.extend(t.replace("{each}", v) for v in study.run_variants)
        elif "{rep}" in t:
            out.extend(t.replace("{rep}", r) for r in study.replicates)
        elif item is not None:
            out.append(t.replace("{v}", item["v"]).replace("{base}", item["base"]))
        else:
            out.append(t)
    return out


def _uncached(paths: list[str]) -> list[dict]:
    return [{p: {"cache": False}} for p in paths]


#: where the studies other than the root's default live: ``pipelines/<study>/{params,dvc}.yaml``
PIPELINES = "pipelines"


def study_folders(checkout: Path) -> list[Path]:
    """Every study of a checkout: its root (the default study) and each ``pipelines/<study>/`` with a
    params.yaml or an overrides.yaml (aligntrain.study_folder)."""
    found = {p.parent for name in ("params.yaml", "overrides.yaml") for p in (checkout / PIPELINES).glob(f"*/{name}")}
    return [checkout, *sorted(found)]


def _code_relative_to(templates: tuple[str, ...], code_root: str) -> tuple[str, ...]:
    """Dependencies on the library's code (``aligntrain/...``) as seen from a study folder elsewhere."""
    if code_root in ("", "."):
        return templates
    return tuple(f"{code_root}/{t}" if t.startswith("aligntrain/") else t for t in templates)


def stage_entry(stage: Stage, study: Params, code_root: str = ".") -> dict[str, Any]:
    """The ``dvc.yaml`` entry of one stage (a ``foreach`` when per variant).

    A per-variant stage loops over ``study.run``; a replicated one, in a study with
    ``study.seeds``, over every replicate (``ce``, ``ce--s1``, ...), each item naming its variant.
    ``code_root``: the checkout relative to the study folder (``../..`` for ``pipelines/<study>``);
    DVC runs a stage in its dvc.yaml's folder, so data paths stay relative to the study and only
    the code dependencies point back at the checkout.
    """
    seeded = stage.per_variant and stage.replicated and bool(study.study.seeds)
    item = None
    if stage.per_variant:
        item = {"v": "${key}", "base": "${item.variant}"} if seeded else {"v": "${item}", "base": "${item}"}
    cmd = f"aligntrain {stage.command}" + (f" --variant {item['v']}" if item else "")
    if any("{each}" in d or "{rep}" in d for d in stage.deps):
        cmd += " --variants " + ",".join(study.run_variants)  # the stage checks these are study.run (stale dvc.yaml)
    body: dict[str, Any] = {"cmd": cmd}
    deps, stage_params = _code_relative_to(stage.deps, code_root), stage.params
    if stage.launched and study.launch != LaunchConfig():
        # A launched stage tracks how it is launched (the batch per step); a one-process study's dvc.yaml
        # does not name the section, so its params.yaml need not write it. The command names the process
        # count, which the stage checks against params: a dvc.yaml not regenerated after a change is refused.
        body["cmd"] += f" --processes {study.launch.num_processes}"
        stage_params = (*stage_params, "launch")
        deps = (*deps, *([study.launch.config_file] if study.launch.config_file else []))
    if stage.selects and study.selection != SelectionConfig():
        stage_params = (*stage_params, "selection")  # as launch: named only where a study writes it
    for key, templates in (("deps", deps), ("params", stage_params), ("outs", stage.outs)):
        if templates:
            body[key] = _expand(templates, study, item)
    if stage.uncached_outs:
        body.setdefault("outs", []).extend(_uncached(_expand(stage.uncached_outs, study, item)))
    if stage.metrics:
        body["metrics"] = _uncached(_expand(stage.metrics, study, item))
    if stage.plots:
        body["plots"] = _uncached(_expand(stage.plots, study, item))
    if not stage.per_variant:
        return body
    if seeded:
        return {"foreach": {r: {"variant": study.replicate_of(r)[0]} for r in study.replicates}, "do": body}
    return {"foreach": "${study.run}", "do": body}


def dvc_pipeline(params: Params, code_root: str = ".") -> dict[str, Any]:
    """The whole ``dvc.yaml`` as data (``code_root``: see :func:`stage_entry`)."""
    return {
        "stages": {s.name: stage_entry(s, params, code_root) for s in STAGES},
        # `dvc plots show`: every variant's pass@k curve and compare's overlay with 95% bands.
        "plots": [
            {"plots/curves": {"x": "k", "y": "pass_at_k", "x_label": "budget k", "y_label": "score"}},
            "reports/scaling.png",
            "reports/figures",
        ],
    }


def render_dvc_yaml(params: Params, code_root: str = ".") -> str:
    import yaml

    return DVC_HEADER + yaml.safe_dump(dvc_pipeline(params, code_root), sort_keys=False, width=120)


def check_written_params(params: Params, raw: Mapping[str, Any], where: str) -> None:
    """Every parameter dvc.yaml names (a stage's ``params:`` or an ``${a.b}``) must be written in the file.

    DVC reads them from the file's text, not from aligntrain's defaults: a section left to
    its defaults would stop ``dvc repro`` at that stage; this names every such key first.
    """
    import re

    data = dvc_pipeline(params)
    keys = {k for k in re.findall(r"\$\{([\w.]+)\}", render_dvc_yaml(params)) if k.split(".")[0] not in ("item", "key")}
    for entry in data["stages"].values():
        for key in entry.get("do", entry).get("params", []):
            loop = next((m for m in ("${item}", "${item.variant}") if m in key), None)
            keys |= {key.replace(loop, v) for v in params.run_variants} if loop else {key}
    missing = []
    for key in sorted(keys):
        node: Any = raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            missing.append(key)
    if missing:
        raise ValueError(
            f"{where}: dvc.yaml names {', '.join(missing)}: write them in the file (DVC reads the file, "
            "not the defaults of aligntrain/config.py; `aligntrain list` and the root params.yaml show them)"
        )


def code_root_of(study: Path) -> str:
    """The checkout holding ``study``, relative to it: ``.`` for a root study, ``../..`` for a pipeline.

    The checkout is the nearest folder at or above the study with the ``aligntrain`` package in it
    (the stages hash and run that copy: a scratch copy of the tree, a workspace, a clone); a study
    outside any checkout is treated as a root study (``.``).
    """
    study = study.resolve()
    for folder in (study, *study.parents):
        if (folder / "aligntrain" / "__init__.py").is_file():
            return Path(os.path.relpath(folder, study)).as_posix()
    return "."


def check_variants(params: Params, listed: list[str]) -> None:
    """A stage that reads every variant's files was generated for ``listed``: it must be ``study.run``."""
    if listed != params.run_variants:
        raise ValueError(
            f"dvc.yaml was generated for study.run={listed} but params.yaml has study.run={params.run_variants}; "
            "run `aligntrain pipeline` to regenerate dvc.yaml"
        )
