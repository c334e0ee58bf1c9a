"""scripts/study_tables.py: per-seed and per-level means of every variant and ensemble, against hand values."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _table(counts: list[int], n: int = 32) -> pd.DataFrame:
    """Per-prompt table of four prompts (levels 2, 2, 3, 5): pass@1 = c/n and pass@32 = [c > 0] when n = 32."""
    table = pd.DataFrame({"prompt_id": ["a", "b", "c", "d"], "level": [2, 2, 3, 5], "num_correct": counts})
    table["pass@1"] = [c / n for c in counts]
    table["pass@32"] = [float(c > 0) for c in counts]
    return table


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "dco_step"
    folder.mkdir()
    shutil.copy(ROOT / "pipelines" / "dco_step" / "params.yaml", folder / "params.yaml")
    out = folder / "metrics" / "per_prompt"  # the test split's tables (aligntrain.paths.StudyPaths.per_prompt)
    out.mkdir(parents=True)
    counts = {  # variant -> seed 0, 1, 2
        "ce": [[0, 4, 8, 0], [0, 0, 8, 16], [32, 0, 0, 0]],
        "dco_whole": [[1, 1, 1, 1]] * 3,
        "dco_step_2": [[0, 0, 0, 0]] * 3,
        "dco_step_4": [[32, 0, 0, 0]] * 3,
        "dco_step_8": [[0, 0, 0, 32]] * 3,
    }
    for variant, per_seed in counts.items():
        for name, c in zip([variant, f"{variant}--s1", f"{variant}--s2"], per_seed, strict=True):
            _table(c).to_parquet(out / f"{name}.parquet")
    return folder


def test_tables_are_the_hand_computed_means(study):
    tables = runpy.run_path(str(ROOT / "scripts" / "study_tables.py"))["tables"]
    per_seed, per_level = tables(study)
    ce = per_seed[per_seed.variant == "ce"].set_index("seed")
    assert ce["pass@1"].tolist() == [12 / 32 / 4, 24 / 32 / 4, 32 / 32 / 4]
    assert ce["pass@32"].tolist() == [0.5, 0.5, 0.25]
    ce_level = per_level[per_level.variant == "ce"].set_index("level")
    # level 2: prompts a, b over three seeds: (0 + 4 + 0 + 0 + 32 + 0) / 32 / 6
    assert ce_level.loc[2, "pass@1"] == pytest.approx(36 / 32 / 6, abs=1e-15)
    assert ce_level.loc[2, "pass@32"] == pytest.approx(2 / 6, abs=1e-15)
    assert ce_level.loc[5, "pass@32"] == pytest.approx(1 / 3, abs=1e-15)
    # the ensemble of dco_step_2/4/8: at k = 32 each member draws 11, 11, 10; a member with c = 32 proves the prompt
    ensemble = per_level[per_level.variant == "dco_step_ensemble"].set_index("level")
    assert ensemble["pass@32"].to_dict() == {2: 0.5, 3: 0.0, 5: 1.0}
    # at k = 1 only the first member (dco_step_2, which proves nothing) draws
    assert ensemble["pass@1"].to_dict() == {2: 0.0, 3: 0.0, 5: 0.0}
    assert sorted(per_seed.variant.unique()) == sorted(
        [*[f"dco_step_{n}" for n in (2, 4, 8)], "ce", "dco_whole", "dco_step_ensemble"]
    )
