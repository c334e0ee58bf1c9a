"""The generated problems' data is pinned (aligntrain.problems.splits; arith, hydro, code).

A study's data is a function of the code: a refactoring of the split hash, the
rejection loop or a row builder that changes one byte of one row changes every
result downstream. Each hash below is the SHA-256 of the JSON (sorted keys) of
``generate_splits`` at the sizes of a committed study, recorded before the split
code moved into ``aligntrain/problems/splits.py``. A deliberate change of the data
(a new salt, a new row format) updates the hash here and says so in its commit.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from aligntrain.problems import arith, code, hydro

PINNED = {
    # params.yaml: the default study
    "arith": (
        arith,
        {"train": 4000, "validation": 200, "test": 200},
        (1, 2, 3, 4, 5),
        "80d70c7d0b225f1238e7c876cf0d1d9747159ae0d5f21ed732359251c978d9c8",
    ),
    # pipelines/hydro/params.yaml before 2026-11-27 (levels 1 and 2)
    "hydro": (
        hydro,
        {"train": 4000, "validation": 200, "test": 100},
        (1, 2),
        "6511baef2651a6209167a416daca127ba53ea8dd427f0db4e3b548574b4482f1",
    ),
    # pipelines/hydro/params.yaml: the complement task and the valley family (distinct test tasks)
    "hydro-2-3": (
        hydro,
        {"train": 4000, "validation": 200, "test": 100},
        (2, 3),
        "e1e0ee2105284c5f2fb1948239765deac612853f3a95fdea62f4bc4c5ba184a7",
    ),
    # pipelines/code_smoke
    "code": (
        code,
        {"train": 256, "validation": 32, "test": 16},
        (1, 2, 3),
        "a9fbdfc7e092aade6c1d03fdce2098e7957bf7f21bf47c1b18a2c22fe6849b63",
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_generated_splits_match_their_pinned_hash(name):
    module, sizes, levels, expected = PINNED[name]
    rows = module.generate_splits(sizes, levels, seed=0)
    assert {split: len(rows[split]) for split in sizes} == sizes
    assert hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest() == expected
