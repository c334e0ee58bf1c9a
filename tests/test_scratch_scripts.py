"""scripts/run_profile.sh and scripts/run_standin.py check their inputs before touching a destination, and
never empty a folder they did not make (it holds .aligntrain-scratch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = ".aligntrain-scratch"


def _profile(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [str(ROOT / "scripts" / "run_profile.sh"), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


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


def test_a_mistyped_profile_is_refused_and_the_destination_kept(tmp_path):
    dest = tmp_path / "earlier"
    dest.mkdir()
    (dest / MARK).write_text("")
    (dest / "metrics.json").write_text("{}")
    out = _profile("profiles/smok.yaml", str(dest), "--plain")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: profile profiles/smok.yaml: no such file; nothing was changed"
    assert (dest / "metrics.json").read_text() == "{}"


def test_run_profile_refuses_a_folder_it_did_not_make(tmp_path):
    dest = _user_folder(tmp_path)
    out = _profile("profiles/smoke.yaml", str(dest), "--plain")
    assert out.returncode == 2
    assert f"error: {dest} holds files that scripts/run_profile.sh did not write (no {MARK})" in out.stderr
    assert "Nothing was deleted." in out.stderr
    assert (dest / "notes.md").read_text() == "an earlier run's results" and (dest / "checkout").is_dir()


@pytest.mark.parametrize("args", [["profiles/smoke.yaml"], ["profiles/smoke.yaml", "x", "--flow"]])
def test_run_profile_refuses_bad_arguments(tmp_path, args):
    if len(args) == 3:
        args[1] = str(tmp_path / "new")
    out = _profile(*args)
    assert out.returncode == 2 and ("usage:" in out.stderr or "the third argument is --plain" in out.stderr)
    assert not (tmp_path / "new").exists()


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
