"""Where each stage reads and writes, relative to the study directory (DESIGN: the data path).

dvc.yaml names the same paths; this is the one place the code spells them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_ROOT_ENV = "ALIGNTRAIN_CHECKPOINT_ROOT"


@dataclass(frozen=True)
class StudyPaths:
    root: Path = Path(".")

    def split(self, name: str) -> Path:
        """Prepared rows of one split: ``data/{train,validation,test}.parquet``."""
        return self.root / "data" / f"{name}.parquet"

    @property
    def pretrain_corpus(self) -> Path:
        return self.root / "data" / "pretrain_corpus.parquet"

    @property
    def base_model(self) -> Path:
        return self.root / "models" / "base"

    @property
    def warmup_model(self) -> Path:
        return self.root / "models" / "warmup"

    def variant_model(self, variant: str) -> Path:
        return self.root / "models" / "variants" / variant

    def checkpoints(self, stage: str) -> Path:
        """Resumable checkpoints of a training stage (git- and DVC-ignored scratch).

        Under ``$ALIGNTRAIN_CHECKPOINT_ROOT`` when set: storage shared by the machines
        that may run the stage, so a retry on another agent (or in another workspace)
        resumes where the killed run stopped.
        """
        shared = os.environ.get(CHECKPOINT_ROOT_ENV)
        return (Path(shared) if shared else self.root / "checkpoints") / stage

    # A held-out split's files sit in a folder of the split's name beside the test split's.
    def pool(self, variant: str, split: str = "test") -> Path:
        return self.root / "pools" / _held_out(split) / f"{variant}.parquet"

    def metrics(self, variant: str, split: str = "test") -> Path:
        return self.root / "metrics" / _held_out(split) / f"{variant}.json"

    def per_prompt(self, variant: str, split: str = "test") -> Path:
        return self.root / "metrics" / "per_prompt" / _held_out(split) / f"{variant}.parquet"

    def curve(self, variant: str) -> Path:
        """Scaling curve for ``dvc plots``: one row per k."""
        return self.root / "plots" / "curves" / f"{variant}.csv"

    @property
    def monitor_warmup(self) -> Path:
        """The warmup stage's training-time monitor (long CSV for ``dvc plots``; header only when off)."""
        return self.root / "plots" / "monitor" / "warmup.csv"

    def monitor_variant(self, variant: str) -> Path:
        """train@variant's training-time monitor (a folder apart: the variant ``warmup`` is not the warmup stage)."""
        return self.root / "plots" / "monitor" / "variants" / f"{variant}.csv"

    def stage_metrics(self, stage: str) -> Path:
        return self.root / "metrics" / "stages" / f"{stage}.json"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    def diagnostics(self, name: str) -> Path:
        """Tables of one diagnostic stage: ``diagnoses/<variant>``, ``/oracle_gradient`` or ``/synthetic``."""
        return self.root / "diagnoses" / name

    def diagnostics_metrics(self, name: str) -> Path:
        """Headline numbers of one diagnostic stage, for ``dvc metrics`` and MLflow."""
        return self.root / "metrics" / "diagnostics" / f"{name}.json"

    @property
    def figures(self) -> Path:
        """The report's figures (written by the report stage only)."""
        return self.reports / "figures"


def _held_out(split: str) -> str:
    """ "" for the test split (its files keep their places), the split's name for another."""
    return "" if split == "test" else split
