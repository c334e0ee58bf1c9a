"""The docs agree with the code: the rules table matches the registry; nothing points outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from aligntrain.advantages import RULES

ROOT = Path(__file__).resolve().parents[1]
ADVANTAGES_MD = ROOT / "docs" / "advantages.md"
BEGIN, END = "<!-- rules table", "<!-- end rules table -->"


def _rules_table() -> dict[str, list[str]]:
    """Rule name -> the cells of its row in docs/advantages.md's table of rules."""
    text = ADVANTAGES_MD.read_text()
    table = text[text.index(BEGIN) : text.index(END)].splitlines()[1:]
    header, _, *rows = table
    assert [c.strip() for c in header.strip("|").split("|")][:6] == [
        "rule",
        "family",
        "options (defaults)",
        "unbiased for",
        "binary rewards only",
        "context needed",
    ]
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows if row.strip()]
    return {row[0].strip("`"): row for row in cells}


def _documented_options(cell: str) -> dict[str, str]:
    """``budget`` (required, ...), ``clip``=3.0 -> {"budget": "required", "clip": "3.0"}."""
    found = {}
    for match in re.finditer(r"`(\w+)`(?:=(\"[^\"]*\"|[^,\s]+)| \((required)[^)]*\))?", cell):
        name, default, required = match.groups()
        found[name] = "required" if required else (default or "").strip('"')
    return found


def test_the_rules_table_lists_every_rule_once():
    assert sorted(_rules_table()) == RULES.names()


@pytest.mark.parametrize("rule", RULES.names())
def test_each_rules_row_matches_its_registry_entry(rule):
    spec = RULES.get(rule)
    _, _, options, unbiased, binary, context = _rules_table()[rule][:6]
    documented = _documented_options(options) if options != "—" else {}
    assert set(documented) == set(spec.model_fields), (rule, documented)
    for name, field in spec.model_fields.items():
        default = "required" if field.is_required() else str(field.get_default())
        assert documented[name] == default, (rule, name, documented[name], default)
    assert binary == ("yes" if spec.binary_rewards_only else "no")
    assert (spec.unbiased_for is not None) == (not unbiased.startswith("—")), (rule, unbiased)
    for key in spec.requires:
        assert f"`{key}`" in context, (rule, key)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    suffixes = {".py", ".md", ".yaml", ".toml", ".sh", ".txt", ".cfg"}
    return [ROOT / p for p in listed.splitlines() if Path(p).suffix in suffixes or Path(p).name == "Makefile"]


def test_nothing_cites_a_file_outside_the_repository():
    """A user who clones the project has docs/math.md, not the specification it was written from."""
    outside = re.compile(r"FORMULAS|\.\./shared|/work/|\bseeds/")
    offenders = []
    for path in _tracked_text_files():
        if path.name == "test_docs.py" or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if outside.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_papers_are_cited_by_name_not_by_seed_number():
    seed_number = re.compile(r"\b00[0-4] (?:eqs?\.|App\.|§|Sec\.|Lemma|Table|Fig\.|Theorem|Alg\.)")
    offenders = []
    for path in _tracked_text_files():
        if path.name == "test_docs.py" or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if seed_number.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_aligntrain_list_shows_every_registry_with_typed_options():
    from typer.testing import CliRunner

    from aligntrain.cli import app
    from aligntrain.objectives import OBJECTIVES
    from aligntrain.problems import PROBLEMS

    runner = CliRunner()
    for kind, registry in (("rules", RULES), ("objectives", OBJECTIVES), ("problems", PROBLEMS)):
        out = runner.invoke(app, ["list", kind])
        assert out.exit_code == 0, out.output
        assert [line.split()[0] for line in out.output.splitlines() if not line.startswith(" ")] == registry.names()
    pkpo = runner.invoke(app, ["list", "rules", "pkpo"]).output
    assert "budget" in pkpo and "int, ≥ 1; default required" in pkpo
    unknown = runner.invoke(app, ["list", "rules", "nope"])
    assert unknown.exit_code == 2 and "unknown advantage rule 'nope'" in unknown.output


def test_the_wheel_installs_one_top_level_package(tmp_path):
    """flows/ and tasks/ are folders of the repository, loaded by path; the wheel must not shadow anyone's."""
    import sys
    import zipfile

    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("aligntrain-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"aligntrain"}
