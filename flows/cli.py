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
def diagnose(variant: str = VariantOpt, params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Diagnostics of one variant's pool and model: diagonal efficiency, QQ tails, greedy confidence."""
    _validated(params, root, variant)
    from flows.stages import diagnose_flow

    diagnose_flow(variant, params, root)


@app.command("oracle-gradient")
def oracle_gradient(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """Cosine of each RL rule's group gradient with the oracle gradient of the target strategy."""
    _validated(params, root)
    from flows.stages import oracle_gradient_flow

    oracle_gradient_flow(params, root)


@app.command()
def synthetic(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """The synthetic checks with known answers: Tang bandit, TEA Gaussian tail."""
    _validated(params, root)
    from flows.stages import synthetic_flow

    synthetic_flow(params, root)


@app.command()
def report(params: str = ParamsOpt, root: str = RootOpt) -> None:
    """reports/index.md: the study's setup, scaling curves, comparisons and diagnostics on one page."""
    _validated(params, root)
    from flows.stages import report_flow

    report_flow(params, root)


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
