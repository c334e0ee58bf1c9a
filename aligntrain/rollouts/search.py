"""Proof search at test time: each attempt is a rollout whose every tactic the verifier checks.

DCO ("Rethinking Fine-Tuning when Scaling Test-Time Compute: Limiting Confidence Improves
Mathematical Reasoning", arXiv 2502.07154) §5.3 searches with a prover that proposes one tactic at
a time: the proof assistant checks it and returns the next state, and the attempt goes on until the
proof is complete, a tactic is invalid, or a depth limit is hit. A model trained on step rows
(``dco_step``, step-wise CE) ends each tactic with EOS, so sampling a whole proof in one go stops
after its first tactic; this driver asks for the next tactic, attempt by attempt, until one of
those three ends. A model trained on whole proofs is searched the same way, one tactic at a time
(each ends at the problem's separator): its samples are those of whole-proof sampling, only cut
at the first invalid tactic.

What an attempt costs at test time is counted in verifier calls (one per tactic checked, the
invalid one included) as well as in attempts: pass@k over the attempts of a pool is the proof
success rate at k attempts (the unbiased estimator of the evaluate stage), and the pool's
``verifier_calls`` column gives the calls k attempts used.

A problem searched this way implements :class:`StepSearch` (``rewrite``, ``lean``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from tqdm.auto import tqdm

from aligntrain.rollouts.generate import Completion, SamplingConfig, sample_from_token_ids
from aligntrain.validation import check_int

#: seeds of successive search rounds lie this far apart, so no two rounds share a batch's seed
ROUND_SEED_STRIDE = 1_000_003


@runtime_checkable
class StepSearch(Protocol):
    """What the search needs of a step-verified problem."""

    #: texts that end one tactic in the model's output (besides EOS), kept out of the tactic
    tactic_stops: tuple[str, ...]
    #: most tactics in one attempt (the depth limit)
    max_search_steps: int

    def search_start(self, row: Mapping[str, Any]) -> Any | None:
        """The row's first proof state (None: the goal cannot be started, the attempt fails at once)."""

    def search_prompt(self, row: Mapping[str, Any], state: Any, tactics: Sequence[str]) -> str:
        """The prompt that asks for the next tactic in ``state``, after ``tactics``."""

    def search_step(self, state: Any, tactic: str) -> tuple[Any | None, bool]:
        """(the state after ``tactic``, or None when it is invalid; whether the proof is complete)."""

    def proof_text(self, tactics: Sequence[str]) -> str:
        """The completion an attempt's tactics make, as ``grade`` reads a whole proof."""


@dataclass
class _Attempt:
    prompt_index: int
    sample_index: int
    state: Any
    tactics: list[str]
    logp: float = 0.0
    num_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    calls: int = 0
    proved: bool = False
    open: bool = True
    cut: bool = False  # closed by the depth limit, neither proved nor refuted


@dataclass(frozen=True)
class SearchResult:
    """The attempts of a search as completions (in prompt, then attempt order) and their verifier calls."""

    completions: list[Completion]
    verifier_calls: list[int]


def tactic_of(text: str, stops: Sequence[str]) -> str:
    """The tactic in one sampled step: the text up to its first stop, stripped."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut].strip()


def search_proofs(
    model,
    tokenizer,
    problem: StepSearch,
    rows: Sequence[Mapping[str, Any]],
    attempts_per_row: int,
    sampling: SamplingConfig,
    *,
    batch_size: int,
    seed: int,
    progress: bool = True,
) -> SearchResult:
    """``attempts_per_row`` search attempts for every row; ``sampling.max_new_tokens`` caps one tactic.

    Round r samples one tactic for every open attempt (``sample_from_token_ids``, seeded
    ``seed + r·ROUND_SEED_STRIDE``), and the verifier checks each: an invalid tactic or the depth
    limit closes the attempt unproved, a complete proof closes it proved. Deterministic for a given
    seed, model and batch size. An attempt's ``logp`` and ``num_tokens`` sum over its tactics.
    """
    attempts_per_row = check_int(attempts_per_row, "attempts_per_row", minimum=1)
    stepping = replace(sampling, stop=tuple(problem.tactic_stops))
    attempts = []
    for p, row in enumerate(rows):
        start = problem.search_start(row)
        for s in range(attempts_per_row):
            attempts.append(_Attempt(p, s, start, [], open=start is not None))
    bar = tqdm(total=len(attempts), desc="proof search", unit="attempt", disable=not progress)
    bar.update(sum(not a.open for a in attempts))
    round_ = 0
    while any(a.open for a in attempts):
        live = [a for a in attempts if a.open]
        prompts = [problem.search_prompt(rows[a.prompt_index], a.state, a.tactics) for a in live]
        prompt_ids = tokenizer(prompts)["input_ids"]
        steps = sample_from_token_ids(
            model,
            tokenizer,
            prompt_ids,
            1,
            stepping,
            batch_size=batch_size,
            seed=seed + round_ * ROUND_SEED_STRIDE,
            progress=False,
        )
        for attempt, step in zip(live, steps, strict=True):
            tactic = tactic_of(step.text, problem.tactic_stops)
            attempt.logp += step.logp
            attempt.num_tokens += step.num_tokens
            attempt.token_ids += step.token_ids
            attempt.tactics.append(tactic)
            attempt.calls += 1
            state, proved = problem.search_step(attempt.state, tactic) if tactic else (None, False)
            if state is None or proved or len(attempt.tactics) >= problem.max_search_steps:
                attempt.open, attempt.proved = False, state is not None and proved
                attempt.cut = state is not None and not proved
                bar.update(1)
            else:
                attempt.state = state
        round_ += 1
    bar.close()
    completions = [
        Completion(
            a.prompt_index, a.sample_index, problem.proof_text(a.tactics), a.logp, a.num_tokens, not a.cut, a.token_ids
        )
        for a in attempts
    ]
    return SearchResult(completions, [a.calls for a in attempts])
