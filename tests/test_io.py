from __future__ import annotations

import os
import stat

import pytest

from aligntrain.io import atomic_directory, atomic_path, fingerprint, fsync_tree, read_json, write_json, write_text


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


@pytest.fixture
def restore_umask():
    """The test may change the process umask; it is restored afterwards."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield
    os.umask(previous)


@pytest.mark.parametrize(
    ("mask", "file_mode", "dir_mode"),
    [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)],
    ids=["umask-022", "umask-077", "umask-002"],
)
def test_outputs_get_the_users_permissions(tmp_path, restore_umask, mask, file_mode, dir_mode):
    """0666 / 0777 less the umask, like open() and mkdir(); not tempfile's private 0600 / 0700."""
    os.umask(mask)
    write_json(tmp_path / "out.json", {"a": 1})
    write_text(tmp_path / "deep" / "out.txt", "x")
    with atomic_directory(tmp_path / "model") as tmp:
        (tmp / "weights").write_text("w")
    with atomic_directory(tmp_path / "model") as tmp:  # replacing an existing directory
        (tmp / "weights").write_text("w")
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "deep" / "out.txt").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == dir_mode
    assert stat.S_IMODE((tmp_path / "model" / "weights").stat().st_mode) == file_mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "model", "out.json"]


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_a_saved_model_gets_the_users_permissions(tmp_path, restore_umask, mask, file_mode, dir_mode, tiny_model):
    """safetensors writes model.safetensors 0600; the saved folder follows the umask all the same."""
    from aligntrain.models import save_model_and_tokenizer

    os.umask(mask)
    model, tokenizer = tiny_model
    save_model_and_tokenizer(model, tokenizer, tmp_path / "saved")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "saved").iterdir()}
    assert modes["model.safetensors"] == file_mode and set(modes.values()) == {file_mode}, modes
    assert stat.S_IMODE((tmp_path / "saved").stat().st_mode) == dir_mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"], "no probe or temporary left"


def test_fsync_tree_syncs_every_file_and_folder(tmp_path, monkeypatch):
    """What a checkpoint's rename publishes is on disk first: each file, and each folder's entries."""
    (tmp_path / "ck" / "sub").mkdir(parents=True)
    for name in ("ck/model.safetensors", "ck/sub/rng_state.pth"):
        (tmp_path / name).write_bytes(b"x")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    fsync_tree(tmp_path / "ck")
    expected = ["ck", "ck/model.safetensors", "ck/sub", "ck/sub/rng_state.pth"]
    assert sorted(synced) == sorted(str((tmp_path / p).resolve()) for p in expected)
