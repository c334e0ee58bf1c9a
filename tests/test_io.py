from __future__ import annotations

import pytest

from aligntrain.io import atomic_directory, atomic_path, fingerprint, read_json, write_json


def test_atomic_path_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert read_json(target) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_directory_replaces_whole(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "b").write_text("2")
            raise RuntimeError
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    with atomic_directory(target) as tmp:
        (tmp / "c").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_fingerprint_is_stable_and_sensitive():
    assert fingerprint({"a": 1, "b": [2]}) == fingerprint({"b": [2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
