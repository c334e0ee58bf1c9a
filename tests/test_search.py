"""The test-time proof search (aligntrain.rollouts.search): one tactic a round, each checked by the verifier.

The policy here is scripted (it stands in for ``sample_from_token_ids``), so each attempt's length,
verifier calls and outcome are known exactly; the proof texts are then graded by the problem's own
replay of a whole proof, a check independent of the search loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aligntrain.problems import rewrite
from aligntrain.problems.rewrite import RewriteProblem
from aligntrain.rollouts import search
from aligntrain.rollouts.generate import Completion, SamplingConfig
from aligntrain.rollouts.search import StepSearch, search_proofs, tactic_of


class _TextTokenizer:
    """Hands the prompts through as they are, so the scripted policy reads them."""

    def __call__(self, prompts):
        return {"input_ids": list(prompts)}


def _scripted(policy):
    """A stand-in for sample_from_token_ids: ``policy(prompt)`` gives each prompt's one step."""

    def sample(model, tokenizer, prompt_ids, samples_per_prompt, sampling, *, batch_size, seed, progress):
        assert samples_per_prompt == 1 and sampling.stop
        out = []
        for index, prompt in enumerate(prompt_ids):
            text = policy(prompt)
            out.append(Completion(index, 0, text, -1.0, len(text), True, (7,) * len(text)))
        return out

    return sample


def _state(prompt: str) -> str:
    expression, _, done = rewrite.parse_prompt(prompt)
    for tactic in done:
        expression = rewrite.check_step(expression, tactic)
    return expression


def _leftmost(prompt: str) -> str:
    """A policy that always proves: the first valid tactic, ended as the problem writes it."""
    return rewrite.valid_tactics(_state(prompt))[0] + rewrite.SEPARATOR


@pytest.fixture(scope="module")
def goals():
    rows = rewrite.generate_splits({"test": 12}, seed=5)["test"]
    return [r for r in rows if len(rewrite.gold_proof(rewrite.parse_prompt(r["prompt"])[0])) >= 2][:6]


def _search(monkeypatch, policy, rows, attempts=2, problem=None):
    monkeypatch.setattr(search, "sample_from_token_ids", _scripted(policy))
    return search_proofs(
        None, _TextTokenizer(), problem or RewriteProblem(), rows, attempts, SamplingConfig(), batch_size=4, seed=0
    )


def test_the_problems_of_step_proofs_are_searchable():
    from aligntrain.problems.lean import LeanProblem

    assert isinstance(RewriteProblem(), StepSearch) and isinstance(LeanProblem(verifier="standin"), StepSearch)


def test_tactic_of_cuts_at_the_first_stop():
    assert tactic_of("eval 2*3=6; eval 1+1=2\n", ("; ", "\n")) == "eval 2*3=6"
    assert tactic_of(" eval 6+20=26\n", ("; ", "\n")) == "eval 6+20=26"
    assert tactic_of("eval 1+1=2", ("; ", "\n")) == "eval 1+1=2"
    assert tactic_of("\n", ("; ", "\n")) == ""


def test_a_policy_that_proves_uses_one_verifier_call_per_operation(monkeypatch, goals):
    found = _search(monkeypatch, _leftmost, goals)
    assert len(found.completions) == 2 * len(goals)
    for completion, calls in zip(found.completions, found.verifier_calls, strict=True):
        row = goals[completion.prompt_index]
        steps = len(rewrite.gold_proof(rewrite.parse_prompt(row["prompt"])[0]))
        assert calls == steps and completion.logp == -float(steps) and completion.finished
        assert rewrite.grade(completion.text, row).correct, completion.text
        assert completion.text.endswith(rewrite.STOP_TEXT) and completion.text.count(rewrite.SEPARATOR) == steps - 1


def test_an_invalid_tactic_ends_the_attempt_unproved(monkeypatch, goals):
    def second_step_wrong(prompt):
        return "eval 1+1=3; " if rewrite.parse_prompt(prompt)[2] else _leftmost(prompt)

    found = _search(monkeypatch, second_step_wrong, goals, attempts=1)
    assert found.verifier_calls == [2] * len(goals)
    for completion in found.completions:
        assert completion.finished and completion.text.endswith("; eval 1+1=3\n")
        assert not rewrite.grade(completion.text, goals[completion.prompt_index]).correct


def test_an_empty_step_is_invalid(monkeypatch, goals):
    found = _search(monkeypatch, lambda prompt: "\n", goals[:2], attempts=3)
    assert found.verifier_calls == [1] * 6
    assert all(not rewrite.grade(c.text, goals[c.prompt_index]).correct for c in found.completions)


def test_the_depth_limit_cuts_an_attempt(monkeypatch, goals):
    monkeypatch.setattr(RewriteProblem, "max_search_steps", 1)
    found = _search(monkeypatch, _leftmost, goals, attempts=1)
    assert found.verifier_calls == [1] * len(goals)
    assert not any(c.finished for c in found.completions), "cut by the limit, neither proved nor refuted"


def test_a_step_model_and_a_proof_model_are_searched_alike(monkeypatch, goals):
    """A policy that writes the whole rest of the proof in one step (a whole-proof model) is cut at the
    separator: the search reads one tactic a round, so the same proof is found with the same calls."""

    def whole_rest(prompt):
        state, tactics = _state(prompt), []
        while not rewrite.is_proved(state, rewrite.parse_prompt(prompt)[1]):
            tactics.append(rewrite.valid_tactics(state)[0])
            state = rewrite.check_step(state, tactics[-1])
        return rewrite.proof_completion(tactics)

    one, rest = _search(monkeypatch, _leftmost, goals), _search(monkeypatch, whole_rest, goals)
    assert [c.text for c in one.completions] == [c.text for c in rest.completions]
    assert one.verifier_calls == rest.verifier_calls


def test_a_lean_attempt_is_stepped_by_the_verifier(monkeypatch):
    """The stand-in Lean prover: the prompt is the current state (LeanDojo's form), the gold tactic for each."""
    from aligntrain.lean.standin import StandinVerifier
    from aligntrain.lean.verifier import Theorem
    from aligntrain.problems.lean import LeanProblem, format_prompt

    theorem = Theorem(name="t", source="minif2f", statement="theorem t (p : Prop) : p → True ∧ p := by")
    proof = ["intro hp", "constructor", "trivial", "exact hp"]
    verifier, tactic_at = StandinVerifier(), {}
    state = verifier.start(theorem)
    for tactic in proof:
        tactic_at[format_prompt(state.text)] = tactic
        state = verifier.step(state, tactic)
    row = {"id": "lean-mf-L1-0", "level": 1, "prompt": "", "completion": "", "answer": theorem.to_json()}
    problem = LeanProblem(verifier="standin")
    found = _search(monkeypatch, lambda prompt: tactic_at[prompt] + "\n", [row], attempts=2, problem=problem)
    assert found.verifier_calls == [4, 4]
    assert all(c.text == "intro hp\nconstructor\ntrivial\nexact hp\n" for c in found.completions)
    assert problem.grade(found.completions[0].text, row).correct


def test_the_rollouts_stage_searches_a_step_verified_problem(tmp_path):
    """rollouts@warmup on `rewrite`: the pool's attempts come from the search, each with its verifier calls,
    and grade as their proof texts do."""
    import yaml

    from aligntrain.config import parse_params
    from aligntrain.models import build_char_tokenizer, build_tiny_llama
    from aligntrain.paths import StudyPaths
    from aligntrain.rollouts.pool import read_pool
    from aligntrain.stages.rollouts import generate_pool

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["problem"] = {"name": "rewrite", "levels": [1, 2, 3], "train_size": 64, "validation_size": 8, "test_size": 4}
    used = {*raw["study"]["run"], *raw["diagnostics"]["oracle"]["rules"]}
    raw["variants"] = {name: spec for name, spec in raw["variants"].items() if name in used}
    raw["rollouts"].update(samples_per_prompt=4, max_new_tokens=16, batch_size=8)
    raw["compare"]["primary"]["score"] = "pass@4"
    raw["diagnostics"]["budgets"] = [2, 4]
    params = parse_params(raw)
    rows = rewrite.generate_splits({"test": 4}, seed=1)["test"]
    tokenizer = build_char_tokenizer(rewrite.pretrain_corpus(50) + [r["prompt"] for r in rows])
    model = build_tiny_llama(
        tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=256, seed=0
    )
    paths = StudyPaths(tmp_path / "study")
    model.save_pretrained(paths.variant_model("warmup"))
    tokenizer.save_pretrained(paths.variant_model("warmup"))
    metrics = generate_pool(params, paths, "warmup", rows)
    pool = read_pool(paths.pool("warmup"))
    assert len(pool) == 16 and (pool.verifier_calls >= 1).all()
    assert metrics["verifier_calls_per_attempt"] == pool.verifier_calls.mean()
    for row in pool.itertuples():
        prompt = next(r for r in rows if r["id"] == row.prompt_id)
        assert row.correct == rewrite.grade(row.text, prompt).correct
        # a random policy: the attempt ended at its first invalid tactic, one call per tactic written
        assert row.verifier_calls == row.text.count(rewrite.SEPARATOR) + 1


def test_a_stop_text_ends_each_sampled_completion_where_it_first_appears(tiny_model, arith_rows):
    """The search's tactic stops, on a random model: a completion holding a stop text ends with its first
    occurrence, and its log π is the one a separate forward pass over exactly its tokens gives."""
    from aligntrain.rollouts.generate import sample_completions, sequence_logprobs

    model, tokenizer = tiny_model
    prompts = [r["prompt"] for r in arith_rows["test"][:4]]
    sampling = SamplingConfig(max_new_tokens=24, stop=("1", "+"))
    out = sample_completions(model, tokenizer, prompts, 4, sampling, batch_size=8, seed=3, progress=False)
    stopped = [c for c in out if "1" in c.text or "+" in c.text]
    assert stopped, "the random model wrote a stop text somewhere"
    for c in stopped:
        first = min(i for i in (c.text.find("1"), c.text.find("+")) if i >= 0)
        assert first == len(c.text) - 1 and c.finished, c.text
    for c in out:
        assert c.num_tokens == len(c.token_ids) and (c.finished or c.num_tokens == 24)
    again = sequence_logprobs(
        model, tokenizer, [prompts[c.prompt_index] for c in out], [c.token_ids for c in out], batch_size=8
    )
    assert max(abs(a - c.logp) for a, c in zip(again, out, strict=True)) < 1e-4


def test_a_searched_problem_with_a_backend_that_cannot_search_is_refused_at_load():
    """vLLM samples whole completions: a step-checked problem's params naming it are refused by name, before
    any stage runs (the search steps a transformers model a tactic at a time)."""
    import yaml

    from aligntrain.config import ParamsError, parse_params

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "pipelines" / "dco_step" / "params.yaml").read_text())
    assert parse_params(raw).rollouts.backend.name == "hf"
    raw["rollouts"]["backend"] = {"name": "vllm"}
    with pytest.raises(ParamsError, match=r"rollouts\.backend 'vllm': problem 'rewrite' is searched a tactic"):
        parse_params(raw)
