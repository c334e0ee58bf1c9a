"""params.yaml validation: bad input stops with a message naming the key."""

from __future__ import annotations

import copy
import math
import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from aligntrain.config import ParamsError, load_params, parse_params, read_params_yaml

ROOT = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((ROOT / "params.yaml").read_text())


def _broken(edit) -> dict:
    raw = copy.deepcopy(RAW)
    edit(raw)
    return raw


def test_every_study_of_the_checkout_is_valid():
    params = load_params(ROOT / "params.yaml")
    assert params.variants["pass_at_n"].options.budget >= 1
    studies = sorted((ROOT / "pipelines").glob("*/params.yaml"))
    assert len(studies) >= 14, studies
    for study in studies:  # standin.yaml is an overlay, validated laid over its study (tests/test_standins.py)
        load_params(study)


def test_a_variant_with_its_own_group_size_keeps_the_shared_batch():
    """TEA Table 4's axis: n is the variant's, the completions a step (rl.batch_size) the study's."""
    raw = _broken(lambda r: r["variants"]["grpo_z"].update(num_generations=16))
    params = parse_params(raw)
    own, shared = params.rl_config("grpo_z"), params.rl_config("rloo")
    assert (own.num_generations, own.batch_size) == (16, RAW["rl"]["batch_size"])
    assert (shared.num_generations, shared.batch_size) == (RAW["rl"]["num_generations"], RAW["rl"]["batch_size"])
    assert own.rule.name == "grpo_z" and "num_generations" not in own.rule.model_dump()


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
        (lambda r: r["variants"]["pass_at_n"].update(budget=0), "variants.pass_at_n.budget"),
        (lambda r: r["train"].update(learning_rate=0.0), "train.learning_rate"),
        (lambda r: r["warmup"].update(learning_rate=-1e-3), "warmup.learning_rate"),
        (lambda r: r.pop("train"), "train"),
        (lambda r: r["variants"]["ce"].update(budget=4), "variants.ce"),  # CE takes no options
        (lambda r: r["rollouts"].update(top_p=1.5), "rollouts.top_p"),
        (lambda r: r["compare"].update(baseline="nope"), "compare.baseline"),
        (lambda r: r["compare"].update(baseline="grpo_z"), "compare.baseline"),  # in the catalog, not in study.run
        (
            lambda r: r["compare"].update(primary={"variant": "nope", "score": "pass@16"}),
            "compare.primary.variant 'nope'",
        ),
        (lambda r: r["compare"].update(primary={"variant": "ce", "score": "pass@16"}), "compares 'ce' with itself"),
        (
            lambda r: r["compare"].update(primary={"variant": "pass_at_n", "score": "pass@12"}),
            "'pass@12': the evaluated",
        ),
        (lambda r: r["compare"].update(primary={"variant": "pass_at_n", "score": "best@4"}), "compare.primary.score"),
        (lambda r: r["compare"].update(primary={"variant": "pass_at_n", "score": "pass@4", "split": "train"}), "split"),
        (
            lambda r: r["compare"].update(primary={"variant": "pass_at_n", "score": "pass@4", "k": 4}),
            "compare.primary.k",
        ),
        (lambda r: r["study"].update(run=["ce", "nope"]), "study.run names ['nope']"),
        (lambda r: r["study"].update(run=["ce", "ce"]), "study.run lists a variant twice"),
        (lambda r: r["study"].update(run=[]), "study.run"),
        (lambda r: r["study"].update(run=["ce"]), "diagnostics.oracle.variant 'warmup' is not in study.run"),
        (lambda r: r["diagnostics"]["oracle"].update(rules=["ce"]), "diagnostics.oracle.rules: 'ce' is not an RL"),
        (lambda r: r["diagnostics"]["oracle"].update(group_sizes=[1, 8]), "diagnostics.oracle.group_sizes"),
        (lambda r: r["study"].update(experiment=""), "study.experiment: must not be empty"),
        (lambda r: r["study"].update(name="  "), "study.name: must not be empty"),
        (
            lambda r: r["diagnostics"].update(budgets=[4, 4096]),
            f"diagnostics.budgets [4096] exceed rollouts.samples_per_prompt ({RAW['rollouts']['samples_per_prompt']})",
        ),
        (
            lambda r: r["diagnostics"]["oracle"].update(group_sizes=[8, 100_000]),
            "diagnostics.oracle.group_sizes [100000] exceeds diagnostics.oracle.samples_per_prompt",
        ),
        (
            lambda r: r["diagnostics"]["oracle"].update(budget=100_000),
            "diagnostics.oracle.budget [100000] exceeds diagnostics.oracle.samples_per_prompt",
        ),
        (
            lambda r: r["diagnostics"]["oracle"].update(prompts=100_000),
            f"diagnostics.oracle.prompts (100000) exceeds problem.test_size ({RAW['problem']['test_size']})",
        ),
        (lambda r: r["model"].update(hidden_size=130), "hidden_size"),
        (lambda r: r["problem"].update(typo_key=1), "problem.typo_key"),
        (lambda r: r["rl"].update(batch_size=30), "rl.batch_size (30) must be a multiple of rl.num_generations"),
        (
            lambda r: r["rl"].update(batch_size=400_000_000),
            f"rl.batch_size (400000000) asks for {400_000_000 // RAW['rl']['num_generations']} prompts a step "
            f"(batch_size / rl.num_generations), more than the {RAW['problem']['train_size']} of problem.train_size",
        ),
        (
            lambda r: (r["rl"].update(batch_size=8 * 201, prompt_split="test"), r["problem"].update(test_size=200)),
            "asks for 201 prompts a step (batch_size / rl.num_generations), more than the 200 of problem.test_size",
        ),
        (
            lambda r: r["variants"]["grpo_z"].update(num_generations=24),
            "rl.batch_size (64) must be a multiple of variants.grpo_z.num_generations (24)",
        ),
        (
            lambda r: (r["variants"]["grpo_z"].update(num_generations=2), r["problem"].update(train_size=31)),
            "asks for 32 prompts a step (batch_size / variants.grpo_z.num_generations), more than the 31",
        ),
        (lambda r: r["variants"]["grpo_z"].update(num_generations=1), "variants.grpo_z.num_generations"),
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
        (_add_variant("maj", objective="majority", budget=8, k=9), "variants.maj.k", "k must be <= budget"),
        (_add_variant("maj", objective="majority", budget=8, k=0), "variants.maj.k", "greater than or equal to 1"),
        (_add_variant("maj", objective="majority", budget=8, k=3, consensus=0.5), "variants.maj.consensus", "not both"),
        (_add_variant("maj", objective="majority", budget=8), "variants.maj.consensus", "give k (votes) or consensus"),
        (
            _add_variant("maj", objective="majority", budget=8, consensus=1.5),
            "variants.maj.consensus",
            "less than or equal",
        ),
        (_add_variant("maj", objective="majority", budget=0, k=1), "variants.maj.budget", "greater than or equal to 1"),
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
    raw = _broken(
        lambda r: r["variants"].update(
            maj_k={"objective": "majority", "budget": 8, "k": 3},
            maj_rho={"objective": "majority", "budget": 64, "consensus": 0.4},
            con={"objective": "contrastive"},
            dco={"objective": "pass_at_n", "budget": 16, "refill_eps": 0.01},
        )
    )
    variants = parse_params(raw).variants
    assert variants["maj_k"].options.threshold == 3
    assert variants["maj_rho"].options.threshold == 26  # CAT App. I.4
    assert (variants["con"].options.num_rivals, variants["con"].options.mix) == (4, 0.5)
    dco = variants["dco"].options
    assert (dco.refill_eps, dco.candidates_per_step(64)) == (0.01, 128)


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(ParamsError, match=r"known: \[.*'pass_at_n'"):
        parse_params(_broken(lambda r: r["variants"]["ce"].update(objective="cee")))


def _invoke(args: list[str]):
    """The ``aligntrain`` command line in this process (tests/test_pipeline.py runs it in a fresh one)."""
    from typer.testing import CliRunner

    from aligntrain.cli import app

    return CliRunner().invoke(app, args)


def test_cli_stops_before_any_work(tmp_path):
    """The stage command exits 2 with the key in its message, and writes nothing."""
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump(_broken(lambda r: r["variants"]["pass_at_n"].update(budget=-3)))
    )
    out = _invoke(["train", "--variant", "pass_at_n", "--root", str(tmp_path)])
    assert out.exit_code == 2
    assert "variants.pass_at_n.budget" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_unknown_variant_on_the_command_line(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(RAW))
    out = _invoke(["rollouts", "--variant", "nope", "--root", str(tmp_path)])
    assert out.exit_code == 2 and "unknown variant 'nope'" in out.stderr


# ---------------------------------------------------------------------------
# Nothing coerced silently: every float field finite, every int field strict.
# The fields are enumerated from the models, so a new field is covered at once.


def _leaf_types(annotation) -> set:
    """The plain types inside an annotation (through unions, lists, dicts, Annotated)."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation}
    # Skip Annotated's metadata (Strict()): keep types and generics.
    return set().union(*(_leaf_types(a) for a in args if isinstance(a, type) or typing.get_args(a)))


def _fields_of(model: type[BaseModel], cls: type) -> list[tuple[str, bool]]:
    """(dotted path, is a list) of every field of type ``cls``, nested models walked into."""
    found = []
    for name, info in model.model_fields.items():
        leaves = _leaf_types(info.annotation)
        nested = [t for t in leaves if isinstance(t, type) and issubclass(t, BaseModel)]
        if nested:
            found += [(f"{name}.{path}", is_list) for sub in nested for path, is_list in _fields_of(sub, cls)]
        elif cls in leaves:
            found.append((name, typing.get_origin(_without_none(info.annotation)) in (list, tuple)))
    return found


def _without_none(annotation):
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return (
        args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1 else annotation
    )


def _params_with(path: str, value) -> dict:
    raw = copy.deepcopy(RAW)
    *sections, key = path.split(".")
    section = raw
    for name in sections:
        section = section.setdefault(name, {})
    section[key] = value
    return raw


#: Options that make each objective's variant valid apart from the field under test.
_VALID_OPTIONS = {"majority": {"budget": 8, "k": 1}}


def _variant_with(objective: str, key: str, value) -> dict:
    options = {**_VALID_OPTIONS.get(objective, {}), key: value}
    if key == "consensus":
        options.pop("k", None)
    return _broken(lambda r: r["variants"].update(x={"objective": objective, **options}))


def _bad_value_cases(cls: type, bad_values: list) -> list:
    from aligntrain.config import Params
    from aligntrain.objectives import OBJECTIVES

    cases = []
    for path, is_list in _fields_of(Params, cls):
        cases += [pytest.param(_params_with, path, [v] if is_list else v, path, id=f"{path}={v}") for v in bad_values]
    for options in OBJECTIVES:
        objective = options.name
        for path, _ in _fields_of(options, cls):
            key = f"variants.x.{path}"
            cases += [
                pytest.param(
                    lambda *_, o=objective, p=path, v=v: _variant_with(o, p, v),
                    None,
                    None,
                    key,
                    id=f"{key}[{objective}]={v}",
                )
                for v in bad_values
            ]
    return cases


def _assert_refused(raw: dict, key: str, says: str) -> None:
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    line = next((line for line in str(err.value).splitlines() if f"{key}:" in line or f"{key}." in line), None)
    assert line is not None, f"{key} not named in:\n{err.value}"
    assert says in line


@pytest.mark.parametrize(("make", "path", "value", "key"), _bad_value_cases(float, [math.inf, -math.inf, math.nan]))
def test_every_float_field_must_be_finite(make, path, value, key):
    _assert_refused(make(path, value), key, "finite number")


@pytest.mark.parametrize(("make", "path", "value", "key"), _bad_value_cases(int, [True, False, 16.0]))
def test_every_int_field_refuses_booleans_and_floats(make, path, value, key):
    _assert_refused(make(path, value), key, "valid integer")


def test_the_enumeration_sees_the_known_fields():
    from aligntrain.config import Params

    floats = {path for path, _ in _fields_of(Params, float)}
    ints = {path for path, _ in _fields_of(Params, int)}
    assert {"train.learning_rate", "rl.temperature", "diagnostics.synthetic.tea_alpha"} <= floats
    assert {"study.seed", "problem.levels", "diagnostics.oracle.group_sizes", "rl.num_generations"} <= ints


@pytest.mark.parametrize(("make", "path", "value", "key"), _bad_value_cases(float, [True, False]))
def test_every_float_field_refuses_booleans(make, path, value, key):
    _assert_refused(make(path, value), key, "not a boolean")


def _rule_option_cases() -> list:
    """(rule, option, bad value, what the message says) for every typed option of every advantage rule."""
    from aligntrain.advantages import RULES

    cases = []
    for rule in RULES:
        for option, _ in _fields_of(rule, float):
            cases += [(rule.name, option, v, "finite number") for v in (math.inf, math.nan)]
            cases.append((rule.name, option, True, "not a boolean"))
        for option, is_list in _fields_of(rule, int):
            cases += [(rule.name, option, [v, v] if is_list else v, "valid integer") for v in (True, 16.0)]
    return cases


@pytest.mark.parametrize(("rule", "option", "value", "says"), _rule_option_cases())
def test_every_rule_option_is_typed_and_named(rule, option, value, says):
    from aligntrain.advantages import get_rule

    options = {"budget": 4} if "budget" in get_rule(rule).model_fields else {}
    raw = _broken(lambda r: r["variants"].update(x={"objective": "rl", "rule": rule, **options, option: value}))
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert f"variants.x: advantage rule '{rule}': option {option}" in str(err.value)
    assert says in str(err.value)


def test_rule_options_enumerated():
    cases = _rule_option_cases()
    assert {("tea", "alpha"), ("pkpo", "budget"), ("cat_majority", "threshold_ema")} <= {c[:2] for c in cases}


def test_rl_config_floats_finite_and_ints_strict():
    from aligntrain.config import RLConfig

    floats = [path for path, _ in _fields_of(RLConfig, float)]
    ints = [path for path, _ in _fields_of(RLConfig, int)]
    assert "temperature" in floats and "num_generations" in ints
    for field, value in [(f, v) for f in floats for v in (math.inf, math.nan)] + [(f, True) for f in ints]:
        with pytest.raises(ValidationError) as err:
            RLConfig(rule="rloo", **{field: value})
        assert err.value.errors()[0]["loc"] == (field,)


def test_a_boolean_count_names_the_key():
    _assert_refused(
        _broken(lambda r: r["variants"]["pass_at_n"].update(budget=True)), "variants.pass_at_n.budget", "integer"
    )


@pytest.mark.parametrize(
    ("levels", "says"),
    [([9], "problem 'arith' has levels [1, 2, 3, 4, 5], got [9]"), ([1, 1], "levels must not repeat")],
)
def test_levels_the_problem_does_not_have(tmp_path, levels, says):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_broken(lambda r: r["problem"].update(levels=levels))))
    with pytest.raises(ParamsError) as err:
        load_params(tmp_path / "params.yaml")
    assert f"problem.levels: {says}" in str(err.value)


def test_levels_follow_the_named_problem():
    from aligntrain.problems import get_problem

    hydro = yaml.safe_load((ROOT / "pipelines" / "hydro" / "params.yaml").read_text())
    hydro["problem"]["levels"] = [4]  # an arith level
    _assert_refused(hydro, "problem.levels", f"problem 'hydro' has levels {list(get_problem('hydro').levels)}")
    _assert_refused(_broken(lambda r: r["problem"].update(name="nope")), "problem.name", "unknown problem")


def test_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("study:\n  seed: 0\ntrain: {steps: 5, batch_size: 8\nwarmup: {}\n")
    with pytest.raises(ParamsError) as err:
        load_params(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:4:7: invalid YAML: ")
    path.write_text("study:\n\tseed: 0\n")
    with pytest.raises(ParamsError, match=rf"^{re.escape(str(path))}:2:1: invalid YAML: .*'\\t'"):
        load_params(path)


def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path):
    """PyYAML keeps the last of two equal keys; a variant written twice would silently lose the first."""
    path = tmp_path / "params.yaml"
    text = (ROOT / "params.yaml").read_text()
    path.write_text(text + "\nvariants:\n  ce:\n    objective: ce\n")
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("variants:"))
    last = len(text.splitlines()) + 2
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert str(err.value) == (
        f"{path}:{last}:1: invalid YAML: key 'variants' written twice, on lines {first} and {last}"
    )
    path.write_text("study:\n  seed: 0\n  seed: 1\n")
    with pytest.raises(ParamsError, match=r"params.yaml:3:3: invalid YAML: key 'seed' written twice, on lines 2 and 3"):
        load_params(path)
    path.write_text("a: {x: 1}\nb: {x: 2}\n")  # equal keys in different mappings are fine
    assert read_params_yaml(path) == {"a": {"x": 1}, "b": {"x": 2}}


def test_a_run_without_the_primarys_variants_keeps_it_untested():
    """An exploratory `dvc exp run -S study.run=[...]` that leaves out the endpoint's variant runs; the
    pages say the endpoint is not tested by it."""
    raw = copy.deepcopy(RAW)
    raw["study"]["run"] = ["warmup", "ce", "grpo_z"]
    params = parse_params(raw)
    assert params.compare.primary.variant == "pass_at_n"
    assert params.primary_not_run == ["pass_at_n"] and params.primary_endpoint is None
    assert parse_params(RAW).primary_endpoint == ("pass_at_n", "pass@64", "ce", "test")


def test_seed_replicates_name_their_variant_and_seed():
    raw = copy.deepcopy(RAW)
    raw["study"]["seeds"] = [3, 4]
    params = parse_params(raw)
    assert params.replicates_of("ce") == ["ce", "ce--s3", "ce--s4"]
    assert params.replicate_of("ce--s4") == ("ce", 4) and params.replicate_of("ce") == ("ce", 0)
    assert params.variant("pass_at_n--s3") is params.variants["pass_at_n"]
    assert params.for_replicate("ce--s3").study.seed == 3 and params.for_replicate("ce") is params
    with pytest.raises(ValueError, match=r"'ce--s9' is no replicate of this study: study.seeds is \[3, 4\]"):
        params.variant("ce--s9")


@pytest.mark.parametrize("seeds", [[1, 1], [0, 2], [-1]])
def test_seeds_must_be_new_and_distinct(seeds):
    raw = copy.deepcopy(RAW)
    raw["study"]["seeds"] = seeds
    with pytest.raises(ParamsError, match="study: seeds must be distinct seeds >= 0 other than study.seed"):
        parse_params(raw)


def test_a_variant_name_cannot_look_like_a_replicate():
    raw = copy.deepcopy(RAW)
    raw["variants"]["ce--s1"] = {"objective": "ce"}
    with pytest.raises(ParamsError, match="marks a seed replicate"):
        parse_params(raw)


def test_a_stage_trains_on_its_schedules_threads_else_the_studys():
    raw = copy.deepcopy(RAW)
    raw["study"]["torch_threads"] = 1
    for section in ("pretrain", "warmup", "train", "rl"):
        raw[section].pop("torch_threads", None)
    raw["pretrain"]["torch_threads"] = 2
    raw["rl"]["torch_threads"] = 3
    params = parse_params(raw)
    assert params.torch_threads("pretrain") == 2
    assert params.torch_threads("warmup") == 1  # unset: the study's
    assert params.torch_threads("train", "loo_pass_at_k") == 3  # an RL variant trains on rl
    assert params.torch_threads("train", "ce") == 1  # an SFT variant on train
    assert params.torch_threads("rollouts", "ce") == params.torch_threads("compare") == 1
    raw["warmup"]["torch_threads"] = 0  # 0 is torch's own default, not "unset"
    assert parse_params(raw).torch_threads("warmup") == 0


def test_hydros_table_4_variants_train_on_fewer_prompts_at_the_same_completions():
    """pipelines/hydro's tea_n16 and tea_n32 (TEA Table 4's group sizes): n of their own, rl.batch_size shared."""
    raw = yaml.safe_load((ROOT / "pipelines" / "hydro" / "params.yaml").read_text())
    raw["study"]["run"] = [*raw["study"]["run"], "tea_n16", "tea_n32"]
    params = parse_params(raw)
    batch = raw["rl"]["batch_size"]
    groups = {name: params.rl_config(name).num_generations for name in ("tea", "tea_n16", "tea_n32")}
    assert groups == {"tea": raw["rl"]["num_generations"], "tea_n16": 16, "tea_n32": 32}
    assert {name: batch // n for name, n in groups.items()} == {"tea": 8, "tea_n16": 4, "tea_n32": 2}
    assert all(params.rl_config(name).batch_size == batch for name in groups)


def test_the_reports_setup_names_each_variant_with_its_own_group_size():
    from aligntrain.stages.report import setup_section

    raw = _broken(lambda r: r["variants"]["rloo"].update(num_generations=16))
    raw["study"]["run"] = ["warmup", "ce", "rloo", "loo_pass_at_k"]
    text = "\n".join(setup_section(parse_params(raw)))
    n, batch = RAW["rl"]["num_generations"], RAW["rl"]["batch_size"]
    assert f"({batch // n} prompts × n = {n})" in text
    assert f" `rloo`: n = 16 ({batch // 16} prompts a step)." in text and "`loo_pass_at_k`: n =" not in text
