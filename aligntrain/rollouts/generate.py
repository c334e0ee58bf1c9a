"""Sampling completions with transformers' ``generate``: many prompts at once.

Prompts are left-padded into batches of up to ``batch_size`` sequences (each
prompt repeated M times) and decoded with the KV cache; the summed log-probability
of each sampled completion under the model at temperature 1 (the policy's own
``log π(y|x)``, docs/math.md notation ℓ) is read from the per-step logits, so no
second forward pass is needed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from aligntrain.validation import check_int


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    greedy: bool = False  # argmax decoding (temperature/top_p unused); logp is still log π at temperature 1


@dataclass(frozen=True)
class Completion:
    prompt_index: int
    sample_index: int
    text: str
    logp: float
    num_tokens: int
    finished: bool  # ended with EOS rather than the length cap
    token_ids: tuple[int, ...]  # the sampled tokens, EOS included (decoding drops special tokens)


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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
    samples_per_prompt = check_int(samples_per_prompt, "samples_per_prompt", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    model.eval()
    jobs = [(p, s) for p in range(len(prompts)) for s in range(samples_per_prompt)]
    out: list[Completion] = []
    bar = tqdm(total=len(jobs), desc="sampling", unit="seq", disable=not progress)
    for b, batch in enumerate(_chunks(jobs, batch_size)):
        texts = [prompts[p] for p, _ in batch]
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left").to(model.device)
        torch.manual_seed(seed + b)
        decoding = (
            {"do_sample": False}
            if sampling.greedy
            else {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        )
        gen = model.generate(
            **enc,
            **decoding,
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
        # Tokens after the first EOS are padding; the EOS itself belongs to the completion.
        is_eos = new_tokens == tokenizer.eos_token_id
        after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
        valid = ~after_eos
        seq_logp = (token_logp * valid).sum(dim=1)
        lengths = valid.sum(dim=1)
        finished = is_eos.any(dim=1)
        padded = new_tokens.masked_fill(~valid, tokenizer.pad_token_id)
        decoded = tokenizer.batch_decode(padded, skip_special_tokens=True)
        rows = zip(batch, decoded, seq_logp.tolist(), lengths.tolist(), finished.tolist(), new_tokens.tolist())
        for (p, s), text, lp, n, fin, ids in rows:
            out.append(Completion(p, s, text, lp, n, fin, tuple(ids[:n])))
        bar.update(len(batch))
    bar.close()
    return out
