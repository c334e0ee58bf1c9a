"""params.yaml validation: bad input stops with a message naming the key."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aligntrain.config import ParamsError, load_params, parse_params

ROOT = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((ROOT / "params.yaml").read_text())


def _broken(edit) -> dict:
    raw = copy.deepcopy(RAW)
    edit(raw)
    return raw


def test_default_and_smoke_profiles_are_valid():
    params = load_params(ROOT / "params.yaml")
    assert params.variants["pass_at_n"].options.n >= 1
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        load_params(profile)


def test_study_run_selects_from_the_catalog():
    params = parse_params(_broken(lambda r: r["study"].update(run=["warmup", "ce", "rloo"])))
    assert params.run_variants == ["warmup", "ce", "rloo"]
    assert len(params.variants) > 2, "the rest of the catalog is still validated and available"
    everything = parse_params(_broken(lambda r: r["study"].pop("run")))
    assert everything.run_variants == list(RAW["variants"])


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda r: r["variants"]["pass_at_n"].update(objective="no_such_loss"), "variants.pass_at_n"),
        (lambda r: r["variants"]["pass_at_n"].update(n=0), "variants.pass_at_n.n"),
        (lambda r: r["train"].update(learning_rate=0.0), "train.learning_rate"),
        (lambda r: r["warmup"].update(learning_rate=-1e-3), "warmup.learning_rate"),
        (lambda r: r.pop("train"), "train"),
        (lambda r: r["variants"]["ce"].update(n=4), "variants.ce"),  # CE takes no options
        (lambda r: r["rollouts"].update(top_p=1.5), "rollouts.top_p"),
        (lambda r: r["compare"].update(baseline="nope"), "compare.baseline"),
        (lambda r: r["compare"].update(baseline="rloo"), "compare.baseline"),  # in the catalog, not in study.run
        (lambda r: r["study"].update(run=["ce", "nope"]), "study.run names ['nope']"),
        (lambda r: r["study"].update(run=["ce", "ce"]), "study.run lists a variant twice"),
        (lambda r: r["study"].update(run=[]), "study.run"),
        (lambda r: r["study"].update(run=["ce"]), "diagnostics.oracle.variant 'warmup' is not in study.run"),
        (lambda r: r["diagnostics"]["oracle"].update(rules=["ce"]), "diagnostics.oracle.rules: 'ce' is not an RL"),
        (lambda r: r["diagnostics"]["oracle"].update(group_sizes=[1, 8]), "diagnostics.oracle.group_sizes"),
        (lambda r: r["model"].update(hidden_size=130), "hidden_size"),
        (lambda r: r["problem"].update(typo_key=1), "problem.typo_key"),
    ],
)
def test_invalid_parameters_name_the_key(edit, key):
    with pytest.raises(ParamsError) as err:
        parse_params(_broken(edit))
    assert key in str(err.value)


def _add_variant(name: str, **variant):
    return lambda r: r["variants"].update({name: variant})


def _pass_at_n(**options):
    return lambda r: r["variants"]["pass_at_n"].update(options)


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (_add_variant("maj", objective="majority", n=8, k=9), "variants.maj.k", "k must be <= n"),
        (_add_variant("maj", objective="majority", n=8, k=0), "variants.maj.k", "greater than or equal to 1"),
        (_add_variant("maj", objective="majority", n=8, k=3, consensus=0.5), "variants.maj.consensus", "not both"),
        (_add_variant("maj", objective="majority", n=8), "variants.maj.consensus", "give k (votes) or consensus"),
        (_add_variant("maj", objective="majority", n=8, consensus=1.5), "variants.maj.consensus", "less than or equal"),
        (_add_variant("maj", objective="majority", n=0, k=1), "variants.maj.n", "greater than or equal to 1"),
        (_add_variant("con", objective="contrastive", num_rivals=0), "variants.con.num_rivals", "greater than or"),
        (_add_variant("con", objective="contrastive", mix=1.5), "variants.con.mix", "less than or equal to 1"),
        (_pass_at_n(refill_eps=-0.1), "variants.pass_at_n.refill_eps", "greater than or equal to 0"),
        (_pass_at_n(refill_factor=2), "variants.pass_at_n.refill_factor", "only with refill_eps > 0"),
        (_pass_at_n(refill_eps=0.01, refill_factor=0), "variants.pass_at_n.refill_factor", "greater than 0"),
    ],
)
def test_strategy_sft_options_name_the_key(edit, key, says):
    with pytest.raises(ParamsError) as err:
        parse_params(_broken(edit))
    line = next(line for line in str(err.value).splitlines() if key + ":" in line)
    assert says in line


def test_strategy_sft_variants_parse():
    raw = _broken(lambda r: r["variants"].update(
        maj_k={"objective": "majority", "n": 8, "k": 3},
        maj_rho={"objective": "majority", "n": 64, "consensus": 0.4},
        con={"objective": "contrastive"},
        dco={"objective": "pass_at_n", "n": 16, "refill_eps": 0.01},
    ))
    variants = parse_params(raw).variants
    assert variants["maj_k"].options.threshold == 3
    assert variants["maj_rho"].options.threshold == 26  # 000 App. I.4
    assert (variants["con"].options.num_rivals, variants["con"].options.mix) == (4, 0.5)
    dco = variants["dco"].options
    assert (dco.refill_eps, dco.candidates_per_step(64)) == (0.01, 128)


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(ParamsError, match=r"known: \[.*'pass_at_n'"):
        parse_params(_broken(lambda r: r["variants"]["ce"].update(objective="cee")))


def test_cli_stops_before_any_work(tmp_path):
    """The stage command exits 2 with the key in its message, and writes nothing."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_broken(lambda r: r["variants"]["pass_at_n"].update(n=-3))))
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "train", "--variant", "pass_at_n", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 2
    assert "variants.pass_at_n.n" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_unknown_variant_on_the_command_line(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(RAW))
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "rollouts", "--variant", "nope", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 2 and "unknown variant 'nope'" in out.stderr
