"""scripts/run_standin.py checks its inputs before touching a destination, and never empties a folder it did
not make (it holds .aligntrain-scratch). A study run in place: tests/test_study_folder.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = ".aligntrain-scratch"


def _standin(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """scripts/run_standin.py in this process (its imports are already loaded): its exit status and stderr."""
    import runpy

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["run_standin.py", *args])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "scripts" / "run_standin.py"), run_name="__main__")
    code = done.value.code
    err = capsys.readouterr().err + (code if isinstance(code, str) else "")
    return (1 if isinstance(code, str) else code), err


def _user_folder(tmp_path: Path) -> Path:
    dest = tmp_path / "results"
    (dest / "checkout").mkdir(parents=True)
    (dest / "notes.md").write_text("an earlier run's results")
    return dest


def test_run_standin_refuses_a_folder_it_did_not_make(tmp_path, monkeypatch, capsys):
    dest = _user_folder(tmp_path)
    code, err = _standin(monkeypatch, capsys, "pipelines/tang_math", str(dest))
    assert code != 0
    assert f"error: {dest} holds files that scripts/run_standin.py did not write (no {MARK})" in err
    assert (dest / "notes.md").read_text() == "an earlier run's results" and (dest / "checkout").is_dir()


def test_run_standin_checks_its_variants_before_touching_the_destination(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "earlier"
    dest.mkdir()
    (dest / MARK).write_text("")
    (dest / "kept").write_text("")
    code, err = _standin(monkeypatch, capsys, "pipelines/tang_math", str(dest), "--micro", "--run", "loo_pass_at_kk")
    assert code == 2 and "--run: study.run: ['loo_pass_at_kk'] not in the catalog" in err
    assert (dest / "kept").exists()


def test_restrict_run_keeps_the_baseline_and_oracle_in_the_run():
    from aligntrain.standins import restrict_run

    params = {
        "variants": {"ce": {}, "a": {}, "b": {}},
        "compare": {"baseline": "ce"},
        "diagnostics": {"oracle": {"variant": "a", "prompts": 3}},
    }
    restricted = restrict_run(params, ["b", "a"])
    assert restricted["study"]["run"] == ["b", "a"]
    assert restricted["compare"]["baseline"] == "b", "ce is not run: the first variant of the run"
    assert restricted["diagnostics"]["oracle"] == {"variant": "a", "prompts": 3}, "a is run: kept"
    assert params["compare"]["baseline"] == "ce", "the input is not modified"
    with pytest.raises(ValueError, match=r"study.run: \['z'\] not in the catalog \['a', 'b', 'ce'\]"):
        restrict_run(params, ["z"])
