"""Local stand-ins for hub models and data sets, so a hub-scale study runs end to end on a CPU.

A study in ``pipelines/<study>/`` names hub models and data sets at pinned revisions.
Its ``standin.yaml`` overrides those names with folders this module writes, and
shrinks the sizes: the study then runs every line of the hub path (pretrained
model loading, chat templates, LoRA, hub-schema parsing, grading) except the
download and the GPU kernels, in minutes (``scripts/run_standin.py``).

What is written (:func:`write_standins`), under one folder:

* ``models/<family>``: a freshly initialised causal LM of each architecture family
  the seeds' studies use (:data:`FAMILIES`: Mistral for Mistral-7B-Instruct, Llama for
  Llama-3 and Llama-3.2, GPT-2 for ProtGPT2, Qwen2 for Qwen2.5-Math-1.5B), saved with
  ``save_pretrained`` with its tokenizer. The Mistral, Llama and Qwen2 tokenizers have the
  special tokens and the chat template of the real family (:data:`CHAT_FORMS`):
  Mistral-7B-Instruct-v0.2's ``<s>[INST] ... [/INST]`` turns, Llama 3's
  ``<|start_header_id|>`` headers closed by ``<|eot_id|>``, Qwen2.5-Math's ``<|im_start|>``
  turns (ChatML) with no BOS token and ``<|endoftext|>`` as EOS, each special token one
  token. The Mistral, Llama and GPT-2 tokenizers are character tokenizers; the Qwen2 one is
  byte-level (a ``Qwen2Tokenizer`` over the 256 bytes, no merges: transformers loads any
  qwen2 tokenizer as its own byte-level BPE, so a character one would not survive
  ``AutoTokenizer``). The GPT-2 one keeps a plain template (``[user] ...\\n[assistant] ``;
  ProtGPT2 has none and its study renders no prompt). A base model's study (DCO's Llama-3 8B
  and Qwen2.5-Math-1.5B) renders no template either: its prompts are plain text.
  Tiny: 2 layers of width 32 to 64.
* ``data/math/train.parquet``: records in the exact schema of ``EleutherAI/hendrycks_math``
  (``problem``, ``level`` "Level k", ``type`` the subject, ``solution`` with the answer in
  ``\\boxed{}``) and ``data/math500/test.jsonl`` in the schema of ``HuggingFaceH4/MATH-500``
  (``problem``, ``solution``, ``answer``, ``subject``, ``level`` int, ``unique_id``). The
  questions are arithmetic chains (the ``arith`` problem's generator), so the stand-in
  study has something learnable; only the schema is MATH's.
* ``models/reward``: a freshly initialised Llama sequence classifier (one score), standing in
  for Skywork-Reward-V2-Llama-3.1-8B, with the Llama stand-in's tokenizer and Llama 3 template.
* ``data/ultrafeedback/{train,test}_prefs.parquet`` in the schema of
  ``HuggingFaceH4/ultrafeedback_binarized`` (``prompt``, ``prompt_id``, ``chosen`` and
  ``rejected`` as ``[{role, content}]`` conversations, ``score_chosen``, ``score_rejected``)
  and ``data/hh-rlhf/helpful-base/{train,test}.jsonl.gz`` in the schema of ``Anthropic/hh-rlhf``
  (``chosen``, ``rejected`` as "\n\nHuman: ...\n\nAssistant: ..." text), from the same questions.
* ``data/code_contests/{train,valid,test}.parquet`` in the schema of ``deepmind/code_contests``
  (all 20 columns, the class labels of ``source``, ``difficulty`` and ``solutions.language``
  in the parquet's ``huggingface`` metadata, as the hub's files carry them) and
  ``data/taco/ALL/{train,test}.parquet`` in the schema of ``BAAI/TACO`` (17 string columns,
  ``solutions`` and ``input_output`` as JSON text): real tiny programming problems
  (:data:`CONTEST_FAMILIES`, a parameter k each) whose Python 3 solutions pass their tests,
  which a reference solver here computes. Beside the Python 3 solution each CodeContests record
  has a Python 2 one (language 1) listed first, as the hub's records do; the last train problem
  has only the Python 2 one (no gold: dropped from train), and TACO test ends with one
  call-based problem (``fn_name``: skipped by the loader).
* ``data/lean/leandojo_benchmark_4/random/{train,val,test}.json`` in the schema of LeanDojo
  Benchmark 4 (:mod:`aligntrain.problems.lean`: a JSON array of theorems with ``url``,
  ``commit``, ``file_path``, ``full_name``, ``start``, ``end`` and ``traced_tactics`` of
  ``{tactic, annotated_tactic, state_before, state_after}``), for DCO §5.3's prover:
  toy propositional theorems (:data:`LEAN_TEMPLATES`: implication chains, ∧/∨/↔ swaps and
  eliminations) in the language of :class:`~aligntrain.lean.standin.StandinVerifier`,
  their traced states printed by that verifier replaying the gold proof (``state_after``
  ``"no goals"`` after the last tactic), proofs of 1 to 6 tactics (levels 1..5); 48, 8 and 8
  theorems (:func:`write_lean_standins`' sizes). The splits hold distinct theorems (by full
  name and by initial state); train ends with one more theorem, without traced tactics (a
  term-mode proof, as the release has: the loader leaves it out).

The character tokenizers' alphabet is every character of the stand-in data and the chat
markers (and every character the toy Lean language prints: :data:`LEAN_ALPHABET`), so no
stand-in text meets ``<unk>`` (a token of the character tokenizers only: the byte-level
tokenizers of Llama 3 and Qwen2.5, and the Qwen2 stand-in, have none).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aligntrain.study_folder import overlay

#: the chat template of the GPT-2 stand-in (ProtGPT2 has none): one user turn, then the assistant's reply
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}[user] {{ message['content'] }}\n{% else %}{{ message['content'] }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
)

#: Mistral-7B-Instruct-v0.2's form: ``<s>[INST] user [/INST]assistant</s>[INST] ...``. User and assistant
#: turns only, alternating from a user turn (a system turn is an error, as it is for the real template);
#: the generation prompt adds nothing (the assistant's text follows ``[/INST]``). ``[INST]`` and ``[/INST]``
#: are plain text, as in v0.2's tokenizer (control tokens only from v0.3).
MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] != 'user' and message['role'] != 'assistant' %}"
    "{{ raise_exception('this template has user and assistant turns only, no ' + message['role'] + ' turn') }}"
    "{% endif %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('turns must alternate user, assistant, user, ... starting with a user turn') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)

#: Llama 3 Instruct's form: ``<|begin_of_text|>``, then each turn as ``<|start_header_id|>role<|end_header_id|>``,
#: two newlines, the content stripped of surrounding whitespace and ``<|eot_id|>``; the generation prompt is
#: the assistant's header. Any role (system included), as the real template takes.
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

#: Qwen2.5-Math's default system turn, written when a conversation has none
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."

#: Qwen2.5-Math-1.5B's form (ChatML): each turn is ``<|im_start|>``, the role, a newline, the content, ``<|im_end|>``
#: and a newline, after a system turn (the first message when it is one, else :data:`QWEN_MATH_SYSTEM`); the
#: generation prompt is the assistant's header. No BOS. The real template's tool calls are left out.
QWEN2_MATH_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>system\\nPlease reason step by step, and put your final answer within \\\\boxed{}.' }}"
    "{{ '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] != 'system' or not loop.first %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ChatForm:
    """The special tokens and chat template of a real tokenizer family, for a character tokenizer to carry.

    ``bos``, ``unk``: None for a family whose tokenizer has none (Qwen2.5: nothing is prepended);
    ``extra``: special tokens beyond BOS, EOS, pad and unk; ``markers``: the plain text the
    template writes (its characters join the alphabet). ``byte_level``: the transformers class of a
    family whose tokenizer transformers always rebuilds as its own byte-level BPE pipeline from the
    vocabulary (Qwen2's: ``AutoTokenizer`` ignores a saved character pipeline for model type qwen2);
    its stand-in is that class over the 256 bytes, no merges (:func:`byte_level_tokenizer`).
    """

    bos: str | None
    eos: str
    pad: str
    unk: str | None
    extra: tuple[str, ...]
    template: str
    markers: str
    byte_level: str | None = None

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return tuple(token for token in (self.unk, self.bos, self.eos, self.pad, *self.extra) if token is not None)


#: family -> the form of its stand-in tokenizer. Mistral-7B-Instruct-v0.2: ``<s>``, ``</s>``, ``<unk>``.
#: Llama 3 Instruct (Llama-3.2-1B-Instruct, Skywork-Reward-V2-Llama-3.1-8B): ``<|begin_of_text|>``, EOS
#: ``<|eot_id|>`` (the end of a turn, where generation stops), the header tokens and ``<|end_of_text|>``.
#: Qwen2.5-Math-1.5B (DCO §5.3's prover, a base model): no BOS, EOS ``<|endoftext|>`` (where a base model's
#: generation stops), ``<|im_start|>`` and ``<|im_end|>``.
#: [choice] Each has a pad token (Llama 3.1's ``<|finetune_right_pad_id|>``; ``<pad>`` for Mistral and Qwen2.5,
#: whose tokenizers have none or pad with EOS), so that padding never reuses EOS, as the stand-in studies have
#: always padded.
CHAT_FORMS: dict[str, ChatForm] = {
    "mistral": ChatForm("<s>", "</s>", "<pad>", "<unk>", (), MISTRAL_CHAT_TEMPLATE, "[INST] [/INST]"),
    "llama": ChatForm(
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        "<unk>",
        ("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"),
        LLAMA3_CHAT_TEMPLATE,
        "system user assistant\n",
    ),
    "qwen2": ChatForm(
        None,
        "<|endoftext|>",
        "<pad>",
        None,
        ("<|im_start|>", "<|im_end|>"),
        QWEN2_MATH_CHAT_TEMPLATE,
        "system user assistant\n" + QWEN_MATH_SYSTEM,
        byte_level="Qwen2Tokenizer",
    ),
}

#: family -> (transformers config class, causal LM class, config keywords); the hub models they stand in for
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Mistral-7B-Instruct-v0.2 (CAT's MATH SFT): grouped-query attention, no sliding window in v0.2
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=None, intermediate_size=128),
    ),
    # Llama-3 8B (DCO, Tang et al.) and Llama-3.2-1B-Instruct (TEA): grouped-query attention
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=True),
    ),
    # ProtGPT2 (CAT's protein best-of-N): a GPT-2 architecture
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_head=4)),
    # Qwen2.5-Math-1.5B (DCO §5.3's Lean prover): grouped-query attention, tied embeddings, no sliding window
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            tie_word_embeddings=True,
            use_sliding_window=False,
        ),
    ),
}

SUBJECTS = (
    ("Algebra", "algebra"),
    ("Counting & Probability", "counting_and_probability"),
    ("Geometry", "geometry"),
    ("Intermediate Algebra", "intermediate_algebra"),
    ("Number Theory", "number_theory"),
    ("Prealgebra", "prealgebra"),
    ("Precalculus", "precalculus"),
)


def math_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``EleutherAI/hendrycks_math`` (``problem``, ``level``, ``type``, ``solution``)."""
    records = []
    for index, row in enumerate(rows):
        question = row["prompt"].removeprefix("Q: ").split("=?", 1)[0]
        steps = row["completion"].split(" #### ", 1)[0]
        records.append(
            {
                "problem": f"What is ${question}$?",
                "level": f"Level {row['level']}",
                "type": SUBJECTS[index % len(SUBJECTS)][0],
                "solution": f"We compute ${question}={steps}$, so the answer is $\\boxed{{{row['answer']}}}$.",
            }
        )
    return records


def math500_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``HuggingFaceH4/MATH-500`` (``answer`` column, integer ``level``)."""
    records = []
    for index, (record, row) in enumerate(zip(math_records(rows), rows, strict=True)):
        subject, slug = SUBJECTS[index % len(SUBJECTS)]
        records.append(
            {
                "problem": record["problem"],
                "solution": record["solution"],
                "answer": row["answer"],
                "subject": subject,
                "level": int(row["level"]),
                "unique_id": f"test/{slug}/{index}.json",
            }
        )
    return records


def ultrafeedback_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as ``HuggingFaceH4/ultrafeedback_binarized`` records: the gold reply chosen, a wrong one not."""
    records = []
    for index, row in enumerate(rows):
        prompt, reply = row["prompt"], row["completion"].strip()
        wrong = reply.rsplit(" ", 1)[0] + " 0"
        records.append(
            {
                "prompt": prompt,
                "prompt_id": f"{index:064x}",
                "chosen": [{"content": prompt, "role": "user"}, {"content": reply, "role": "assistant"}],
                "rejected": [{"content": prompt, "role": "user"}, {"content": wrong, "role": "assistant"}],
                "messages": [{"content": prompt, "role": "user"}, {"content": reply, "role": "assistant"}],
                "score_chosen": 8.0,
                "score_rejected": 2.0,
            }
        )
    return records


def hh_rlhf_records(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``arith`` rows as records of ``Anthropic/hh-rlhf`` (two dialogues as text per record)."""
    return [
        {
            "chosen": f"\n\nHuman: {r['prompt']}\n\nAssistant: {r['completion'].strip()}",
            "rejected": f"\n\nHuman: {r['prompt']}\n\nAssistant: 0",
        }
        for r in rows
    ]


@dataclass(frozen=True)
class ContestFamily:
    """One kind of stand-in contest problem with a parameter k: its statement, solutions and reference solver.

    ``statement``, ``python3`` and ``python2`` are templates with ``{k}``; ``make_input(rng)``
    draws one test input; ``solve(stdin, k)`` is the reference solver's stdout.
    """

    name: str
    statement: str
    python3: str
    python2: str
    make_input: Callable[[random.Random], str]
    solve: Callable[[str, int], str]


def _numbers_input(rng: random.Random) -> str:
    numbers = [rng.randint(-20, 40) for _ in range(rng.randint(1, 6))]
    return f"{len(numbers)}\n{' '.join(map(str, numbers))}\n"


def _numbers(stdin: str) -> list[int]:
    return [int(token) for token in stdin.split()[1:]]


_IO = "Input\n\n{input}\n\nOutput\n\n{output}"
#: the stand-in problems of the CodeContests and TACO stand-ins
CONTEST_FAMILIES: tuple[ContestFamily, ...] = (
    ContestFamily(
        "shifted_sum",
        "Print a + b + {k}.\n\n" + _IO.format(input="Two integers a and b.", output="One integer."),
        "a, b = map(int, input().split())\nprint(a + b + {k})\n",
        "a, b = map(int, raw_input().split())\nprint a + b + {k}\n",
        lambda rng: f"{rng.randint(-1000, 1000)} {rng.randint(-1000, 1000)}\n",
        lambda stdin, k: f"{sum(int(t) for t in stdin.split()) + k}\n",
    ),
    ContestFamily(
        "scaled",
        "Multiply each number by {k}.\n\n" + _IO.format(input="n, then n integers.", output="The n products."),
        "n = int(input())\nnums = list(map(int, input().split()))\nprint(*[x * {k} for x in nums])\n",
        "n = int(raw_input())\nnums = map(int, raw_input().split())\nprint ' '.join(str(x * {k}) for x in nums)\n",
        _numbers_input,
        lambda stdin, k: " ".join(str(x * k) for x in _numbers(stdin)) + "\n",
    ),
    ContestFamily(
        "above",
        "Count the numbers above {k}.\n\n" + _IO.format(input="n, then n integers.", output="One integer."),
        "input()\nprint(sum(int(x) > {k} for x in input().split()))\n",
        "raw_input()\nprint sum(int(x) > {k} for x in raw_input().split())\n",
        _numbers_input,
        lambda stdin, k: f"{sum(x > k for x in _numbers(stdin))}\n",
    ),
    ContestFamily(
        "tagged",
        "Print the word, then {k}.\n\n" + _IO.format(input="A lowercase word.", output="The word and {k}."),
        "s = input().strip()\nprint(s, {k})\n",
        "s = raw_input().strip()\nprint s, {k}\n",
        lambda rng: "".join(rng.choice("abcdexyz") for _ in range(rng.randint(1, 10))) + "\n",
        lambda stdin, k: f"{stdin.strip()} {k}\n",
    ),
    ContestFamily(
        "divisible",
        "Is x divisible by {k}?\n\n" + _IO.format(input="T, then T integers x.", output="YES or NO per x."),
        "import sys\n\ndata = sys.stdin.read().split()\nfor x in data[1:]:\n"
        '    print("YES" if int(x) % {k} == 0 else "NO")\n',
        "import sys\n\ndata = sys.stdin.read().split()\nfor x in data[1:]:\n"
        '    print "YES" if int(x) % {k} == 0 else "NO"\n',
        lambda rng: "\n".join(["3", *(str(rng.randint(0, 60)) for _ in range(3))]) + "\n",
        lambda stdin, k: "".join("YES\n" if int(x) % k == 0 else "NO\n" for x in stdin.split()[1:]),
    ),
)
#: CodeContests' class labels (deepmind/code_contests' features), in label order
CC_SOURCES = ("UNKNOWN_SOURCE", "CODECHEF", "CODEFORCES", "HACKEREARTH", "CODEJAM", "ATCODER", "AIZU")
CC_DIFFICULTIES = ("UNKNOWN_DIFFICULTY", "EASY", "MEDIUM", "HARD", "HARDER", "HARDEST", "EXTERNAL") + tuple(
    "ABCDEFGHIJKLMNOPQRSTUV"
)
CC_LANGUAGES = ("UNKNOWN_LANGUAGE", "PYTHON", "CPP", "PYTHON3", "JAVA")
TACO_COLUMNS = (
    "question", "solutions", "starter_code", "input_output", "difficulty", "raw_tags", "name", "source", "tags",
    "skill_types", "url", "Expected Auxiliary Space", "time_limit", "date", "picture_num", "memory_limit",
    "Expected Time Complexity",
)  # fmt: skip
TACO_DIFFICULTIES = ("EASY", "MEDIUM", "MEDIUM_HARD", "HARD", "VERY_HARD", "UNKNOWN_DIFFICULTY")


def code_contests_features():
    """The ``datasets`` features of ``deepmind/code_contests`` (the schema its parquet files declare)."""
    from datasets import ClassLabel, Features, Sequence, Value

    tests = Sequence({"input": Value("string"), "output": Value("string")})
    solutions = Sequence({"language": ClassLabel(names=list(CC_LANGUAGES)), "solution": Value("string")})
    return Features(
        {
            "name": Value("string"),
            "description": Value("string"),
            "public_tests": tests,
            "private_tests": tests,
            "generated_tests": tests,
            "source": ClassLabel(names=list(CC_SOURCES)),
            "difficulty": ClassLabel(names=list(CC_DIFFICULTIES)),
            "solutions": solutions,
            "incorrect_solutions": solutions,
            "cf_contest_id": Value("int64"),
            "cf_index": Value("string"),
            "cf_points": Value("float32"),
            "cf_rating": Value("int32"),
            "cf_tags": Sequence(Value("string")),
            "is_description_translated": Value("bool"),
            "untranslated_description": Value("string"),
            "time_limit": {"seconds": Value("int64"), "nanos": Value("int64")},
            "memory_limit_bytes": Value("int64"),
            "input_file": Value("string"),
            "output_file": Value("string"),
        }
    )


def contest_problem(index: int, tests: int = 6) -> dict[str, Any]:
    """Stand-in problem ``index``: family ``index % 5``, k = 2 + index // 5 (distinct statements),
    its statement with the first test as the example, Python 3 and 2 solutions, ``tests`` (stdin, stdout) pairs."""
    family = CONTEST_FAMILIES[index % len(CONTEST_FAMILIES)]
    k = 2 + index // len(CONTEST_FAMILIES)
    rng = random.Random(f"aligntrain/standins/contest:{index}")
    inputs: list[str] = []
    while len(inputs) < tests:
        stdin = family.make_input(rng)
        if stdin not in inputs:
            inputs.append(stdin)
    pairs = [(stdin, family.solve(stdin, k)) for stdin in inputs]
    example = f"\n\nExample\n\nInput\n\n{pairs[0][0]}\nOutput\n\n{pairs[0][1]}"
    return {
        "name": f"{family.name}_{k}",
        "statement": family.statement.format(k=k) + example,
        "python3": family.python3.format(k=k),
        "python2": family.python2.format(k=k),
        "tests": pairs,
    }


def code_contests_records(first: int, n: int, *, last_unsolved: bool = False) -> list[dict[str, Any]]:
    """Stand-in problems ``first`` .. ``first + n - 1`` as ``deepmind/code_contests`` records: 1 public,
    2 private and 3 generated tests; sources and difficulties cycle through Codeforces (rated),
    CodeChef (EXTERNAL) and HackerEarth (EASY..HARDEST). ``last_unsolved``: the last record has no
    Python 3 solution."""
    records = []
    for index in range(first, first + n):
        problem = contest_problem(index)
        tests = problem["tests"]
        kind = index % 3
        languages, solutions = [1, 3], [problem["python2"], problem["python3"]]
        if last_unsolved and index == first + n - 1:
            languages, solutions = [1], [problem["python2"]]
        records.append(
            {
                "name": f"{index}_{problem['name']}",
                "description": problem["statement"],
                "public_tests": {"input": [tests[0][0]], "output": [tests[0][1]]},
                "private_tests": {"input": [t[0] for t in tests[1:3]], "output": [t[1] for t in tests[1:3]]},
                "generated_tests": {"input": [t[0] for t in tests[3:]], "output": [t[1] for t in tests[3:]]},
                "source": (2, 1, 3)[kind],
                "difficulty": (7 + index % 4, 6, 1 + index % 5)[kind],
                "solutions": {"language": languages, "solution": solutions},
                "incorrect_solutions": {"language": [3], "solution": ["print(0)\n"]},
                "cf_contest_id": 1000 + index if kind == 0 else 0,
                "cf_index": "ABCD"[index % 4] if kind == 0 else "",
                "cf_points": 0.0,
                "cf_rating": 800 + 300 * (index % 8) if kind == 0 else 0,
                "cf_tags": ["implementation"] if kind == 0 else [],
                "is_description_translated": False,
                "untranslated_description": "",
                "time_limit": {"seconds": 2, "nanos": 0} if kind != 1 else None,
                "memory_limit_bytes": 256_000_000,
                "input_file": "",
                "output_file": "",
            }
        )
    return records


def taco_records(first: int, n: int, *, call_based: bool = False) -> list[dict[str, Any]]:
    """Stand-in problems ``first`` .. ``first + n - 1`` as ``BAAI/TACO`` records (every column a string);
    ``call_based``: one more record of a call-based problem (``fn_name``), as TACO's LeetCode and
    Codewars problems are."""
    records = []
    for index in range(first, first + n):
        problem = contest_problem(index)
        tests = problem["tests"]
        record = dict.fromkeys(TACO_COLUMNS, "")
        record.update(
            question=problem["statement"],
            solutions=json.dumps([problem["python3"]]),
            input_output=json.dumps({"inputs": [t[0] for t in tests], "outputs": [t[1] for t in tests]}),
            difficulty=TACO_DIFFICULTIES[index % len(TACO_DIFFICULTIES)],
            raw_tags="['implementation']",
            name=problem["name"],
            source="codeforces",
            tags="['Implementation']",
            skill_types="[]",
            url=f"https://codeforces.com/problemset/problem/{1000 + index}/A",
            time_limit="2 seconds",
            date="2020-01-01",
            picture_num="0",
            memory_limit="256 megabytes",
        )
        records.append(record)
    if call_based:
        record = dict.fromkeys(TACO_COLUMNS, "")
        record.update(
            question="Write a function add(a, b) that returns the sum of a and b.",
            solutions=json.dumps(["def add(a, b):\n    return a + b\n"]),
            starter_code="def add(a, b):\n\t",
            input_output=json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]}),
            difficulty="EASY",
            name="add",
            source="codewars",
        )
        records.append(record)
    return records


def write_contest_standins(folder: Path, *, train: int, valid: int, test: int) -> dict[str, Path]:
    """The CodeContests and TACO stand-ins under ``folder/data`` (module docstring); their paths by name.

    CodeContests train, valid, test and TACO train, test hold disjoint problems.
    """
    import datasets

    paths = {}
    first = 0
    for split, n in (("train", train), ("valid", valid), ("test", test)):
        records = code_contests_records(first, n, last_unsolved=split == "train")
        paths[f"code_contests_{split}"] = folder / "data" / "code_contests" / f"{split}.parquet"
        paths[f"code_contests_{split}"].parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_list(records, features=code_contests_features()).to_parquet(
            paths[f"code_contests_{split}"]
        )
        first += n
    for split, n in (("train", train), ("test", test)):
        records = taco_records(first, n, call_based=split == "test")
        paths[f"taco_{split}"] = folder / "data" / "taco" / "ALL" / f"{split}.parquet"
        paths[f"taco_{split}"].parent.mkdir(parents=True, exist_ok=True)
        features = datasets.Features({column: datasets.Value("string") for column in TACO_COLUMNS})
        datasets.Dataset.from_list(records, features=features).to_parquet(paths[f"taco_{split}"])
        first += n
    return paths


def contest_texts(n: int) -> list[str]:
    """Every text of the first ``n`` stand-in problems as a row holds it (for the tokenizer's alphabet)."""
    from aligntrain.problems.code_contests import format_prompt as contest_prompt
    from aligntrain.problems.code_contests import gold_completion

    texts = []
    for index in range(n):
        problem = contest_problem(index)
        texts += [contest_prompt(problem["statement"]), gold_completion(problem["python3"])]
        texts += [json.dumps(problem["tests"])]
    return texts


# ---------------------------------------------------------------------------
# LeanDojo Benchmark 4 stand-in (DCO §5.3): toy propositional theorems the stand-in prover replays


@dataclass(frozen=True)
class LeanTemplate:
    """One kind of toy theorem over ``arity`` distinct proposition variables, with its gold proof.

    ``build(names)`` gives the theorem's first goal (a :class:`~aligntrain.lean.standin.Goal`) and
    the gold proof's tactics; ``group`` names the (made-up) file that declares it.
    """

    name: str
    group: str
    arity: int
    build: Callable[[tuple[str, ...]], tuple[Any, tuple[str, ...]]]


def _lean_goal(names: tuple[str, ...], hypotheses: list[tuple[str, Any]], target: Any):
    from aligntrain.lean.standin import PROP, Goal

    return Goal(tuple((name, PROP) for name in names) + tuple(hypotheses), target)


def _imp(a, b):
    return ("→", a, b)


def _and(a, b):
    return ("∧", a, b)


def _or(a, b):
    return ("∨", a, b)


def _iff(a, b):
    return ("↔", a, b)


_SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _h(*names: str) -> str:
    """A hypothesis named after the propositions it proves: ``hp``, ``hpq``."""
    return "h" + "".join(names)


def _chain(k: int, intro: bool) -> LeanTemplate:
    """Hypotheses h₁ : a₀ → a₁, …, h_k : a_{k-1} → a_k; the goal a₀ → a_k (``intro``), else a_k with a
    proof of a₀. Proof: (intro,) apply h_k, …, apply h₂, exact h₁ _: k tactics, one more with intro."""

    def build(v):
        steps = [(f"h{i}".translate(_SUB), _imp(v[i - 1], v[i])) for i in range(1, k + 1)]
        applies = [f"apply h{i}".translate(_SUB) for i in range(k, 1, -1)]
        if intro:
            return _lean_goal(v, steps, _imp(v[0], v[k])), (f"intro {_h(v[0])}", *applies, f"exact h₁ {_h(v[0])}")
        return _lean_goal(v, [*steps, (_h(v[0]), v[0])], v[k]), (*applies, f"exact h₁ {_h(v[0])}")

    return LeanTemplate(f"imp_chain{k}" + ("_intro" if intro else ""), "Implication", k + 1, build)


def _template(name: str, group: str, arity: int, build) -> LeanTemplate:
    return LeanTemplate(name, group, arity, lambda v: build(*v))


#: the toy theorems of the LeanDojo stand-in: every tactic form of the stand-in prover, proofs of 1 to 6 tactics
#: (hypotheses are named after their propositions, as ``hp : p``)
LEAN_TEMPLATES: tuple[LeanTemplate, ...] = (
    *(_chain(k, intro) for k in range(1, 6) for intro in (False, True)),
    _template("and_left", "And", 2, lambda p, q: (_lean_goal((p, q), [("h", _and(p, q))], p), ("exact h.1",))),
    _template(
        "and_right", "And", 2,
        lambda p, q: (
            _lean_goal((p, q), [("h", _and(p, q))], q), (f"obtain ⟨{_h(p)}, {_h(q)}⟩ := h", f"exact {_h(q)}")
        ),
    ),
    _template(
        "and_swap", "And", 2,
        lambda p, q: (_lean_goal((p, q), [], _imp(_and(p, q), _and(q, p))), ("intro h", "exact ⟨h.2, h.1⟩")),
    ),
    _template(
        "and_swap_cases", "And", 2,
        lambda p, q: (
            _lean_goal((p, q), [], _imp(_and(p, q), _and(q, p))),
            ("intro h", f"rcases h with ⟨{_h(p)}, {_h(q)}⟩", "constructor", f"exact {_h(q)}", f"exact {_h(p)}"),
        ),
    ),
    _template(
        "and_assoc", "And", 3,
        lambda p, q, r: (
            _lean_goal((p, q, r), [("h", _and(_and(p, q), r))], _and(p, _and(q, r))),
            (
                f"rcases h with ⟨{_h(p, q)}, {_h(r)}⟩",
                f"rcases {_h(p, q)} with ⟨{_h(p)}, {_h(q)}⟩",
                f"exact ⟨{_h(p)}, ⟨{_h(q)}, {_h(r)}⟩⟩",
            ),
        ),
    ),
    _template(
        "and_true", "And", 1,
        lambda p: (_lean_goal((p,), [(_h(p), p)], _and(p, "True")), ("constructor", "assumption", "trivial")),
    ),
    _template(
        "curry", "And", 3,
        lambda p, q, r: (
            _lean_goal((p, q, r), [], _imp(_imp(_and(p, q), r), _imp(p, _imp(q, r)))),
            (f"intro h {_h(p)} {_h(q)}", f"exact h ⟨{_h(p)}, {_h(q)}⟩"),
        ),
    ),
    _template(
        "modus_ponens", "Implication", 2,
        lambda p, q: (
            _lean_goal((p, q), [], _imp(p, _imp(_imp(p, q), q))),
            (f"intro {_h(p)} {_h(p, q)}", f"exact {_h(p, q)} {_h(p)}"),
        ),
    ),
    _template(
        "or_inl", "Or", 2,
        lambda p, q: (_lean_goal((p, q), [(_h(p), p)], _or(p, q)), ("left", f"exact {_h(p)}")),
    ),
    _template(
        "or_elim", "Or", 3,
        lambda p, q, r: (
            _lean_goal((p, q, r), [(_h(p, r), _imp(p, r)), (_h(q, r), _imp(q, r))], _imp(_or(p, q), r)),
            ("intro h", f"rcases h with {_h(p)} | {_h(q)}", f"exact {_h(p, r)} {_h(p)}", f"exact {_h(q, r)} {_h(q)}"),
        ),
    ),
    _template(
        "or_swap", "Or", 2,
        lambda p, q: (
            _lean_goal((p, q), [], _imp(_or(p, q), _or(q, p))),
            ("intro h", f"rcases h with {_h(p)} | {_h(q)}", "right", f"exact {_h(p)}", "left", "assumption"),
        ),
    ),
    _template(
        "iff_mp", "Iff", 2,
        lambda p, q: (_lean_goal((p, q), [("h", _iff(p, q)), (_h(p), p)], q), (f"exact h.mp {_h(p)}",)),
    ),
    _template(
        "iff_mpr", "Iff", 2,
        lambda p, q: (_lean_goal((p, q), [("h", _iff(p, q)), (_h(q), q)], p), ("apply h.mpr", "assumption")),
    ),
    _template(
        "iff_intro", "Iff", 2,
        lambda p, q: (
            _lean_goal((p, q), [(_h(p, q), _imp(p, q)), (_h(q, p), _imp(q, p))], _iff(p, q)),
            (f"exact ⟨{_h(p, q)}, {_h(q, p)}⟩",),
        ),
    ),
    _template(
        "iff_intro_split", "Iff", 2,
        lambda p, q: (
            _lean_goal((p, q), [(_h(p, q), _imp(p, q)), (_h(q, p), _imp(q, p))], _iff(p, q)),
            ("constructor", f"exact {_h(p, q)}", f"exact {_h(q, p)}"),
        ),
    ),
    _template(
        "iff_symm", "Iff", 2,
        lambda p, q: (
            _lean_goal((p, q), [], _imp(_iff(p, q), _iff(q, p))),
            ("intro h", "constructor", "exact h.mpr", "exact h.mp"),
        ),
    ),
)  # fmt: skip
#: the proposition names theorems draw from (``h`` starts every hypothesis name)
LEAN_VARIABLES = "abcdefgkmnpqrstuvwxyz"
#: every character the toy Lean language prints (connectives, brackets, subscripts), beyond the data's own
LEAN_ALPHABET = "∧∨→↔⊢⟨⟩(),.|:= _'" + "₀₁₂₃₄₅₆₇₈₉" + "0123456789"
#: the repository the made-up theorems name (the release's is mathlib4); no Lean project holds them
LEAN_URL = "https://github.com/leanprover-community/mathlib4"
LEAN_COMMIT = "0" * 40


def _lean_level(template: LeanTemplate) -> int:
    return min(len(template.build(tuple(LEAN_VARIABLES[: template.arity]))[1]), 5)


def _traced(template: LeanTemplate, names: tuple[str, ...]) -> tuple[str, list[dict[str, Any]]]:
    """(initial state, traced tactics) of ``template`` over ``names``: the stand-in prover replays the gold proof
    and prints every state (``"no goals"`` after the last tactic); RuntimeError if a tactic fails."""
    from aligntrain.lean.standin import StandinVerifier, format_goal
    from aligntrain.lean.verifier import LeanState, ProofFinished, Theorem
    from aligntrain.problems.lean import LEANDOJO, NO_GOALS

    goal, tactics = template.build(names)
    verifier = StandinVerifier()
    state = verifier.start(Theorem(name=template.name, source=LEANDOJO, initial_state=format_goal(goal)))
    if not isinstance(state, LeanState):
        raise RuntimeError(f"template {template.name!r} over {names}: the prover cannot start it: {state!r}")
    traced = []
    for index, tactic in enumerate(tactics):
        after = verifier.step(state, tactic)
        last = index == len(tactics) - 1
        if not (isinstance(after, ProofFinished) if last else isinstance(after, LeanState)):
            raise RuntimeError(f"template {template.name!r} over {names}: tactic {index} {tactic!r} gives {after!r}")
        after_text = NO_GOALS if last else after.text
        traced.append(
            {"tactic": tactic, "annotated_tactic": [tactic, []], "state_before": state.text, "state_after": after_text}
        )
        state = after
    return traced[0]["state_before"], traced


def leandojo_records(train: int, valid: int, test: int, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The stand-in theorems as LeanDojo Benchmark 4 records, by file (``train.json``, ``val.json``, ``test.json``).

    Theorem i has level 1 + i mod 5 (train first, then val, then test), a template of that level and
    proposition names drawn (seeded by ``seed``) until its initial state is new: the splits hold distinct
    full names and initial states. ``train.json`` ends with one more theorem, without traced tactics.
    """
    rng = random.Random(f"aligntrain/standins/lean:{seed}")
    by_level: dict[int, list[LeanTemplate]] = {}
    for template in LEAN_TEMPLATES:
        by_level.setdefault(_lean_level(template), []).append(template)
    seen: set[str] = set()
    lines: dict[str, int] = {}  # the next free line of each made-up file
    theorems = []
    for index in range(train + valid + test):
        for _ in range(1000):
            template = rng.choice(by_level[1 + index % 5])
            names = tuple(rng.sample(LEAN_VARIABLES, template.arity))
            state, traced = _traced(template, names)
            if state not in seen:
                break
        else:
            raise ValueError(f"{train + valid + test} theorems asked for: the templates give no new one at {index}")
        seen.add(state)
        file_path = f"StandIn/Logic/{template.group}.lean"
        start = lines.get(file_path, 1)
        lines[file_path] = start + len(traced) + 2  # the declaration, a line per tactic, a blank line
        theorems.append(
            {
                "url": LEAN_URL,
                "commit": LEAN_COMMIT,
                "file_path": file_path,
                "full_name": f"StandIn.{template.name}_{''.join(names)}",
                "start": [start, 1],
                "end": [start + len(traced), 3 + len(traced[-1]["tactic"])],
                "traced_tactics": traced,
            }
        )
    term_mode = {
        "url": LEAN_URL,
        "commit": LEAN_COMMIT,
        "file_path": "StandIn/Logic/Basic.lean",
        "full_name": "StandIn.true_intro",
        "start": [1, 1],
        "end": [1, 38],
        "traced_tactics": [],
    }
    return {
        "train.json": [*theorems[:train], term_mode],
        "val.json": theorems[train : train + valid],
        "test.json": theorems[train + valid :],
    }


def write_lean_standins(
    folder: str | Path, *, train: int = 48, valid: int = 8, test: int = 8, seed: int = 0
) -> dict[str, Path]:
    """The LeanDojo Benchmark 4 stand-in under ``folder/data/lean`` (module docstring); its paths by name.

    ``leandojo``: the release folder (``leandojo_benchmark_4``, problem ``lean``'s option ``leandojo``, where
    the study keeps the real one: ``data/lean/``); ``leandojo_train``, ``leandojo_val``, ``leandojo_test``:
    the files of its ``random`` split.
    """
    root = Path(folder) / "data" / "lean" / "leandojo_benchmark_4"
    (root / "random").mkdir(parents=True, exist_ok=True)
    paths = {"leandojo": root}
    for file, records in leandojo_records(train, valid, test, seed).items():
        paths[f"leandojo_{file.removesuffix('.json')}"] = root / "random" / file
        text = json.dumps(records, ensure_ascii=False, indent=1) + "\n"
        (root / "random" / file).write_text(text, encoding="utf-8")
    return paths


def lean_texts(leandojo: str | Path) -> list[str]:
    """Every text the ``lean`` problem reads from a written LeanDojo stand-in: step prompts, tactics, states."""
    from aligntrain.problems.lean import NO_GOALS, format_prompt, read_leandojo

    texts = [format_prompt(""), NO_GOALS, LEAN_ALPHABET]
    for file in ("train.json", "val.json", "test.json"):
        for traced in read_leandojo(Path(leandojo) / "random" / file):
            texts += [traced.theorem.name]
            for step in traced.steps:
                texts += [format_prompt(step.state_before), step.tactic, step.state_after]
    return texts


def chat_tokenizer(family: str, texts: list[str]):
    """A character tokenizer over ``texts`` with the special tokens and chat template of ``family``.

    The form is :data:`CHAT_FORMS`' entry for ``family``. As
    :func:`aligntrain.models.tiny.build_char_tokenizer`, each character is one token and every
    encoded text starts with BOS (where the family has one); each special token is registered as one
    (never split into characters). A byte-level family (Qwen2) gets :func:`byte_level_tokenizer`,
    which reads every text.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    form = CHAT_FORMS[family]
    if form.byte_level is not None:
        return byte_level_tokenizer(form)
    alphabet = sorted({ch for text in [*texts, form.markers] for ch in text})
    vocab = {token: i for i, token in enumerate([*form.special_tokens, *alphabet])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=form.unk))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    if form.bos is not None:
        core.post_processor = processors.TemplateProcessing(
            single=f"{form.bos} $A", pair=f"{form.bos} $A $B", special_tokens=[(form.bos, vocab[form.bos])]
        )
    core.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in form.special_tokens])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, **_special_tokens_of(form))
    tokenizer.chat_template = form.template
    return tokenizer


def _special_tokens_of(form: ChatForm) -> dict[str, Any]:
    """A tokenizer constructor's keywords for ``form``'s special tokens."""
    return {
        "bos_token": form.bos,
        "eos_token": form.eos,
        "pad_token": form.pad,
        "unk_token": form.unk,
        "extra_special_tokens": list(form.extra),
    }


def _byte_symbols() -> list[str]:
    """The 256 byte-level BPE symbols (GPT-2's ``bytes_to_unicode``), in the order of GPT-2's and Qwen2's first ids."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [byte for byte in range(256) if byte not in printable]
    return [chr(byte) for byte in printable] + [chr(256 + index) for index in range(len(rest))]


def byte_level_tokenizer(form: ChatForm):
    """``form.byte_level``'s own tokenizer class over a vocabulary of the 256 bytes and the special tokens, no merges.

    Every UTF-8 byte of a text is one token (a Lean symbol such as ``⊢`` is three), so no text is
    unknown and decoding gives the text back; the special tokens are one token each. It is the
    pipeline ``AutoTokenizer`` rebuilds when it loads the saved tokenizer (for Qwen2: NFC, Qwen's
    pre-tokenizing regex, byte-level), so what is saved is what is loaded.
    """
    import transformers

    vocab = {token: index for index, token in enumerate([*_byte_symbols(), *form.special_tokens])}
    tokenizer = getattr(transformers, form.byte_level)(vocab=vocab, merges=[], **_special_tokens_of(form))
    tokenizer.chat_template = form.template
    return tokenizer


def tiny_reward_model(tokenizer, *, hidden_size: int = 32, num_layers: int = 2, max_length: int = 512):
    """A freshly initialised Llama sequence classifier with one score over ``tokenizer``'s vocabulary."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        max_position_embeddings=max_length,
        num_labels=1,
        **FAMILIES["llama"][2],
    )
    torch.manual_seed(1)
    return transformers.LlamaForSequenceClassification(config)


def tiny_causal_lm(family: str, tokenizer, *, hidden_size: int = 32, num_layers: int = 2, max_length: int = 512):
    """A freshly initialised causal LM of ``family`` (:data:`FAMILIES`) over ``tokenizer``'s vocabulary."""
    import torch
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; stand-ins exist for {sorted(FAMILIES)}")
    config_name, model_name, extra = FAMILIES[family]
    special = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if family == "gpt2":
        sizes = dict(n_embd=hidden_size, n_layer=num_layers, n_positions=max_length)
    else:
        sizes = dict(hidden_size=hidden_size, num_hidden_layers=num_layers, max_position_embeddings=max_length)
    config = getattr(transformers, config_name)(**special, **sizes, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config)


def write_standins(folder: str | Path, *, train_size: int = 256, test_size: int = 32) -> dict[str, Path]:
    """Write every stand-in under ``folder`` (module docstring); returns their paths by name.

    Models by family (:data:`FAMILIES`) and ``reward``; data by data set and split (``math_train``,
    ``code_contests_valid``, ``leandojo`` the LeanDojo release folder, ...).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aligntrain.grading import ANSWER_MARKER
    from aligntrain.io import write_text
    from aligntrain.models.tiny import build_char_tokenizer
    from aligntrain.problems import get_problem, hydro
    from aligntrain.problems.hub import format_prompt

    folder = Path(folder)
    splits = get_problem("arith").generate_splits(
        {"train": train_size, "test": test_size}, levels=[1, 2, 3, 4, 5], seed=0
    )
    train, test = math_records(splits["train"]), math500_records(splits["test"])
    paths = {
        "math_train": folder / "data" / "math" / "train.parquet",
        "math500_test": folder / "data" / "math500" / "test.jsonl",
    }
    paths["math_train"].parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(train), paths["math_train"])
    write_text(paths["math500_test"], "".join(json.dumps(record) + "\n" for record in test))
    for split, split_rows in (("train", splits["train"]), ("test", splits["test"])):
        paths[f"ultrafeedback_{split}"] = folder / "data" / "ultrafeedback" / f"{split}_prefs.parquet"
        paths[f"ultrafeedback_{split}"].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(ultrafeedback_records(split_rows)), paths[f"ultrafeedback_{split}"])
        paths[f"hh_rlhf_{split}"] = folder / "data" / "hh-rlhf" / "helpful-base" / f"{split}.jsonl.gz"
        paths[f"hh_rlhf_{split}"].parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps(record) + "\n" for record in hh_rlhf_records(split_rows))
        paths[f"hh_rlhf_{split}"].write_bytes(gzip.compress(lines.encode(), mtime=0))

    contest_sizes = dict(train=max(train_size // 4, 4), valid=8, test=max(test_size // 2, 4))
    paths.update(write_contest_standins(folder, **contest_sizes))
    paths.update(write_lean_standins(folder))  # 48, 8 and 8 theorems: enough for the dco_lean stand-in's sizes

    texts = [value for record in [*train, *test] for value in record.values() if isinstance(value, str)]
    texts += contest_texts(2 * sum(contest_sizes.values()) - contest_sizes["valid"])
    # The 20 residues and the hydro task markers, so that the GPT-2 stand-in (ProtGPT2) reads hydro rows too.
    texts += [format_prompt("?"), ANSWER_MARKER, "[user] [assistant] \n0123456789", hydro.ALPHABET, "U:C:"]
    texts += lean_texts(paths["leandojo"])
    tokenizers = {family: chat_tokenizer(family, texts) for family in CHAT_FORMS}
    tokenizers["gpt2"] = build_char_tokenizer(texts)
    tokenizers["gpt2"].chat_template = CHAT_TEMPLATE
    for family in FAMILIES:
        paths[family] = folder / "models" / family
        tiny_causal_lm(family, tokenizers[family]).save_pretrained(paths[family])
        tokenizers[family].save_pretrained(paths[family])
    paths["reward"] = folder / "models" / "reward"
    tiny_reward_model(tokenizers["llama"]).save_pretrained(paths["reward"])
    tokenizers["llama"].save_pretrained(paths["reward"])
    return paths


# The `micro` size (`scripts/run_standin.py --micro`): laid over a stand-in study so that it checks the
# wiring, not the learning, in about a minute. Every stage still runs, with the study's own model
# family, data schemas, objectives and rules; only the step counts and the diagnostics' own
# sampling shrink. Group sizes, budgets and pool sizes stay the stand-in's: they are what the
# stages' shapes depend on.
MICRO: dict[str, Any] = {
    "pretrain": {"steps": 2, "checkpoint_every": 1, "log_every": 1},
    "warmup": {"steps": 2, "checkpoint_every": 1, "log_every": 1},
    "train": {"steps": 2, "checkpoint_every": 1, "log_every": 1},
    "rl": {"steps": 2, "checkpoint_every": 1, "log_every": 1},
    "evaluate": {"bootstrap_resamples": 20},
    "diagnostics": {
        "oracle": {"prompts": 2, "seeds": 1},
        "synthetic": {"bandit_steps": 10, "bandit_seeds": 2, "tea_group_sizes": [16], "tea_repetitions": 50},
    },
}


def restrict_run(params: Mapping[str, Any], run: list[str]) -> dict[str, Any]:
    """``params`` with ``study.run`` set to ``run``.

    ``compare.baseline`` and ``diagnostics.oracle.variant`` must name variants of the run; where
    ``run`` leaves theirs out, they become its first variant.
    """
    if not run:
        raise ValueError("study.run: give at least one variant")
    unknown = [name for name in run if name not in params.get("variants", {})]
    if unknown:
        raise ValueError(f"study.run: {unknown} not in the catalog {sorted(params.get('variants', {}))}")
    restricted = overlay(params, {"study": {"run": list(run)}})
    if restricted.get("compare", {}).get("baseline", "ce") not in run:
        restricted = overlay(restricted, {"compare": {"baseline": run[0]}})
    if restricted.get("diagnostics", {}).get("oracle", {}).get("variant", "warmup") not in run:
        restricted = overlay(restricted, {"diagnostics": {"oracle": {"variant": run[0]}}})
    return restricted
