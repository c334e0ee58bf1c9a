"""Sampling completions with transformers' ``generate``: many prompts at once.

Prompts are left-padded into batches of up to ``batch_size`` sequences (each
prompt repeated M times) and decoded with the KV cache; the summed log-probability
of each sampled completion under the model at temperature 1 (the policy's own
``log π(y|x)``, docs/math.md notation ℓ) is read from the per-step logits, so no
second forward pass is needed. :func:`sequence_logprobs` is that forward pass, for
completions another sampler (vLLM) drew.

Out of memory [choice]: a batch that does not fit halves and is retried from the
same sequence, and the log says so; the halved size is kept for the rest of the
call. Batches are seeded by their position (``seed + b``), so a run that never
runs out of memory samples exactly what it sampled before this rule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria, StoppingCriteriaList

from aligntrain.validation import check_int

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    greedy: bool = False  # argmax decoding (temperature/top_p unused); logp is still log π at temperature 1
    stop: tuple[str, ...] = ()  # texts that end a completion (kept in it), besides EOS


@dataclass(frozen=True)
class Completion:
    prompt_index: int
    sample_index: int
    text: str
    logp: float
    num_tokens: int
    finished: bool  # ended with EOS (or a stop text) rather than the length cap
    token_ids: tuple[int, ...]  # the sampled tokens, EOS included (decoding drops special tokens)


@torch.no_grad()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    samples_per_prompt: int,
    sampling: SamplingConfig,
    *,
    batch_size: int,
    seed: int,
    progress: bool = True,
) -> list[Completion]:
    """``samples_per_prompt`` sampled completions of every prompt, in prompt order.

    Deterministic for a given seed, model and batch size: batch b is sampled
    under ``torch.manual_seed(seed + b)``.
    """
    prompt_ids = tokenizer(list(prompts))["input_ids"]
    return sample_from_token_ids(
        model, tokenizer, prompt_ids, samples_per_prompt, sampling, batch_size=batch_size, seed=seed, progress=progress
    )


@torch.no_grad()
def sample_from_token_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[Sequence[int]],
    samples_per_prompt: int,
    sampling: SamplingConfig,
    *,
    batch_size: int,
    seed: int,
    progress: bool = True,
) -> list[Completion]:
    """:func:`sample_completions` from prompts already tokenized (a training batch's own prompt tokens).

    Leaves the model in eval mode, as generation needs; a trainer calling it restores train mode.
    """
    samples_per_prompt = check_int(samples_per_prompt, "samples_per_prompt", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    model.eval()
    jobs = [(p, s) for p in range(len(prompt_ids)) for s in range(samples_per_prompt)]
    out: list[Completion] = []
    bar = tqdm(total=len(jobs), desc="sampling", unit="seq", disable=not progress)
    start, b = 0, 0
    while start < len(jobs):
        batch = jobs[start : start + batch_size]
        try:
            out += _sample_batch(model, tokenizer, prompt_ids, batch, sampling, seed + b)
        except torch.OutOfMemoryError:
            if batch_size == 1:
                raise
            batch_size //= 2
            logger.warning("out of memory generating %d sequences: halving the batch to %d", len(batch), batch_size)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        start, b = start + len(batch), b + 1
        bar.update(len(batch))
    bar.close()
    return out


def _sample_batch(model, tokenizer, prompt_ids, batch, sampling: SamplingConfig, seed: int) -> list[Completion]:
    """One ``generate`` call over ``batch`` ((prompt index, sample index) pairs), seeded with ``seed``."""
    rows = [list(prompt_ids[p]) for p, _ in batch]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    # Left padding under an attention mask, as the tokenizer's padding_side="left" gives.
    enc = {
        "input_ids": torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=model.device),
        "attention_mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=model.device),
    }
    torch.manual_seed(seed)
    decoding = (
        {"do_sample": False}
        if sampling.greedy
        else {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
    )
    stop = _StopTexts(tokenizer, sampling.stop, enc["input_ids"].shape[1], len(rows)) if sampling.stop else None
    gen = model.generate(
        **enc,
        **decoding,
        **({"stopping_criteria": StoppingCriteriaList([stop])} if stop else {}),
        max_new_tokens=sampling.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        return_dict_in_generate=True,
        output_logits=True,
        use_cache=True,
    )
    new_tokens = gen.sequences[:, enc["input_ids"].shape[1] :]
    logits = torch.stack(gen.logits, dim=1).float()  # (batch, steps, vocab), before temperature
    token_logp = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
    # Tokens after the first EOS are padding; the EOS itself belongs to the completion. So are the
    # tokens after the one that completed a stop text (which belongs to it).
    is_eos = new_tokens == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    valid = ~after_eos
    if stop is not None:
        valid &= torch.arange(new_tokens.shape[1], device=new_tokens.device).unsqueeze(0) < stop.lengths(
            new_tokens.shape[1]
        ).unsqueeze(1).to(new_tokens.device)
    seq_logp = (token_logp * valid).sum(dim=1)
    lengths = valid.sum(dim=1)
    padded = new_tokens.masked_fill(~valid, tokenizer.pad_token_id)
    decoded = tokenizer.batch_decode(padded, skip_special_tokens=True)
    finished = [
        bool(eos) or any(stop in text for stop in sampling.stop)
        for eos, text in zip(is_eos.any(dim=1).tolist(), decoded, strict=True)
    ]
    records = zip(batch, decoded, seq_logp.tolist(), lengths.tolist(), finished, new_tokens.tolist())
    return [Completion(p, s, text, lp, n, fin, tuple(ids[:n])) for (p, s), text, lp, n, fin, ids in records]


class _StopTexts(StoppingCriteria):
    """Ends each sequence at the first token after which its completion holds one of ``stops``.

    transformers' own ``stop_strings`` builds a table from the tokenizer's vocabulary that fails for a
    character vocabulary without the letters it probes with (the embedded problems' tokenizers); this
    decodes the completions instead, which suits the short completions stop texts are used for.
    """

    def __init__(self, tokenizer, stops: Sequence[str], prompt_width: int, rows: int) -> None:
        self.tokenizer, self.stops, self.width, self.rows = tokenizer, tuple(stops), prompt_width, rows
        self.stopped_at: dict[int, int] = {}  # sequence -> number of its new tokens, the stop's last included

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        new = input_ids[:, self.width :]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        for i, text in enumerate(texts):
            if i not in self.stopped_at and any(stop in text for stop in self.stops):
                self.stopped_at[i] = new.shape[1]
        return torch.tensor([i in self.stopped_at for i in range(len(texts))], device=input_ids.device)

    def lengths(self, steps: int) -> torch.Tensor:
        """Each sequence's completion length in tokens (``steps`` where no stop text came)."""
        return torch.tensor([self.stopped_at.get(i, steps) for i in range(self.rows)])


@torch.no_grad()
def sequence_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    completions: Sequence[Sequence[int]],
    *,
    batch_size: int,
) -> list[float]:
    """Summed log π(y|x) at temperature 1 of each completion's tokens after its prompt: one forward pass.

    ``prompts[i]`` is tokenized as generation tokenizes it; ``completions[i]`` are
    token ids (EOS included when the completion finished). Sequences are right-padded
    and read under an attention mask, so padding changes nothing.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    model.eval()
    sums: list[float] = []
    for start in range(0, len(prompts), batch_size):
        chunk_prompts = prompts[start : start + batch_size]
        chunk_ids = completions[start : start + batch_size]
        prompt_ids = tokenizer(list(chunk_prompts))["input_ids"]
        sequences = [list(p) + list(c) for p, c in zip(prompt_ids, chunk_ids, strict=True)]
        width = max(len(s) for s in sequences)
        pad = tokenizer.pad_token_id
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=model.device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=model.device)
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        for row, (p, c) in enumerate(zip(prompt_ids, chunk_ids, strict=True)):
            # The token at position t is predicted by the logits at t - 1.
            positions = torch.arange(len(p) - 1, len(p) + len(c) - 1, device=model.device)
            targets = torch.tensor(list(c), device=model.device, dtype=torch.long)
            sums.append(float(logp[row, positions, targets].sum()))
    return sums
