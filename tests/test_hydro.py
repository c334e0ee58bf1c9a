"""The hydro problem: reward formulas, parsing, splits, corpus law, rows, parquet, registry.

Rewards are checked against docs/math.md §6 restated here and evaluated
independently: exact rational exponents (``fractions.Fraction``) through
50-digit ``decimal.Decimal`` exponentials, on sequences built with a known
number of hydrophobic residues; band edges are placed exactly on rationals.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aligntrain.problems import PROBLEMS, Problem, get_problem
from aligntrain.problems.hydro import (
    HydroProblem,
    complement_reward,
    generate_split,
    generate_splits,
    hydrophobicity,
    load_rows,
    make_row,
    parse_completion,
    partition_of,
    pretrain_corpus,
    save_rows,
    validate_row,
    valley_reward,
)

torch.set_num_threads(1)

RESIDUES = "ACDEFGHIKLMNPQRSTVWY"  # restated by hand
WATER_LOVING = "CDEGHKNPQRST"  # the 12 residues outside {A, I, L, M, F, W, Y, V}
OIL_LOVING = "AILMFWYV"


def sequence_with(hydrophobic: int, length: int) -> str:
    """A sequence of ``length`` residues, ``hydrophobic`` of them hydrophobic, classes interleaved."""
    oil = (OIL_LOVING * length)[:hydrophobic]
    water = (WATER_LOVING * length)[: length - hydrophobic]
    return "".join(a + b for a, b in zip(oil, water)) + oil[len(water) :] + water[len(oil) :]


def dexp(x: Fraction) -> Decimal:
    with decimal.localcontext() as context:
        context.prec = 50
        return (Decimal(x.numerator) / Decimal(x.denominator)).exp()


def valley_reference(hydrophobic: int, length: int, jackpot: Fraction = Fraction(3, 4)) -> Decimal:
    """docs/math.md §6 valley reward at h = hydrophobic/length, jackpot centre j, 50 digits."""
    if length < 10:
        return Decimal(-5)
    h = Fraction(hydrophobic, length)
    penalty = 2 if Fraction(45, 100) < h < jackpot - Fraction(15, 100) else 0
    trap = 4 * dexp(-((h - Fraction(35, 100)) ** 2) / Fraction(5, 100))
    peak = 12 * dexp(-((h - jackpot) ** 2) / Fraction(15, 1000))
    return trap + peak - penalty


def complement_reference(hydrophobic: int, length: int, h_in: Fraction) -> Decimal:
    """docs/math.md §6 conditional reward, 50 digits."""
    if length < 5:
        return Decimal(-5)
    h = Fraction(hydrophobic, length)
    copies = abs(h - h_in) < Fraction(1, 10) and abs(h_in - Fraction(1, 2)) > Fraction(1, 10)
    return 10 * dexp(-((h - (1 - h_in)) ** 2) / Fraction(5, 100)) - (2 if copies else 0)


def close(value: float, reference: Decimal) -> bool:
    return math.isclose(value, float(reference), rel_tol=1e-12, abs_tol=1e-12)


@pytest.fixture(scope="module")
def splits():
    return generate_splits({"train": 400, "validation": 100, "test": 100}, levels=(1, 2), seed=0)


@pytest.fixture(scope="module")
def problem():
    return get_problem("hydro")


# ---------------------------------------------------------------------------
# Reward formulas


def test_sequence_builder_and_hydrophobicity():
    for hydrophobic, length in [(0, 20), (7, 20), (20, 20), (27, 60), (1, 1)]:
        sequence = sequence_with(hydrophobic, length)
        assert len(sequence) == length and sum(c in OIL_LOVING for c in sequence) == hydrophobic
        assert hydrophobicity(sequence) == Fraction(hydrophobic, length)
    assert hydrophobicity("AILMFWYV" + WATER_LOVING) == Fraction(8, 20)
    for bad in ["", "AILx", "ail", "AIL\n"]:
        with pytest.raises(ValueError, match="sequence"):
            hydrophobicity(bad)


@pytest.mark.parametrize(
    "hydrophobic, length",
    [
        (0, 20),
        (7, 20),
        (9, 20),
        (10, 20),
        (11, 20),
        (12, 20),
        (13, 20),
        (15, 20),
        (20, 20),
        (27, 60),
        (28, 60),
        (35, 60),
        (36, 60),
        (66, 100),
        (67, 100),
        (9, 9),
        (0, 10),
        (5, 10),
        (0, 0),
    ],
)
def test_valley_reward_matches_formula(hydrophobic, length):
    assert close(valley_reward(sequence_with(hydrophobic, length)), valley_reference(hydrophobic, length))


def test_valley_reward_hand_values_band_edges_and_short_floor():
    # h = 0.75: 12 + 4 e^{-3.2}; h = 0.35: 4 + 12 e^{-32/3} (hand-evaluated)
    assert valley_reward(sequence_with(15, 20)) == pytest.approx(12.163048816, abs=1e-8)
    assert valley_reward(sequence_with(7, 20)) == pytest.approx(4.000279709, abs=1e-8)

    def gaussians(h: float) -> float:
        return 4 * math.exp(-((h - 0.35) ** 2) / 0.05) + 12 * math.exp(-((h - 0.75) ** 2) / 0.015)

    # open band 0.45 < h < 0.60: edges unpenalised, inside -2
    assert valley_reward(sequence_with(9, 20)) == pytest.approx(gaussians(0.45), abs=1e-12)
    assert valley_reward(sequence_with(27, 60)) == pytest.approx(gaussians(0.45), abs=1e-12)
    assert valley_reward(sequence_with(12, 20)) == pytest.approx(gaussians(0.60), abs=1e-12)
    assert valley_reward(sequence_with(36, 60)) == pytest.approx(gaussians(0.60), abs=1e-12)
    assert valley_reward(sequence_with(10, 20)) == pytest.approx(gaussians(0.5) - 2, abs=1e-12)
    assert valley_reward(sequence_with(28, 60)) == pytest.approx(gaussians(28 / 60) - 2, abs=1e-12)
    # length < 10 is -5 whatever h; length 10 is scored
    assert valley_reward(sequence_with(7, 9)) == -5.0
    assert valley_reward("") == -5.0
    assert valley_reward(sequence_with(7, 10)) == pytest.approx(gaussians(0.7), abs=1e-12)


@pytest.mark.parametrize("jackpot", [Fraction(65, 100), Fraction(74312, 10**5), Fraction(80, 100), Fraction(90, 100)])
@pytest.mark.parametrize(
    "hydrophobic, length",
    [(0, 20), (7, 20), (10, 20), (12, 20), (13, 20), (15, 20), (17, 20), (20, 20), (44, 60), (0, 9)],
)
def test_valley_family_reward_matches_formula(hydrophobic, length, jackpot):
    prompt = f"V:{jackpot * 10**5}\n"
    row = make_row(prompt, 3, sequence_with(7, 20))
    sequence = sequence_with(hydrophobic, length)
    reference = valley_reference(hydrophobic, length, jackpot)
    assert close(valley_reward(sequence, jackpot), reference)
    assert close(get_problem("hydro").reward(sequence + "\n", row), reference)  # the prompt carries j


def test_valley_family_contains_cat_task_and_has_exact_band_edges():
    # j = 0.75 is level 1 exactly, bit for bit, at every h of a 20- and a 60-residue sequence
    level1 = make_row("U:00042\n", 1, sequence_with(7, 20))
    member = make_row("V:75000\n", 3, sequence_with(7, 20))
    problem = get_problem("hydro")
    for length in (20, 60):
        for hydrophobic in range(length + 1):
            completion = sequence_with(hydrophobic, length) + "\n"
            assert problem.reward(completion, member) == problem.reward(completion, level1)
    # j = 0.80: the band is 0.45 < h < 0.65, open at both ends (13/20 = 0.65 and 9/20 = 0.45 are outside)
    j = Fraction(80, 100)
    trap_and_peak = valley_reference(13, 20, j)
    assert close(valley_reward(sequence_with(13, 20), j), trap_and_peak)
    assert valley_reference(13, 20, j) - valley_reference(12, 20, j) > 0  # no −2 at the edge h = 0.65 ...
    assert close(valley_reward(sequence_with(12, 20), j), valley_reference(12, 20, j))  # ... but at h = 0.60
    hand = 4 * math.exp(-0.0625 / 0.05) + 12 * math.exp(-0.04 / 0.015) - 2  # h = 0.60, hand-evaluated terms
    assert valley_reward(sequence_with(12, 20), j) == pytest.approx(hand, abs=1e-12)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="jackpot"):
            valley_reward(sequence_with(12, 20), bad)


def test_valley_family_prompts_name_jackpots_in_range():
    from aligntrain.problems.hydro import level_of_prompt

    for digits in ("65000", "69999", "70000", "89999", "90000", "74312"):
        assert level_of_prompt(f"V:{digits}\n")[0] == 3
    for digits in ("64999", "90001", "99999", "00000", "7431", "743120"):
        assert level_of_prompt(f"V:{digits}\n") is None
    rows = generate_splits({"train": 300, "test": 300}, levels=(3,), seed=0)
    jackpots = {split: [Fraction(int(r["prompt"][2:7]), 10**5) for r in rows_] for split, rows_ in rows.items()}
    for values in jackpots.values():
        assert len(set(values)) == 300  # distinct tasks, not one task under many tags
        assert all(Fraction(65, 100) <= j <= Fraction(90, 100) for j in values)
    assert not set(jackpots["train"]) & set(jackpots["test"])
    # roughly uniform over the range: each fifth holds 60 ± 30 of 300
    fifths = [
        sum(
            Fraction(65, 100) + Fraction(5, 100) * i <= j < Fraction(65, 100) + Fraction(5, 100) * (i + 1)
            for j in jackpots["test"]
        )
        for i in range(5)
    ]
    assert all(30 <= count <= 90 for count in fifths), fifths


@pytest.mark.parametrize(
    "hydrophobic, length, h_in",
    [
        (20, 20, Fraction(0)),
        (0, 20, Fraction(0)),
        (1, 20, Fraction(0)),  # h_in = 0: target 1
        (0, 20, Fraction(1)),
        (20, 20, Fraction(1)),
        (19, 20, Fraction(1)),  # h_in = 1: target 0
        (8, 20, Fraction(2, 5)),
        (12, 20, Fraction(2, 5)),  # |h_in - 0.5| = 0.1 exactly: no penalty
        (6, 20, Fraction(3, 5)),
        (8, 20, Fraction(3, 5)),
        (4, 20, Fraction(3, 10)),
        (8, 20, Fraction(3, 10)),  # |h - h_in| = 0.1 exactly: no penalty
        (5, 20, Fraction(3, 10)),
        (7, 20, Fraction(3, 10)),  # inside: penalty
        (14, 20, Fraction(3, 10)),
        (13, 37, Fraction(11, 29)),
        (2, 4, Fraction(1, 2)),
        (0, 4, Fraction(0)),
        (5, 5, Fraction(0)),
        (0, 5, Fraction(1)),
    ],
)
def test_complement_reward_matches_formula(hydrophobic, length, h_in):
    reward = complement_reward(sequence_with(hydrophobic, length), h_in)
    assert close(reward, complement_reference(hydrophobic, length, h_in))


def test_complement_reward_extremes_edges_and_short_floor():
    assert complement_reward(sequence_with(20, 20), Fraction(0)) == pytest.approx(10.0, abs=1e-12)
    assert complement_reward(sequence_with(0, 20), Fraction(1)) == pytest.approx(10.0, abs=1e-12)
    # copying an extreme input: ridge 10 e^{-20}, minus the copy penalty
    assert complement_reward(sequence_with(0, 20), Fraction(0)) == pytest.approx(10 * math.exp(-20) - 2, abs=1e-12)
    assert complement_reward(sequence_with(20, 20), Fraction(1)) == pytest.approx(10 * math.exp(-20) - 2, abs=1e-12)
    # |h - h_in| = 0.1 exactly (h = 0.2, h_in = 0.3): outside the open band; 0.25 inside
    assert complement_reward(sequence_with(4, 20), Fraction(3, 10)) == pytest.approx(10 * math.exp(-(0.5**2) / 0.05))
    assert complement_reward(sequence_with(5, 20), Fraction(3, 10)) == pytest.approx(
        10 * math.exp(-(0.45**2) / 0.05) - 2
    )
    # a near-midpoint input is never penalised for copying
    assert complement_reward(sequence_with(10, 20), Fraction(1, 2)) == pytest.approx(10.0)
    assert complement_reward(sequence_with(2, 4), Fraction(1, 2)) == -5.0
    assert complement_reward(sequence_with(2, 5), Fraction(1, 2)) == pytest.approx(10 * math.exp(-0.01 / 0.05))
    assert complement_reward(sequence_with(10, 20), 0.5) == pytest.approx(10.0)  # floats accepted
    for bad in [-0.1, 1.5, True, "0.5", None]:
        with pytest.raises(ValueError, match="h_in"):
            complement_reward(sequence_with(10, 20), bad)


# ---------------------------------------------------------------------------
# Parsing and grading untrusted completions


def test_parse_completion_rules():
    assert parse_completion("MKLV\n") == "MKLV"
    assert parse_completion("MKLV\nanything <unk> after") == "MKLV"
    assert parse_completion("MKLV") == "MKLV"  # cut at the length cap: the whole text
    assert parse_completion("") == "" and parse_completion("\n") == ""
    for bad in ["MKLx\n", "mklv\n", "MK LV\n", "MKLV\r\n", "MK<unk>LV\n", "MKLVB\n", "U:MKLV\n"]:
        assert parse_completion(bad) is None, bad
    assert parse_completion("A" * 120 + "\n") == "A" * 120
    assert parse_completion("A" * 121 + "\n") is None
    assert parse_completion("A" * 10**6) is None
    with pytest.raises(ValueError, match="completion"):
        parse_completion(None)


def test_protgpt2_format_reads_60_residue_lines_up_to_the_end_of_text():
    """ProtGPT2's layout: newlines inside the sequence are dropped, the sample ends at <|endoftext|>."""
    sequence = sequence_with(91, 130)  # h = 0.7: the valley's jackpot
    lines = sequence[:60] + "\n" + sequence[60:120] + "\n" + sequence[120:]
    assert len(sequence) == 130 and [i for i, c in enumerate(lines) if c == "\n"] == [60, 121]
    for completion in (lines, lines + "\n", lines + "\n<|endoftext|>", lines + "\n<|endoftext|>MKLV\nAAAA"):
        assert parse_completion(completion, "protgpt2") == sequence, completion
    # the same text in the line format: the first line only
    assert parse_completion(lines + "\n", "line") == sequence[:60] == parse_completion(lines + "\n")
    assert parse_completion("MKLV<|endoftext|>", "protgpt2") == "MKLV"
    assert parse_completion("MKLV\n<|endoftext|>\nDEKR", "protgpt2") == "MKLV"
    assert parse_completion("<|endoftext|>MKLV", "protgpt2") == ""
    assert parse_completion("A" * 1000, "protgpt2") == "A" * 1000
    for bad in ["A" * 1001, "MKLx\n", "MK LV", "MKLV\r\n", "MK<unk>LV", "mklv", "MKLV<|endoftext"]:
        assert parse_completion(bad, "protgpt2") is None, bad
    with pytest.raises(ValueError, match="sequence_format"):
        parse_completion("MKLV", "fasta")


def test_protgpt2_format_scores_the_whole_sequence_and_only_when_asked(problem):
    protgpt2 = PROBLEMS.parse("hydro", {"sequence_format": "protgpt2"})
    assert (protgpt2.stop_text, problem.stop_text, problem.sequence_format) == ("", "\n", "line")
    row = make_row("U:00042\n", 1, sequence_with(7, 20))
    sequence = sequence_with(91, 130)
    completion = sequence[:60] + "\n" + sequence[60:120] + "\n" + sequence[120:] + "\n"
    grade = protgpt2.grade(completion, row)
    assert grade.answer == sequence and close(grade.reward, valley_reference(91, 130)) and grade.correct
    line = problem.grade(completion, row)  # the default format reads the first line: 30 of 60 hydrophobic
    assert sum(residue in OIL_LOVING for residue in sequence[:60]) == 30
    assert line.answer == sequence[:60] and close(line.reward, valley_reference(30, 60)) and not line.correct
    eos = protgpt2.grade(sequence[:60] + "\n<|endoftext|>" + "W" * 60 + "\n", row)
    assert eos.answer == sequence[:60] and eos.reward == line.reward, "nothing after the end-of-text counts"
    complement = make_row(f"C:{sequence_with(6, 20)}\n", 2, sequence_with(7, 20))  # h_in = 0.3, target 0.7
    assert protgpt2.reward(completion, complement) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="sequence_format"):
        PROBLEMS.parse("hydro", {"sequence_format": "fasta"})


def test_problem_reward_and_grade(problem):
    valley_row = make_row("U:00042\n", 1, sequence_with(7, 20))
    jackpot = sequence_with(15, 20)
    assert problem.reward(jackpot + "\n", valley_row) == pytest.approx(float(valley_reference(15, 20)))
    assert problem.reward(jackpot + "\nDDDDDDDDDDDDDDDDDDDD", valley_row) == problem.reward(jackpot, valley_row)
    grade = problem.grade(jackpot + "\n", valley_row)
    assert (grade.answer, grade.answer_class, grade.correct) == (jackpot, None, True)
    trap = problem.grade(sequence_with(7, 20) + "\n", valley_row)
    assert not trap.correct and trap.reward == pytest.approx(4.00028, abs=1e-5)
    # correct <=> reward > 8: for the valley, h in (0.6655, 0.8285)
    assert [problem.grade(sequence_with(k, 100) + "\n", valley_row).correct for k in (66, 67, 82, 83)] == [
        False,
        True,
        True,
        False,
    ]
    unscorable = problem.grade(jackpot + "x\n", valley_row)
    assert (unscorable.answer, unscorable.correct, unscorable.reward) == (None, False, -5.0)

    input_sequence = sequence_with(6, 20)  # h_in = 0.3, target 0.7
    complement_row = make_row(f"C:{input_sequence}\n", 2, sequence_with(7, 20))
    assert problem.reward(sequence_with(14, 20) + "\n", complement_row) == pytest.approx(10.0)
    assert problem.grade(sequence_with(14, 20) + "\n", complement_row).correct
    copy = problem.grade(input_sequence + "\n", complement_row)
    assert not copy.correct and close(copy.reward, complement_reference(6, 20, Fraction(3, 10)))
    assert problem.reward("AAAA\n", complement_row) == -5.0  # length 4 < 5
    assert problem.answer_class(jackpot + "\n") is None and problem.gold_class(valley_row) is None

    with pytest.raises(ValueError, match="'bad-row'.*prompt"):
        problem.reward(jackpot, {"id": "bad-row", "prompt": "Q: 1+1=?\nA: "})
    with pytest.raises(ValueError, match="'no-prompt'"):
        problem.reward(jackpot, {"id": "no-prompt"})


@settings(max_examples=150, deadline=None)
@given(
    completion=st.one_of(st.text(max_size=300), st.text(alphabet=RESIDUES + "\nxa <>", max_size=150)),
    level=st.sampled_from([1, 2, 3]),
)
def test_untrusted_completions_never_raise(problem, completion, level):
    prompt = {1: "U:00042\n", 2: f"C:{sequence_with(9, 31)}\n", 3: "V:65000\n"}[level]
    row = make_row(prompt, level, sequence_with(7, 20))
    grade = problem.grade(completion, row)
    assert -5.0 <= grade.reward <= 12.67 and math.isfinite(grade.reward)  # j = 0.65: 12 + 4e^{-1.8}
    assert grade.correct == (grade.reward > 8.0)
    if grade.answer is None:
        assert grade.reward == -5.0
    else:
        assert set(grade.answer) <= set(RESIDUES) and completion.startswith(grade.answer)
        assert len(grade.answer) <= 120 and completion[len(grade.answer) : len(grade.answer) + 1] in ("", "\n")


@settings(max_examples=150, deadline=None)
@given(completion=st.one_of(st.text(max_size=300), st.text(alphabet=RESIDUES + "\n<|endoftext|>x ", max_size=300)))
def test_untrusted_completions_never_raise_in_protgpt2_format(completion):
    problem = PROBLEMS.parse("hydro", {"sequence_format": "protgpt2"})
    grade = problem.grade(completion, make_row("U:00042\n", 1, sequence_with(7, 20)))
    assert -5.0 <= grade.reward <= 12.17 and grade.correct == (grade.reward > 8.0)
    if grade.answer is None:
        assert grade.reward == -5.0
    else:
        assert grade.answer == completion.split("<|endoftext|>")[0].replace("\n", "")


# ---------------------------------------------------------------------------
# Splits and pretraining corpus


def test_splits_disjoint_deterministic_and_well_formed(splits):
    assert generate_splits({"train": 400, "validation": 100, "test": 100}, levels=(1, 2), seed=0) == splits
    other_seed = generate_splits({"test": 100}, levels=(1, 2), seed=1)["test"]
    assert {r["prompt"] for r in other_seed} != {r["prompt"] for r in splits["test"]}
    prompts = {split: [r["prompt"] for r in rows] for split, rows in splits.items()}
    for split, rows in splits.items():
        assert len(set(prompts[split])) == len(rows)
        assert sorted(r["level"] for r in rows).count(1) == len(rows) // 2
        for row in rows:
            validate_row(row)
            assert partition_of(row["prompt"]) == split
            assert len(row["prompt"] + row["completion"]) <= 104
            assert 20 <= len(row["answer"]) <= 60
    assert not set(prompts["train"]) & set(prompts["validation"])
    assert not set(prompts["train"]) & set(prompts["test"])
    assert not set(prompts["validation"]) & set(prompts["test"])
    assert all(r["prompt"].startswith("U:") == (r["level"] == 1) for rows in splits.values() for r in rows)
    with pytest.raises(ValueError, match="sizes"):
        generate_splits({"dev": 3})
    with pytest.raises(ValueError, match="levels"):
        generate_split("test", 3, levels=(4,))


def test_exhausted_partition_raises(monkeypatch):
    from aligntrain.problems import hydro

    monkeypatch.setattr(hydro, "TAG_DIGITS", 2)  # 100 tags, about 10 in the test partition
    monkeypatch.setattr(hydro, "_MAX_FRUITLESS_DRAWS", 2000)
    assert len(generate_split("test", 5, levels=(1,))) == 5
    with pytest.raises(ValueError, match="level-1 prompts"):
        generate_split("test", 30, levels=(1,))


def test_pretrain_corpus_law_and_disjointness():
    corpus = pretrain_corpus(4000, seed=0)
    assert pretrain_corpus(4000, seed=0) == corpus and pretrain_corpus(50, seed=1) != corpus[:50]
    outputs, inputs = [], []
    for text in corpus:
        prompt, output, rest = text.split("\n")
        assert rest == "" and partition_of(prompt + "\n") == "train"
        outputs.append(hydrophobicity(output))
        assert 20 <= len(output) <= 60
        if prompt.startswith("C:"):
            inputs.append(hydrophobicity(prompt[2:]))
    share = lambda values, test: sum(map(test, values)) / len(values)  # noqa: E731
    mean = float(sum(outputs) / len(outputs))
    assert 0.33 < mean < 0.37  # the trap
    assert share(outputs, lambda h: 0.25 <= h <= 0.45) > 0.6
    assert 0.005 < share(outputs, lambda h: h > 0.6) < 0.02  # a thin hydrophobic tail
    assert share(outputs, lambda h: h > 0.7) < 0.005
    assert 0.28 < len(inputs) / len(corpus) < 0.39  # a third of the texts per level
    assert 0.28 < sum(text.startswith("V:") for text in corpus) / len(corpus) < 0.39
    assert min(inputs) < 0.15 and max(inputs) > 0.85 and 0.45 < float(sum(inputs) / len(inputs)) < 0.55


# ---------------------------------------------------------------------------
# Row validation, parquet, registry


def test_validate_row_errors_name_id_and_field(splits):
    valley = next(r for r in splits["test"] if r["level"] == 1)
    complement = next(r for r in splits["test"] if r["level"] == 2)
    rid = valley["id"]
    cases = [
        ({**valley, "level": 2}, "level"),
        ({**valley, "level": True}, "level"),
        ({**valley, "level": 7}, "level"),
        ({**valley, "prompt": "U:123\n"}, "prompt"),
        ({**valley, "prompt": "U:00043\n"}, "id"),
        ({**valley, "completion": valley["answer"]}, "completion"),
        ({**valley, "completion": "MKLV\n", "answer": "MKLV"}, "completion"),
        ({**valley, "completion": valley["answer"][:-1] + "x\n"}, "completion"),
        ({**valley, "answer": valley["answer"][1:]}, "answer"),
        ({**valley, "answer": 3}, "answer"),
        ({**valley, "extra": 1}, "extra"),
        ({k: v for k, v in valley.items() if k != "completion"}, "completion"),
    ]
    for row, field in cases:
        with pytest.raises(ValueError, match=f"{rid}.*'{field}'"):
            validate_row(row)
    with pytest.raises(ValueError, match=f"{complement['id']}.*'level'"):
        validate_row({**complement, "level": 1})
    with pytest.raises(ValueError, match="'id'"):
        validate_row({**valley, "id": ""})
    with pytest.raises(ValueError, match="mapping"):
        validate_row([valley])


def test_parquet_round_trip(splits, tmp_path, problem):
    path = tmp_path / "test.parquet"
    problem.save_rows(splits["test"], path)
    assert problem.load_rows(path) == splits["test"]
    assert load_rows(path) == splits["test"]
    bad = dict(splits["test"][3], answer="MKLV")
    with pytest.raises(ValueError, match=bad["id"]):
        save_rows([splits["test"][0], bad], tmp_path / "never.parquet")
    assert not (tmp_path / "never.parquet").exists()
    pq.write_table(pa.Table.from_pylist([bad]), tmp_path / "tampered.parquet")
    with pytest.raises(ValueError, match=f"{bad['id']}.*'answer'"):
        load_rows(tmp_path / "tampered.parquet")


def test_registry_lists_hydro(problem):
    assert "hydro" in PROBLEMS and "arith" in PROBLEMS
    assert isinstance(problem, HydroProblem) and isinstance(problem, Problem)
    assert (problem.name, problem.binary_rewards, problem.levels, problem.stop_text) == (
        "hydro",
        False,
        (1, 2, 3),
        "\n",
    )
    rows = problem.generate_splits({"test": 4}, levels=[2], seed=3)["test"]
    assert [r["level"] for r in rows] == [2, 2, 2, 2]
    assert all(text.endswith("\n") for text in problem.pretrain_corpus(5, seed=0))
