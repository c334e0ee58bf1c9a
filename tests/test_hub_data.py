"""Hub data sets as problems (math, gsm8k) on local stand-ins in each hub data set's exact schema.

No hub access: the rows below are written by hand in the schemas of
EleutherAI/hendrycks_math (parquet: problem, level, type, solution),
HuggingFaceH4/MATH-500 (jsonl: problem, solution, answer, subject, level,
unique_id) and openai/gsm8k (parquet: question, answer). They are read through
the same code as the hub: as local ``parquet`` sources, and as a Hugging Face
cache snapshot at the pinned revision (the hub's own file layout), both loaded
by ``datasets``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from aligntrain.problems import PROBLEMS, Problem, get_problem
from aligntrain.problems.competition_math import MATH_500_REVISION, MATH_REVISION, last_boxed
from aligntrain.problems.gsm8k import GSM8K_REVISION
from aligntrain.problems.hub import DataRowError, HubDataUnavailable

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- rows in the hub schemas

MATH_SCHEMA = pa.schema(
    [("problem", pa.string()), ("level", pa.string()), ("type", pa.string()), ("solution", pa.string())]
)
GSM8K_SCHEMA = pa.schema([("question", pa.string()), ("answer", pa.string())])

MATH_TRAIN = {
    "algebra": [
        {
            "problem": "What is the sum of all values of $y$ for which the expression $\\frac{y+6}{y^2-5y+4}$ is undefined?",
            "level": "Level 2",
            "type": "Algebra",
            "solution": "The given expression is undefined when the denominator is zero. Thus, we want to find the sum "
            "of the zeros $y$ to the quadratic $y^2-5y+4$. We know that for a quadratic with the equation "
            "$ax^2+bx+c=0$, the sum of the solutions is $-b/a$, so the sum of the zeros of the quadratic "
            "$y^2-5y+4$ is $5/1=\\boxed{5}$.",
        },
        {
            "problem": "If $\\sqrt{2x^2+1}=\\sqrt{19}$, find the average of all the possible values of $x$.",
            "level": "Level 3",
            "type": "Algebra",
            "solution": "First, we square both sides of the equation to get \\begin{align*}\n(\\sqrt{2x^2+1})^2& "
            "=(\\sqrt{19})^2\\\\\n2x^2+1& =19\\\\\n\\Rightarrow\\qquad 2x^2& =18\\\\\n\\Rightarrow\\qquad x^2& =9"
            "\n\\end{align*}From here, we see that the only possible values of $x$ are 3 and -3. Therefore the "
            "average is $\\boxed{0}$.",
        },
        {
            "problem": "Find the center of the circle with equation $x^2 - 6x + y^2 + 2y = 9$.",
            "level": "Level 4",
            "type": "Algebra",
            "solution": "Completing the square, we get $(x - 3)^2 + (y + 1)^2 = 19$. Therefore, the center of the "
            "circle is $\\boxed{(3, -1)}$.",
        },
        {
            "problem": "What is the domain of $f(x) = x^3 - 2x$?",
            "level": "Level 2",
            "type": "Algebra",
            "solution": "A polynomial is defined everywhere, so the domain is $\\boxed{\\mathbb{R}}$.",
        },
        {
            "problem": "Evaluate $\\left\\lceil\\sqrt{140}\\right\\rceil$.",
            "level": "Level 3",
            "type": "Algebra",
            "solution": "Since $\\sqrt{121}<\\sqrt{140}<\\sqrt{144}$, we know $11<\\sqrt{140}<12$. The smallest "
            "integer greater than $\\sqrt{140}$ is therefore $\\boxed 12$.",
        },
    ],
    "precalculus": [
        {
            "problem": "Compute $\\cos 30^\\circ$.",
            "level": "Level 1",
            "type": "Precalculus",
            "solution": "Let $P$ be the point on the unit circle that is $30^\\circ$ counterclockwise from $(1,0)$. "
            "Then $P$ is $\\left(\\frac{\\sqrt{3}}{2}, \\frac{1}{2}\\right)$, so $\\cos 30^\\circ = "
            "\\boxed{\\frac{\\sqrt{3}}{2}}$.",
        },
        {
            "problem": "Compute $\\tan 225^\\circ$.",
            "level": "Level 1",
            "type": "Precalculus",
            "solution": "Rotating the point $(1,0)$ about the origin by $225^\\circ$ counterclockwise gives us the "
            "point $\\left(-\\frac{\\sqrt{2}}{2}, -\\frac{\\sqrt{2}}{2}\\right)$, so $\\tan 225^\\circ = "
            "\\frac{\\sin 225^\\circ}{\\cos 225^\\circ} = \\fbox{1}$.",
        },
    ],
    "counting_and_probability": [
        {
            "problem": "How many ways are there to choose 3 cards from a standard deck of 52 cards, if all three "
            "cards must be of different suits?  (Assume that the order of the cards does not matter.)",
            "level": "Level 4",
            "type": "Counting & Probability",
            "solution": "First, we choose the suits. There are $\\binom{4}{3}=4$ ways to do this. Then, we choose "
            "one of 13 cards from each of the chosen suits. There are $13^3=2197$ ways to do this. The total "
            "number of ways to choose 3 cards of different suits is therefore $4\\cdot 2197=\\boxed{8788}$.",
        },
        {
            "problem": "Two cards are dealt at random from a standard deck of 52 cards.  What is the probability "
            "that the first card is a $\\diamondsuit$ and the second card is an ace?",
            "level": "Level 5",
            "type": "Counting & Probability",
            "solution": "We have two cases. If the first card is the ace of diamonds, the probability is "
            "$\\dfrac{1}{52}\\times \\dfrac{3}{51} = \\dfrac{1}{884}$; otherwise $\\dfrac{12}{52}\\times "
            "\\dfrac{4}{51} = \\dfrac{4}{221}$. So the probability is $\\dfrac{1}{884} + \\dfrac{4}{221} = "
            "\\boxed{\\dfrac{1}{52}}$.",
        },
    ],
    "number_theory": [
        {
            "problem": "What is the remainder when $2007$ is divided by $81$?",
            "level": "Level 1",
            "type": "Number Theory",
            "solution": "Dividing using long division, we find that $2007=81\\cdot24 + 63$, so the remainder is "
            "$\\boxed{63}$.",
        },
        {
            "problem": "What is the smallest positive multiple of $32$ that is also a multiple of $28$?",
            "level": "Level 2",
            "type": "Number Theory",
            "solution": "We have $32=2^5$ and $28=2^2\\cdot 7$, so the least common multiple is $2^5\\cdot 7"
            "=\\boxed{224}$.",
        },
    ],
    "prealgebra": [
        {
            "problem": "What is $\\frac{1}{2} + \\frac{1}{3}$?",
            "level": "Level 1",
            "type": "Prealgebra",
            "solution": "The least common denominator is 6, so $\\frac{1}{2} + \\frac{1}{3} = \\frac{3}{6} + "
            "\\frac{2}{6} = \\boxed{\\frac{5}{6}}$.",
        },
    ],
    "intermediate_algebra": [
        {
            "problem": "Find the minimum value of $x^2 + 8x + 21$ over all real numbers $x$.",
            "level": "Level 3",
            "type": "Intermediate Algebra",
            "solution": "Completing the square, $x^2 + 8x + 21 = (x + 4)^2 + 5$, so the minimum value is "
            "$\\boxed{5}$, attained at $x = -4$.",
        },
    ],
    "geometry": [
        {
            "problem": "A right triangle has legs of length $6$ and $8$. What is the length of its hypotenuse?",
            "level": "Level ?",
            "type": "Geometry",
            "solution": "By the Pythagorean theorem the hypotenuse is $\\sqrt{6^2+8^2}=\\boxed{10}$.",
        },
    ],
}

MATH_500_TEST = [
    {
        "problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer in "
        "the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$",
        "solution": "We have that $r = \\sqrt{0^2 + 3^2} = 3.$  Also, if we draw the line connecting the origin and "
        "$(0,3),$ this line makes an angle of $\\frac{\\pi}{2}$ with the positive $x$-axis.\n\nTherefore, the polar "
        "coordinates are $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "subject": "Precalculus",
        "level": 2,
        "unique_id": "test/precalculus/807.json",
    },
    {
        "problem": "If $f(x) = \\frac{3x-2}{x-2}$, what is the value of $f(-2) +f(-1)+f(0)$? Express your answer as "
        "a common fraction.",
        "solution": "$f(-2)+f(-1)+f(0)=\\frac{3(-2)-2}{-2-2}+\\frac{3(-1)-2}{-1-2}+\\frac{3(0)-2}{0-2}="
        "\\frac{-8}{-4}+\\frac{-5}{-3}+\\frac{-2}{-2}=2+\\frac{5}{3}+1=\\boxed{\\dfrac{14}{3}}$",
        "answer": "\\frac{14}{3}",
        "subject": "Algebra",
        "level": 3,
        "unique_id": "test/algebra/2584.json",
    },
    {
        "problem": "How many positive whole-number divisors does 196 have?",
        "solution": "First prime factorize $196=2^2\\cdot7^2$.  We may choose 0, 1, or 2 as the exponent of 2 and "
        "of 7 in the prime factorization of a divisor of 196, so there are $3\\times 3=9$ possibilities, and "
        "$\\boxed{9}$ divisors of 196.",
        "answer": "9",
        "subject": "Number Theory",
        "level": 3,
        "unique_id": "test/number_theory/572.json",
    },
    {
        "problem": "What is the value of $513^2 - 487^2$?",
        "solution": "Note that $513^2 - 487^2 = (513+487)(513-487) = (1000)(26) = \\boxed{26000}$.",
        "answer": "26000",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/2036.json",
    },
]

GSM8K_ROWS = {
    "train": [
        {
            "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
            "May. How many clips did Natalia sell altogether in April and May?",
            "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
            "altogether in April and May.\n#### 72",
        },
        {
            "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
            "How much did she earn?",
            "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
            "$<<0.2*50=10>>10.\n#### 10",
        },
        {
            "question": "John buys 2 laptops for $1,200 each and a printer for $350. How much does he spend in total?",
            "answer": "The laptops cost 2*1200 = $<<2*1200=2400>>2400.\nSo he spends 2400+350 = "
            "$<<2400+350=2750>>2,750 in total.\n#### 2,750",
        },
        {
            "question": "James decides to run 3 sprints 3 times a week. He runs 60 meters each sprint. How many total "
            "meters does he run a week?",
            "answer": "He sprints 3*3=<<3*3=9>>9 times\nSo he runs 9*60=<<9*60=540>>540 meters\n#### 540",
        },
        {
            "question": "Betty is saving money for a new wallet which costs $100. Betty has only half of the money "
            "she needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much "
            "as her parents. How much more money does Betty need to buy the wallet?",
            "answer": "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty's grandparents gave her "
            "15 * 2 = $<<15*2=30>>30.\nThis means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n"
            "#### 5",
        },
        {
            "question": "A deep-sea monster rises from the waters once every hundred years to feast on a ship and "
            "sate its hunger. Over three hundred years, it has consumed 847 people. Ships have been built larger "
            "over time, so each new ship has twice as many people as the last ship. How many people were on the "
            "ship the monster ate in the first hundred years?",
            "answer": "Let S be the number of people on the first hundred years' ship.\nThe second hundred years' "
            "ship had twice as many as the first, so it had 2S people.\nThe third had twice as many as the second, "
            "so it had 2 * 2S = <<2*2=4>>4S people.\nAll the ships had S + 2S + 4S = 7S = 847 people.\nThus, the "
            "ship that the monster ate in the first hundred years had S = 847 / 7 = <<847/7=121>>121 people on "
            "it.\n#### 121",
        },
    ],
    "test": [
        {
            "question": "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
            "muffins for her friends every day with four. She sells the remainder at the farmers' market daily for "
            "$2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?",
            "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 "
            "every day at the farmer\u2019s market.\n#### 18",
        },
        {
            "question": "A robe takes 2 bolts of blue fiber and half that much white fiber.  How many bolts in total "
            "does it take?",
            "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total amount of fabric is "
            "2+1=<<2+1=3>>3 bolts of fabric\n#### 3",
        },
        {
            "question": "A school library has 1,150 books. It buys 84 more. How many books does the library have now?",
            "answer": "The library has 1150 + 84 = <<1150+84=1234>>1234 books now.\n#### 1,234",
        },
    ],
}


def _write_parquet(path: Path, records: list[dict], schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)
    return path


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache, offline: what ``hf download`` fills on a machine with access."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def _snapshot(cache: Path, dataset: str, revision: str) -> Path:
    """The folder ``hf download <dataset> --repo-type dataset --revision <revision>`` fills."""
    return cache / f"datasets--{dataset.replace('/', '--')}" / "snapshots" / revision


@pytest.fixture()
def math_snapshots(hub_cache):
    """MATH (train, every subject file of the stand-in) and MATH-500 (test.jsonl) at the pinned revisions."""
    math = _snapshot(hub_cache, "EleutherAI/hendrycks_math", MATH_REVISION)
    for subject, records in MATH_TRAIN.items():
        _write_parquet(math / subject / "train-00000-of-00001.parquet", records, MATH_SCHEMA)
    _write_jsonl(_snapshot(hub_cache, "HuggingFaceH4/MATH-500", MATH_500_REVISION) / "test.jsonl", MATH_500_TEST)
    return hub_cache


@pytest.fixture()
def gsm8k_snapshot(hub_cache):
    snapshot = _snapshot(hub_cache, "openai/gsm8k", GSM8K_REVISION)
    for split, records in GSM8K_ROWS.items():
        _write_parquet(snapshot / "main" / f"{split}-00000-of-00001.parquet", records, GSM8K_SCHEMA)
    return hub_cache


def _math_local(tmp_path: Path, **options) -> Problem:
    """``math`` reading the stand-in from local parquet files (train: MATH, test: MATH-500)."""
    train = [
        str(_write_parquet(tmp_path / "local" / f"math-{subject}-train.parquet", records, MATH_SCHEMA))
        for subject, records in MATH_TRAIN.items()
    ]
    test = _write_parquet(tmp_path / "local" / "math500-test.parquet", MATH_500_TEST)
    return PROBLEMS.parse(
        "math", {"train": {"parquet": train}, "test": {"parquet": [str(test)], "format": "MATH-500"}, **options}
    )


def _by_prompt(rows: list[dict]) -> dict[str, dict]:
    return {row["prompt"][3:-4]: row for row in rows}


# --------------------------------------------------------------------------- registry and gold answers


def test_math_and_gsm8k_are_registered_with_pinned_hub_sources():
    math, gsm8k = get_problem("math"), get_problem("gsm8k")
    for problem in (math, gsm8k):
        assert isinstance(problem, Problem) and problem.binary_rewards and problem.stop_text == ""
    assert math.levels == (1, 2, 3, 4, 5) and gsm8k.levels == (1,)
    assert (math.train.dataset, math.train.revision, math.train.split) == (
        "EleutherAI/hendrycks_math",
        MATH_REVISION,
        "train",
    )
    assert len(math.train.subsets) == 7 and math.validation is None
    assert (math.test.dataset, math.test.format) == ("HuggingFaceH4/MATH-500", "MATH-500")
    assert (gsm8k.test.dataset, gsm8k.test.revision, gsm8k.test.subsets) == ("openai/gsm8k", GSM8K_REVISION, ("main",))


@pytest.mark.parametrize(
    "solution, gold",
    [
        ("so $x=\\boxed{5}$.", "5"),
        ("$\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{\\sqrt{3}}{2}"),
        ("first $\\boxed{2}$, then $\\boxed{\\dfrac{9}{7}}$.", "\\dfrac{9}{7}"),
        ("the set $\\boxed{\\{1, 2\\}}$", "\\{1, 2\\}"),
        ("$\\tan 225^\\circ = \\fbox{1}$", "1"),
        ("is therefore $\\boxed 12$.", "12"),
        ("is $\\boxed {7}$", "7"),
        ("no box here", None),
        ("unclosed $\\boxed{\\frac{1}{2}$", None),
        ("empty $\\boxed{}$", None),
    ],
)
def test_the_gold_is_the_last_box_with_balanced_braces(solution, gold):
    assert last_boxed(solution) == gold


# --------------------------------------------------------------------------- mapping: local parquet and hub cache


def test_math_from_local_parquet_maps_rows_and_skips_what_cannot_be_graded(tmp_path, caplog):
    problem = _math_local(tmp_path, validation_fraction=0.5)
    with caplog.at_level("WARNING"):
        splits = problem.load_splits()
    rows = _by_prompt(splits["train"] + splits["validation"])
    assert len(rows) == 12  # 14 MATH rows - "Level ?" - the set \\mathbb{R}, which the grader cannot read
    assert "Level ?" in caplog.text and "mathbb" in caplog.text
    assert rows["Find the center of the circle with equation $x^2 - 6x + y^2 + 2y = 9$."]["answer"] == "(3, -1)"
    cosine = rows["Compute $\\cos 30^\\circ$."]
    assert cosine["answer"] == "\\frac{\\sqrt{3}}{2}" and cosine["level"] == 1
    assert cosine["id"].startswith("math-precalculus-L1-")
    assert cosine["prompt"] == "Q: Compute $\\cos 30^\\circ$.\nA: "
    assert cosine["completion"].endswith("\\boxed{\\frac{\\sqrt{3}}{2}}$.\n#### \\frac{\\sqrt{3}}{2}\n")
    assert rows["Compute $\\tan 225^\\circ$."]["answer"] == "1"  # \fbox
    assert rows["Evaluate $\\left\\lceil\\sqrt{140}\\right\\rceil$."]["answer"] == "12"  # "\boxed 12"
    assert {row["id"].split("-L")[0] for row in rows.values()} == {
        f"math-{subject}" for subject in MATH_TRAIN if subject != "geometry"
    }
    test = _by_prompt(splits["test"])
    assert len(test) == 4  # the polar point (3, pi/2) is an ordered pair of MATH's answer kinds
    assert test["How many positive whole-number divisors does 196 have?"]["level"] == 3
    for split_rows in splits.values():
        for row in split_rows:
            problem.validate_row(row)


def test_math_and_math500_through_the_hub_cache_at_the_pinned_revisions(math_snapshots):
    """The default options: MATH train (7 subject configs) and MATH-500 test.jsonl, loaded by datasets."""
    problem = get_problem("math")
    splits = problem.load_splits()
    # as the local parquet test: 14 rows - "Level ?" - the set \\mathbb{R}
    assert len(splits["train"]) + len(splits["validation"]) == 12
    test = _by_prompt(splits["test"])
    fraction = test[
        "If $f(x) = \\frac{3x-2}{x-2}$, what is the value of $f(-2) +f(-1)+f(0)$? Express your answer as "
        "a common fraction."
    ]
    # MATH-500's answer column is the gold, not the solution's \dfrac box; the grader reads both as one class.
    assert fraction["answer"] == "\\frac{14}{3}" and fraction["id"].startswith("math-algebra-L3-")
    assert problem.reward(fraction["completion"].replace("#### \\frac{14}{3}", "#### \\dfrac{14}{3}"), fraction) == 1


def test_math500_and_math_test_of_one_problem_share_the_id(tmp_path):
    """Ids hash the problem text: MATH-500's copy of a MATH test problem has the MATH id (dedup, contamination)."""
    record = MATH_500_TEST[3]
    as_math = {"problem": record["problem"], "level": "Level 1", "type": "Algebra", "solution": record["solution"]}
    problem = PROBLEMS.parse(
        "math",
        {
            "train": {"parquet": [str(_write_parquet(tmp_path / "train.parquet", [as_math], MATH_SCHEMA))]},
            "test": {"parquet": [str(_write_parquet(tmp_path / "test.parquet", [record]))], "format": "MATH-500"},
        },
    )
    splits = problem.load_splits()
    assert splits["train"] == [] and splits["validation"] == []  # the train copy of a test problem is dropped
    assert splits["test"][0]["id"] == problem.to_row(problem.formats["MATH"], as_math, "here")["id"]


def test_gsm8k_through_the_hub_cache_final_answer_without_separators(gsm8k_snapshot):
    problem = PROBLEMS.parse("gsm8k", {"validation_fraction": 0.5})
    splits = problem.load_splits()
    train = _by_prompt(splits["train"] + splits["validation"])
    assert len(train) == 6 and splits["train"] and splits["validation"]
    laptops = train["John buys 2 laptops for $1,200 each and a printer for $350. How much does he spend in total?"]
    assert laptops["answer"] == "2750" and laptops["level"] == 1 and laptops["id"].startswith("gsm8k-L1-")
    assert laptops["completion"] == (
        "The laptops cost 2*1200 = $2400.\nSo he spends 2400+350 = $2,750 in total.\n#### 2750\n"
    )
    test = _by_prompt(splits["test"])
    assert (
        test["A school library has 1,150 books. It buys 84 more. How many books does the library have now?"]["answer"]
        == "1234"
    )
    kept = PROBLEMS.parse("gsm8k", {"annotations": "keep"}).load_splits(["test"])["test"]
    assert "<<16-3-4=9>>" in _by_prompt(kept)[next(iter(test))]["completion"]
    for split_rows in splits.values():
        for row in split_rows:
            problem.validate_row(row)


# --------------------------------------------------------------------------- grading


def test_grading_correct_and_incorrect_completions(tmp_path, gsm8k_snapshot):
    math_splits = _math_local(tmp_path).load_splits(["train", "validation"])
    math_rows = _by_prompt(math_splits["train"] + math_splits["validation"])
    gsm8k = get_problem("gsm8k")
    library = _by_prompt(gsm8k.load_splits(["test"])["test"])[
        "A school library has 1,150 books. It buys 84 more. How many books does the library have now?"
    ]
    cases = [
        (gsm8k, library, library["completion"], True),
        (gsm8k, library, "1150 + 84 = 1234\n#### 1,234\n", True),
        (gsm8k, library, "#### 1234.0", True),
        (gsm8k, library, "1150 + 84 = 1243\n#### 1243\n", False),
        (gsm8k, library, "The library has 1234 books.", False),  # no answer line
    ]
    math = get_problem("math")
    for prompt, completion, correct in [
        ("Compute $\\cos 30^\\circ$.", "#### \\sqrt{3}/2", True),
        ("Compute $\\cos 30^\\circ$.", "#### $\\frac{\\sqrt{3}}{2}$", True),
        ("Compute $\\cos 30^\\circ$.", "#### \\frac{1}{2}", False),
        (
            "Two cards are dealt at random from a standard deck of 52 cards.  What is the probability that the first "
            "card is a $\\diamondsuit$ and the second card is an ace?",
            "so #### 1/52\n",
            True,
        ),
        ("What is the remainder when $2007$ is divided by $81$?", "#### 63\n", True),
        ("What is the remainder when $2007$ is divided by $81$?", "the remainder is $\\boxed{63}$", False),
    ]:
        row = math_rows[prompt]
        cases += [(math, row, row["completion"], True), (math, row, completion, correct)]
    for problem, row, completion, correct in cases:
        verdict = problem.grade(completion, row)
        assert (verdict.correct, problem.reward(completion, row)) == (correct, float(correct)), (completion, row["id"])
        if correct:
            assert problem.answer_class(completion) == problem.gold_class(row)
    assert gsm8k.answer_class("The library has 1234 books.") is None


# --------------------------------------------------------------------------- bad rows, named


def _good_math(**changes) -> dict:
    return {**MATH_TRAIN["number_theory"][0], **changes}


@pytest.mark.parametrize(
    "name, problem, options, records, schema, says",
    [
        (
            "null-solution",
            "math",
            {},
            [_good_math(), _good_math(solution=None)],
            MATH_SCHEMA,
            "row 1: field 'solution' is missing",
        ),
        (
            "no-box",
            "math",
            {},
            [_good_math(), _good_math(solution="The remainder is 63.")],
            MATH_SCHEMA,
            "row 1: field 'solution' has no \\boxed",
        ),
        (
            "unbalanced-box",
            "math",
            {},
            [_good_math(solution="so $\\boxed{\\frac{1}{2}$")],
            MATH_SCHEMA,
            "row 0: field 'solution' has no \\boxed",
        ),
        (
            "bad-level",
            "math",
            {},
            [_good_math(), _good_math(level="Level 6")],
            MATH_SCHEMA,
            "row 1: field 'level' must be 'Level 1' .. 'Level 5'",
        ),
        ("level-int", "math", {}, [_good_math(level=1)], None, "row 0: field 'level' must be a str, got int"),
        (
            "unknown-subject",
            "math",
            {},
            [_good_math(type="Calculus")],
            MATH_SCHEMA,
            "row 0: field 'type' must be a MATH subject",
        ),
        (
            "missing-column",
            "math",
            {},
            [{k: v for k, v in _good_math().items() if k != "type"}],
            None,
            "field 'type' is missing from every row",
        ),
        (
            "math500-level-str",
            "math",
            {"format": "MATH-500"},
            [{**MATH_500_TEST[2], "level": "Level 3"}],
            None,
            "row 0 (unique_id 'test/number_theory/572.json'): field 'level' must be an int",
        ),
        (
            "math500-null-answer",
            "math",
            {"format": "MATH-500"},
            [MATH_500_TEST[2], {**MATH_500_TEST[3], "answer": None}],
            None,
            "row 1 (unique_id 'test/algebra/2036.json'): field 'answer' is missing",
        ),
        (
            "gsm8k-no-marker",
            "gsm8k",
            {},
            [GSM8K_ROWS["test"][0], {**GSM8K_ROWS["test"][1], "answer": "It takes 3."}],
            GSM8K_SCHEMA,
            "row 1: field 'answer' has no final line '#### <answer>'",
        ),
        (
            "gsm8k-null-question",
            "gsm8k",
            {},
            [{**GSM8K_ROWS["test"][0], "question": None}],
            GSM8K_SCHEMA,
            "row 0: field 'question' is missing",
        ),
    ],
)
def test_a_bad_row_stops_the_load_naming_file_row_and_field(tmp_path, name, problem, options, records, schema, says):
    bad = _write_parquet(tmp_path / f"{name}.parquet", records, schema)
    good = MATH_TRAIN["algebra"][:1] if problem == "math" else GSM8K_ROWS["train"][:1]
    good_file = _write_parquet(tmp_path / "good.parquet", good, MATH_SCHEMA if problem == "math" else GSM8K_SCHEMA)
    configured = PROBLEMS.parse(
        problem, {"train": {"parquet": [str(good_file)]}, "test": {"parquet": [str(bad)], **options}}
    )
    with pytest.raises(DataRowError) as err:
        configured.load_splits()
    assert str(err.value).startswith(str(bad)) and says in str(err.value), str(err.value)


def test_ungradable_error_names_the_row(tmp_path):
    problem = _math_local(tmp_path, ungradable="error")
    with pytest.raises(
        DataRowError, match=r"math-algebra-train\.parquet: row 3: field 'answer' is ungradable.*mathbb\{R\}"
    ):
        problem.load_splits(["train"])


def test_a_row_over_the_graders_completion_limit_is_ungradable(tmp_path, caplog):
    long = {**_good_math(), "solution": "We divide. " * 200 + "The remainder is $\\boxed{63}$."}
    problem = PROBLEMS.parse(
        "math",
        {
            "train": {"parquet": [str(_write_parquet(tmp_path / "train.parquet", [long], MATH_SCHEMA))]},
            "test": {
                "parquet": [str(_write_parquet(tmp_path / "test.parquet", [MATH_500_TEST[2]]))],
                "format": "MATH-500",
            },
        },
    )
    with caplog.at_level("WARNING"):
        assert problem.load_splits(["train"])["train"] == []
    assert "does not grade the gold completion" in caplog.text


def test_malformed_prepared_rows_are_named_by_validate_row(tmp_path):
    problem = _math_local(tmp_path)
    row = problem.load_splits(["test"])["test"][0]
    for field, value, says in [
        ("answer", "\\mathbb{R}", "not an answer the grader can parse"),
        ("completion", row["completion"].replace("####", "Answer:"), "does not end with the answer line"),
        ("id", "math-algebra-L3-0000000000000000", "field 'id'"),
        ("level", 7, "field 'level'"),
        ("prompt", "Problem: x", "field 'prompt'"),
    ]:
        with pytest.raises(ValueError, match=f"row '.*': field '{field}'.*") as err:
            problem.validate_row({**row, field: value})
        assert says in str(err.value)


# --------------------------------------------------------------------------- targets: solutions or answers alone


def _without_completion(rows: list[dict]) -> list[dict]:
    return [{field: value for field, value in row.items() if field != "completion"} for row in rows]


def test_math_target_answer_trains_on_the_answer_line_alone(tmp_path):
    """``target: answer`` (CAT's Pass@N targets): train and validation completions are the answer line alone."""
    solution = _math_local(tmp_path, validation_fraction=0.5)
    problem = _math_local(tmp_path, validation_fraction=0.5, target="answer")
    by_solution, by_answer = solution.load_splits(), problem.load_splits()
    for split in ("train", "validation"):
        assert by_answer[split], split
        # the same rows in the same order: prompts, ids, levels and gold answers; only the completions differ
        assert _without_completion(by_answer[split]) == _without_completion(by_solution[split])
        for row in by_answer[split]:
            assert row["completion"] == f"#### {row['answer']}\n"
            verdict = problem.grade(row["completion"], row)
            assert verdict.correct and problem.reward(row["completion"], row) == 1.0, row["id"]
            assert problem.answer_class(row["completion"]) == problem.gold_class(row)
            problem.validate_row(row)
    assert by_answer["test"] == by_solution["test"]  # the test rows keep their solutions
    for row in by_answer["test"]:
        problem.validate_row(row)
    sizes = {"train": 3, "validation": 1, "test": 2}
    drawn = problem.generate_splits(sizes, levels=[1, 2, 3], seed=4)
    assert {split: [row["id"] for row in rows] for split, rows in drawn.items()} == {
        split: [row["id"] for row in rows] for split, rows in solution.generate_splits(sizes, [1, 2, 3], 4).items()
    }
    corpus = problem.pretrain_corpus(20, seed=0)
    assert corpus and all(text.split("\nA: ", 1)[1].startswith("#### ") for text in corpus)


def test_math_target_defaults_to_the_worked_solution(tmp_path):
    assert get_problem("math").target == "solution"
    default = _math_local(tmp_path, validation_fraction=0.5).load_splits()
    assert default == _math_local(tmp_path, validation_fraction=0.5, target="solution").load_splits()
    cosine = _by_prompt(default["train"] + default["validation"])["Compute $\\cos 30^\\circ$."]
    assert cosine["completion"].startswith("Let $P$ be the point on the unit circle")
    assert cosine["completion"].endswith("\\boxed{\\frac{\\sqrt{3}}{2}}$.\n#### \\frac{\\sqrt{3}}{2}\n")


def test_math_target_refuses_an_unknown_value_naming_the_key():
    from aligntrain.config import ParamsError, parse_params

    with pytest.raises(ValueError, match=r"problem 'math': option target: .*'solution'.*'answer'"):
        PROBLEMS.parse("math", {"target": "direct"})
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"] = {"name": "math", "levels": [1], "options": {"target": "answers"}}
    with pytest.raises(ParamsError, match=r"problem.options.*option target"):
        parse_params(raw)


def test_validate_row_takes_answer_only_completions_only_under_target_answer(tmp_path):
    solution, answer = _math_local(tmp_path), _math_local(tmp_path, target="answer")
    row = solution.load_splits(["train"])["train"][0]
    short = {**row, "completion": f"#### {row['answer']}\n"}
    answer.validate_row(short)
    answer.validate_row(row)  # a solution row (the test split's form) passes too
    with pytest.raises(ValueError, match="field 'completion'.*does not end with the answer line"):
        solution.validate_row(short)
    for completion in (
        "#### 1\n" if row["answer"] != "1" else "#### 2\n",
        f"#### {row['answer']}",
        f"{row['answer']}\n",
    ):
        with pytest.raises(ValueError, match="field 'completion'"):
            answer.validate_row({**row, "completion": completion})
    with pytest.raises(ValueError, match="field 'id'"):
        answer.validate_row({**short, "id": "math-algebra-L3-0000000000000000"})


# --------------------------------------------------------------------------- the offline hub


def test_an_uncached_hub_data_set_fails_before_any_work_saying_how_to_prefetch(tmp_path, hub_cache):
    """The train parquet has a bad row: the hub check comes first, so the error is the hub's, naming it."""
    bad_train = _write_parquet(tmp_path / "train.parquet", [_good_math(solution=None)], MATH_SCHEMA)
    revision = "0123456789abcdef0123456789abcdef01234567"
    problem = PROBLEMS.parse(
        "math",
        {
            "train": {"parquet": [str(bad_train)]},
            "test": {
                "dataset": "aligntrain-tests/not-cached-math",
                "revision": revision,
                "split": "test",
                "format": "MATH-500",
            },
        },
    )
    with pytest.raises(HubDataUnavailable) as err:
        problem.generate_splits({"train": 1, "validation": 1, "test": 1}, levels=[1], seed=0)
    message = str(err.value)
    assert f"aligntrain-tests/not-cached-math at revision {revision}" in message
    assert f"hf download aligntrain-tests/not-cached-math --repo-type dataset --revision {revision} " in message
    assert "--include 'test.jsonl'" in message and "HF_HUB_OFFLINE" in message and "parquet: [...]" in message


def test_the_default_gsm8k_uncached_names_every_missing_split(hub_cache):
    with pytest.raises(HubDataUnavailable) as err:
        get_problem("gsm8k").load_splits()
    message = str(err.value)
    assert "[train]" in message and "[test]" in message
    assert (
        f"hf download openai/gsm8k --repo-type dataset --revision {GSM8K_REVISION} --include 'main/train-*.parquet'"
        in message
    )


def test_another_cached_revision_is_not_read_for_the_pin(hub_cache):
    """The cache holds openai/gsm8k at another commit only: the pin is not met by it (no "latest cached")."""
    other = _snapshot(hub_cache, "openai/gsm8k", "f" * 40)
    for split, records in GSM8K_ROWS.items():
        _write_parquet(other / "main" / f"{split}-00000-of-00001.parquet", records, GSM8K_SCHEMA)
    with pytest.raises(HubDataUnavailable, match=f"openai/gsm8k at revision {GSM8K_REVISION}"):
        get_problem("gsm8k").load_splits(["test"])
    pinned_to_other = {"test": {"dataset": "openai/gsm8k", "revision": "f" * 40, "subsets": ["main"], "split": "test"}}
    assert len(PROBLEMS.parse("gsm8k", pinned_to_other).load_splits(["test"])["test"]) == 3


def test_options_pin_a_commit_and_name_one_origin():
    for options, says in [
        (
            {"train": {"dataset": "openai/gsm8k", "revision": "main", "subsets": ["main"], "split": "train"}},
            "revision must be a commit SHA",
        ),
        ({"train": {"dataset": "openai/gsm8k", "split": "train", "subsets": ["main"]}}, "needs `dataset`, `revision`"),
        ({"train": {"dataset": "openai/gsm8k", "revision": GSM8K_REVISION, "split": "train"}}, "needs `subsets`"),
        ({"train": {"parquet": ["a.parquet"], "split": "train"}}, "give either `parquet`"),
        ({"train": {"parquet": ["a.parquet"], "format": "MATH"}}, "format must be one of ['GSM8K']"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"dataset": "openai/gsm8k"}, "option dataset: unknown option"),
    ]:
        with pytest.raises(ValueError, match="problem 'gsm8k'") as err:
            PROBLEMS.parse("gsm8k", options)
        assert says in str(err.value), str(err.value)


# --------------------------------------------------------------------------- splits


def test_generate_splits_draws_seeded_sizes_of_the_levels(tmp_path):
    problem = _math_local(tmp_path, validation_fraction=0.3)
    pools = problem.load_splits()
    splits = problem.generate_splits({"train": 3, "validation": 1, "test": 2}, levels=[1, 2, 3], seed=4)
    assert {split: len(rows) for split, rows in splits.items()} == {"train": 3, "validation": 1, "test": 2}
    assert all(row["level"] in (1, 2, 3) for rows in splits.values() for row in rows)
    assert splits == problem.generate_splits({"train": 3, "validation": 1, "test": 2}, levels=[1, 2, 3], seed=4)
    for split, rows in splits.items():
        assert {row["id"] for row in rows} <= {row["id"] for row in pools[split]}
    with pytest.raises(ValueError, match=r"sizes\['test'\] asks for 9 rows but math's test split has 4"):
        problem.generate_splits({"test": 9}, levels=[1, 2, 3, 4, 5], seed=0)


def test_the_validation_carve_out_is_disjoint_and_does_not_depend_on_the_seed(tmp_path):
    problem = _math_local(tmp_path, validation_fraction=0.5)
    splits = problem.load_splits()
    train, validation = {r["prompt"] for r in splits["train"]}, {r["prompt"] for r in splits["validation"]}
    assert train and validation and not train & validation
    for seed in (0, 1):
        drawn = problem.generate_splits({"validation": len(validation)}, levels=problem.levels, seed=seed)
        assert {r["prompt"] for r in drawn["validation"]} == validation
    corpus = problem.pretrain_corpus(20, seed=0)
    assert len(corpus) == 20 and {text.split("\nA: ")[0][3:] for text in corpus} <= {p[3:-4] for p in train}


# --------------------------------------------------------------------------- params and the prepare stage


def test_params_name_the_problem_and_its_options(tmp_path):
    from aligntrain.config import ParamsError, parse_params

    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"] = {"name": "gsm8k", "levels": [1], "options": {"annotations": "keep"}}
    assert parse_params(raw).problem.options == {"annotations": "keep"}
    raw["problem"]["options"] = {
        "test": {"dataset": "openai/gsm8k", "revision": "main", "split": "test", "subsets": ["main"]}
    }
    with pytest.raises(ParamsError, match="problem.options.*revision must be a commit SHA"):
        parse_params(raw)
    raw["problem"] = {"name": "arith", "options": {"subsets": ["main"]}}
    with pytest.raises(ParamsError, match="problem.options.*option subsets: unknown option"):
        parse_params(raw)


def _prepare_with(tmp_path, monkeypatch, raw: dict) -> dict:
    """``aligntrain prepare`` in ``tmp_path`` with ``raw`` (the smoke profile, its problem of 3 train and 2
    test prompts) as params.yaml: its metrics."""
    from aligntrain import pipeline
    from aligntrain.cli import run_stage

    raw["rl"]["batch_size"] = 3 * raw["rl"]["num_generations"]  # a step of RL fits the 3 training prompts
    raw["diagnostics"]["oracle"]["prompts"] = 2  # the oracle probes at most the 2 test prompts
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return run_stage(pipeline.get_stage("prepare"), "params.yaml", str(tmp_path), None, "")


def test_prepare_stage_reads_gsm8k_from_local_parquet(tmp_path, monkeypatch):
    """``aligntrain prepare`` with params naming gsm8k and local parquet in the hub schema."""

    files = {
        split: str(_write_parquet(tmp_path / "gsm8k" / f"{split}.parquet", records, GSM8K_SCHEMA))
        for split, records in GSM8K_ROWS.items()
    }
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"] = {
        "name": "gsm8k",
        "levels": [1],
        "train_size": 3,
        "validation_size": 1,
        "test_size": 2,
        "pretrain_corpus_size": 8,
        "options": {
            "train": {"parquet": [files["train"]]},
            "test": {"parquet": [files["test"]]},
            "validation_fraction": 0.5,
        },
    }
    metrics = _prepare_with(tmp_path, monkeypatch, raw)
    assert metrics == {"train_rows": 3, "validation_rows": 1, "test_rows": 2, "corpus_texts": 8}
    problem = get_problem("gsm8k")
    prepared = {
        split: pd.read_parquet(tmp_path / "data" / f"{split}.parquet") for split in ("train", "validation", "test")
    }
    for frame in prepared.values():
        for row in frame.to_dict("records"):
            problem.validate_row(row)
    assert not set(prepared["train"].prompt) & set(prepared["test"].prompt)
    corpus = pd.read_parquet(tmp_path / "data" / "pretrain_corpus.parquet")["text"]
    assert all(text.endswith("\n") and "\n#### " in text for text in corpus)


def test_prepare_stage_writes_answer_only_math_train_rows_under_target_answer(tmp_path, monkeypatch):
    """``aligntrain prepare`` with ``problem.options.target: answer``: train and validation answer-only, test not."""

    train = [
        str(_write_parquet(tmp_path / "math" / f"{subject}-train.parquet", records, MATH_SCHEMA))
        for subject, records in MATH_TRAIN.items()
    ]
    test = str(_write_parquet(tmp_path / "math" / "math500-test.parquet", MATH_500_TEST))
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"] = {
        "name": "math",
        "levels": [1, 2, 3, 4, 5],
        "train_size": 3,
        "validation_size": 1,
        "test_size": 2,
        "pretrain_corpus_size": 8,
        "options": {
            "train": {"parquet": train},
            "test": {"parquet": [test], "format": "MATH-500"},
            "validation_fraction": 0.5,
            "target": "answer",
        },
    }
    metrics = _prepare_with(tmp_path, monkeypatch, raw)
    assert metrics == {"train_rows": 3, "validation_rows": 1, "test_rows": 2, "corpus_texts": 8}
    prepared = {
        split: pd.read_parquet(tmp_path / "data" / f"{split}.parquet").to_dict("records")
        for split in ("train", "validation", "test")
    }
    for split in ("train", "validation"):
        assert all(row["completion"] == f"#### {row['answer']}\n" for row in prepared[split]), split
    assert all(len(row["completion"]) > len(f"#### {row['answer']}\n") for row in prepared["test"])
    corpus = pd.read_parquet(tmp_path / "data" / "pretrain_corpus.parquet")["text"]
    assert all(text.split("\nA: ", 1)[1].startswith("#### ") for text in corpus)
