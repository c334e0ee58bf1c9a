"""The ``aligntrain`` command line: one sub-command per stage of :data:`aligntrain.pipeline.STAGES`.

``dvc.yaml``'s commands call these (``aligntrain train --variant ce``); so do Prefect's
stage tasks, through ``dvc repro``. Nothing here imports Prefect or DVC: a stage runs
in an environment that has neither (a GPU machine with vLLM cannot have Prefect).

Parameters are validated before any work, so a bad params.yaml fails in a second
with a message naming the key, and no MLflow run is created.
"""

from __future__ import annotations

import errno
import inspect
import os
import sys
from pathlib import Path

import typer

# No hub access on study machines; never wait on the network for telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# MLflow's client retries an unreachable server for minutes by default (7 retries, backoff 2,
# 120 s timeout). A stage checks the server before work and drops its logging on the first
# failure after that, so a short bound is enough.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")

from aligntrain import launch, pipeline  # noqa: E402  (after the environment above)
from aligntrain.errors import StageError  # noqa: E402

app = typer.Typer(help="aligntrain: strategy-aware training pipeline stages.", no_args_is_help=True)

ParamsOpt = typer.Option("params.yaml", "--params", "-p", help="Parameters file, relative to --root.")
RootOpt = typer.Option(".", "--root", help="Study directory (where data/, models/, ... live).")
VariantOpt = typer.Option(..., "--variant", "-v", help="Variant name from params.yaml.")
VariantsOpt = typer.Option(
    "", "--variants", help="Comma-separated variants dvc.yaml was generated for (checked against study.run)."
)
ProcessesOpt = typer.Option(
    1, "--processes", help="Processes dvc.yaml was generated for (checked against launch.num_processes)."
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _load(params_file: str, root: str):
    from aligntrain.config import ParamsError, load_params

    try:
        return load_params(Path(root) / params_file)
    except (ParamsError, ValueError) as err:
        _fail(str(err))


def run_stage(
    stage: pipeline.Stage, params_file: str, root: str, variant: str | None, variants: str, processes: int = 1
) -> dict:
    """Validate, open the stage's MLflow child run, run it, log its metrics and artifacts."""
    from aligntrain import tracking
    from aligntrain.paths import StudyPaths

    params = _load(params_file, root)
    try:
        if variant is not None:
            params.variant(variant)
            params = params.for_replicate(variant)  # a seed replicate trains and samples under its own seed
        if variants:
            pipeline.check_variants(params, variants.split(","))
        if stage.launched and processes != params.launch.num_processes:
            # dvc.yaml tracks the launch section only when it launches: a stale one would not re-run the stage.
            raise ValueError(
                f"launch.num_processes is {params.launch.num_processes} but dvc.yaml was written for {processes}: "
                f"run `aligntrain pipeline --root {root}` (make study does) and reproduce again"
            )
        tracking.check_tracking_server(Path(root))
    except (ValueError, ConnectionError) as err:
        _fail(str(err))
    threads = params.torch_threads(stage.name, variant)
    if stage.launched and params.launch.multi_process and not launch.launched():
        _relaunch(stage, params, params_file, root, variant, variants, threads)
    if threads:
        import torch

        torch.set_num_threads(threads)
    root_ = Path(root)
    paths = StudyPaths(root_)
    try:
        if not launch.main_process():
            # Another process of a launch: it trains its shard; process 0 logs the run and writes the outputs.
            return stage.run(params, paths, variant, tracking.UNTRACKED)
        return _run_tracked(stage, params, paths, root_, variant)
    except StageError as err:
        _fail(f"{stage.name}: {err}")
    except OSError as err:
        if err.errno not in _FULL_OR_READ_ONLY:
            raise
        # Outputs are written atomically and checkpoints kept until the save: nothing is lost.
        _fail(
            f"{stage.name}: {err.strerror}: {err.filename or '(a file of the stage)'}; nothing was lost: "
            "make room (or make it writable) and run the stage again, it resumes"
        )


def _relaunch(stage, params, params_file: str, root: str, variant: str | None, variants: str, threads: int) -> None:
    """Run this stage again as ``launch.num_processes`` processes (aligntrain/launch.py); never returns."""
    config = params.launch.config_file
    config_path = Path(root) / config if config else None
    if config_path is not None and not config_path.is_file():
        _fail(f"launch.config_file: {config_path} does not exist (the repository's accelerate/ holds the configs)")
    args = [stage.command, "--params", params_file, "--root", root, "--processes", str(params.launch.num_processes)]
    args += ["--variant", variant] if variant is not None else []
    args += ["--variants", variants] if variants else []
    command = launch.launch_command(params.launch.num_processes, config_path, threads, args, launch.free_port())
    typer.echo(f"{stage.name}: {params.launch.num_processes} processes: {' '.join(command[1:])}", err=True)
    launch.relaunch(command)


#: Disk full, quota exceeded, a read-only file system or folder: the environment's fault, told in one line.
_FULL_OR_READ_ONLY = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES}


def _run_tracked(stage: pipeline.Stage, params, paths, root_: Path, variant: str | None) -> dict:
    """The stage in its MLflow child run (closed FAILED when the stage raises)."""
    from aligntrain import tracking

    with tracking.stage_run(
        study=params.study.name,
        experiment=params.study.experiment,
        stage=stage.name,
        variant=variant,
        params=stage.logged(params, variant),
        root=root_,
    ) as run:
        metrics = stage.run(params, paths, variant, run)
        run.log_metrics(metrics)
        for template, folder in stage.artifacts:
            run.log_artifact(root_ / template.replace("{v}", variant or ""), artifact_path=folder)
    return metrics


def _command(stage: pipeline.Stage):
    if stage.per_variant:

        def command(
            variant: str = VariantOpt,
            params: str = ParamsOpt,
            root: str = RootOpt,
            variants: str = VariantsOpt,
            processes: int = ProcessesOpt,
        ) -> None:
            run_stage(stage, params, root, variant, variants, processes)
    else:

        def command(
            params: str = ParamsOpt, root: str = RootOpt, variants: str = VariantsOpt, processes: int = ProcessesOpt
        ) -> None:
            run_stage(stage, params, root, None, variants, processes)

    command.__doc__ = stage.summary
    return command


for _stage in pipeline.STAGES:
    app.command(_stage.command)(_command(_stage))


@app.command("pipeline")
def write_pipeline(
    params: str = ParamsOpt,
    root: str = RootOpt,
    check: bool = typer.Option(
        False, "--check", help="Only check that dvc.yaml (and a generated params.yaml) is current (exit 1 if not)."
    ),
    all_studies: bool = typer.Option(
        False, "--all", help="Every study of the checkout at --root: its own and each pipelines/<study>/."
    ),
) -> None:
    """Write dvc.yaml from the table of stages and params.yaml's study.run (per study folder).

    A folder with an overrides.yaml first gets its params.yaml, generated from the overrides laid over
    their base. Writing refuses a study whose output paths hold files its dvc.lock does not record:
    `dvc repro` would delete them."""
    import yaml

    from aligntrain import study_folder
    from aligntrain.config import ParamsError, read_params_yaml
    from aligntrain.io import write_text

    roots = pipeline.study_folders(Path(root)) if all_studies else [Path(root)]
    stale = []
    for folder in roots:
        if (folder / study_folder.OVERRIDES).is_file():
            try:
                text = study_folder.render_params_yaml(folder)
            except ParamsError as err:
                _fail(str(err))
            target = folder / params
            if check:
                if not target.is_file() or target.read_text() != text:
                    stale.append(str(target))
                    continue
            else:
                write_text(target, text)
        loaded = _load(params, str(folder))
        try:
            pipeline.check_written_params(loaded, read_params_yaml(folder / params), str(folder / params))
        except ValueError as err:
            _fail(str(err))
        text = pipeline.render_dvc_yaml(loaded, pipeline.code_root_of(folder))
        target = folder / "dvc.yaml"
        if check:
            if not target.is_file() or target.read_text() != text:
                stale.append(str(target))
            continue
        foreign = study_folder.foreign_outputs(folder, yaml.safe_load(text), list(loaded.study.run))
        if foreign:
            _fail(
                f"{folder}: output paths of this study hold files that {folder / 'dvc.lock'} does not record: "
                f"{', '.join(foreign)}. This study's stages did not write them, and `dvc repro` would delete them "
                "before running their stages. Move them elsewhere (or delete them yourself); nothing was changed."
            )
        write_text(target, text)
    if stale:
        typer.echo(f"not current: {', '.join(stale)}: run `aligntrain pipeline --all`", err=True)
        raise typer.Exit(1)


@app.command("stages")
def list_stages() -> None:
    """The table of stages: name, per variant or not, accelerator or not, what it does."""
    for s in pipeline.STAGES:
        kind = ("per variant" if s.per_variant else "once") + (", accelerator" if s.accelerator else "")
        typer.echo(f"{s.name:16s} {kind:24s} {s.summary}")


@app.command("standins")
def write_standin_files(
    folder: str = typer.Argument(..., help="Where to write them (scripts/run_standin.py: <study>/standins)."),
) -> None:
    """Write the local stand-ins of the hub models and data sets (aligntrain/standins.py) into FOLDER."""
    from aligntrain.standins import write_standins

    for name, path in write_standins(Path(folder)).items():
        typer.echo(f"{name:24s} {path}")


def _registries() -> dict:
    """What ``aligntrain list`` shows: each registry of typed entries, by the word a user types."""
    from aligntrain.advantages import RULES
    from aligntrain.objectives import OBJECTIVES
    from aligntrain.problems import PROBLEMS
    from aligntrain.rollouts.backends import BACKENDS

    return {"objectives": OBJECTIVES, "rules": RULES, "problems": PROBLEMS, "backends": BACKENDS}


@app.command("list")
def list_entries(
    kind: str = typer.Argument(..., help="objectives, rules, problems or backends."),
    name: str = typer.Argument("", help="One entry: its whole docstring and options."),
) -> None:
    """The entries of a registry (objectives, rules, problems, generation backends) and their typed options."""
    from aligntrain.options import describe_options

    registries = _registries()
    if kind not in registries:
        _fail(f"no registry {kind!r}; known: {', '.join(registries)}")
    registry = registries[kind]
    try:
        entries = [registry.get(name)] if name else list(registry)
    except ValueError as err:
        _fail(str(err))
    for entry in entries:
        typer.echo(f"{entry.name:22s} {entry.summary()}")
        details = inspect.cleandoc(entry.__doc__ or "").partition("\n")[2].strip()
        if name and details:
            typer.echo("\n".join("    " + line for line in details.splitlines()) + "\n")
        for option in describe_options(entry):
            bounds = f", {option.bounds}" if option.bounds else ""
            typer.echo(f"    {option.name:18s} {option.type}{bounds}; default {option.default}. {option.description}")


@app.command("new-study-run")
def new_study_run(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Create a fresh MLflow parent run and print its id (for ALIGNTRAIN_PARENT_RUN_ID)."""
    from aligntrain import tracking

    p = _load(params, root)
    try:
        tracking.check_tracking_server(Path(root))
    except ConnectionError as err:
        _fail(str(err))
    sys.stdout.write(tracking.start_study_run(p.study.name, p.study.experiment, Path(root)) + "\n")


@app.command("end-study-run")
def end_study_run(
    run_id: str = typer.Argument(..., help="The parent run's id."),
    status: str = typer.Option("FINISHED", "--status", help="FINISHED, FAILED or KILLED."),
    root: str = RootOpt,
) -> None:
    """Close the study's MLflow parent run with the study's status."""
    from aligntrain import tracking

    tracking.end_study_run(run_id, status, Path(root))


@app.command("ui")
def ui(
    params: str = ParamsOpt,
    root: str = RootOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface the UI listens on (0.0.0.0: every one)."),
    port: int = typer.Option(5000, "--port", help="Port of the UI."),
    print_only: bool = typer.Option(False, "--print-only", help="Print the links and exit; serve nothing."),
) -> None:
    """Serve the study's MLflow store and print the links to its runs table and to each variant's runs.

    With MLFLOW_TRACKING_URI set to a server, that server is the UI: the links point there, nothing is served."""
    from aligntrain import tracking

    p = _load(params, root)
    remote = os.environ.get("MLFLOW_TRACKING_URI", "")
    serve = not remote.startswith(("http://", "https://"))
    base = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}" if serve else remote
    try:
        urls = tracking.runs_urls(p.study.experiment, list(p.study.run), base, Path(root))
    except ValueError as err:
        _fail(str(err))
    typer.echo(f"runs of {p.study.name} ({p.study.experiment}): {urls.pop('runs')}")
    for variant, url in urls.items():
        typer.echo(f"  {variant}: {url}")
    if serve and not print_only:
        store = tracking.tracking_uri(Path(root))
        typer.echo(f"serving {store} (Ctrl-C stops it)", err=True)
        sys.stdout.flush()
        mlflow = Path(sys.executable).with_name("mlflow")
        os.execv(str(mlflow), [str(mlflow), "ui", "--backend-store-uri", store, "--host", host, "--port", str(port)])


if __name__ == "__main__":
    app()
