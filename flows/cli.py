"""The ``aligntrain`` command: one sub-command per stage, each running its Prefect flow.

DVC stage commands call these (``aligntrain train --variant ce``). Parameters
are validated before any flow starts, so a bad params.yaml fails in a second
with a message naming the key, and no Prefect or MLflow run is created.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

# No hub access on study machines; never wait on the network for telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(help="aligntrain: strategy-aware training pipeline stages.", no_args_is_help=True)

ParamsOpt = typer.Option("params.yaml", "--params", "-p", help="Parameters file, relative to --root.")
RootOpt = typer.Option(".", "--root", help="Study directory (where data/, models/, ... live).")
VariantOpt = typer.Option(..., "--variant", "-v", help="Variant name from params.yaml.")


def _validated(params_file: str, root: str, variant: str | None = None) -> None:
    from aligntrain.config import ParamsError, load_params

    try:
        params = load_params(Path(root) / params_file)
        if variant is not None:
            params.variant(variant)
    except (ParamsError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if params.study.torch_threads:
        import torch

        torch.set_num_threads(params.study.torch_threads)


@app.command()
def prepare(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Generate (or load) and validate the train/val/test rows and the pretraining corpus."""
    _validated(params, root)
    from flows.stages import prepare_flow

    prepare_flow(params, root)


@app.command()
def pretrain(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Train the tiny base model from scratch on the synthetic corpus."""
    _validated(params, root)
    from flows.stages import pretrain_flow

    pretrain_flow(params, root)


@app.command()
def warmup(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """CE SFT warm-up from the base model (the shared start of all variants)."""
    _validated(params, root)
    from flows.stages import warmup_flow

    warmup_flow(params, root)


@app.command()
def train(variant: str = VariantOpt, params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Fine-tune one variant from the warm-up checkpoint."""
    _validated(params, root, variant)
    from flows.stages import train_flow

    train_flow(variant, params, root)


@app.command()
def rollouts(variant: str = VariantOpt, params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Sample M completions per test prompt into pools/<variant>.parquet."""
    _validated(params, root, variant)
    from flows.stages import rollouts_flow

    rollouts_flow(variant, params, root)


@app.command()
def evaluate(variant: str = VariantOpt, params: str = ParamsOpt, root: str = RootOpt) -> None:
    """pass@k and maj@k curves of a variant's pool."""
    _validated(params, root, variant)
    from flows.stages import evaluate_flow

    evaluate_flow(variant, params, root)


@app.command()
def compare(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """All variants side by side, paired against the baseline."""
    _validated(params, root)
    from flows.stages import compare_flow

    compare_flow(params, root)


@app.command()
def study(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """The whole study in one process (Prefect's `study` flow; no DVC caching)."""
    _validated(params, root)
    from flows.stages import study_flow

    study_flow(params, root)


@app.command("new-study-run")
def new_study_run(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Create a fresh MLflow parent run and print its id (for ALIGNTRAIN_PARENT_RUN_ID)."""
    _validated(params, root)
    from aligntrain import tracking
    from aligntrain.config import load_params

    p = load_params(Path(root) / params)
    sys.stdout.write(tracking.start_study_run(p.study.name, p.study.experiment, Path(root)) + "\n")


if __name__ == "__main__":
    app()
