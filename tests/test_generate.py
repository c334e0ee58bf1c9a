"""Batched sampling: left padding and the KV cache do not change what is scored."""

from __future__ import annotations

import torch

from aligntrain.rollouts.generate import SamplingConfig, sample_completions


def _teacher_forced_logp(model, tokenizer, prompt: str, completion_ids: list[int]) -> float:
    ids = torch.tensor([tokenizer(prompt)["input_ids"] + completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
    start = ids.shape[1] - len(completion_ids) - 1
    return float(sum(logp[start + j, t] for j, t in enumerate(completion_ids)))


def test_batched_logp_matches_teacher_forcing(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    # Prompts of different lengths, so the batch is really left-padded.
    prompts = sorted({r["prompt"] for r in arith_rows["train"]}, key=len)
    prompts = [prompts[0], prompts[-1], prompts[len(prompts) // 2]]
    assert len({len(p) for p in prompts}) > 1
    out = sample_completions(
        model, tokenizer, prompts, 3, SamplingConfig(max_new_tokens=12), batch_size=9, seed=1, progress=False
    )
    assert [(c.prompt_index, c.sample_index) for c in out] == [(p, s) for p in range(3) for s in range(3)]
    for c in out:
        ids = list(c.token_ids)
        assert len(ids) == c.num_tokens and (ids[-1] == tokenizer.eos_token_id) == c.finished
        assert c.text == tokenizer.decode(ids, skip_special_tokens=True)
        ref = _teacher_forced_logp(model, tokenizer, prompts[c.prompt_index], ids)
        assert abs(ref - c.logp) < 1e-3 * max(1.0, abs(ref))


def test_sampling_is_deterministic_for_a_seed(tiny_model, arith_rows):
    model, tokenizer = tiny_model
    prompts = [r["prompt"] for r in arith_rows["test"][:2]]
    cfg = SamplingConfig(max_new_tokens=10)
    a = sample_completions(model, tokenizer, prompts, 4, cfg, batch_size=8, seed=3, progress=False)
    b = sample_completions(model, tokenizer, prompts, 4, cfg, batch_size=8, seed=3, progress=False)
    c = sample_completions(model, tokenizer, prompts, 4, cfg, batch_size=8, seed=4, progress=False)
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.text for x in a] != [x.text for x in c]


def test_greedy_decoding_takes_the_argmax_token_each_step(tiny_model, arith_rows):
    """Greedy completions are the step-by-step argmax of an unbatched forward, scored at temperature 1."""
    model, tokenizer = tiny_model
    prompts = sorted({r["prompt"] for r in arith_rows["train"]}, key=len)[:: len(arith_rows["train"]) // 3][:3]
    cfg = SamplingConfig(max_new_tokens=8, greedy=True)
    out = sample_completions(model, tokenizer, prompts, 1, cfg, batch_size=3, seed=0, progress=False)
    for c in out:
        ids = tokenizer(prompts[c.prompt_index])["input_ids"]
        expected = []
        with torch.no_grad():
            for _ in range(8):
                nxt = int(model(input_ids=torch.tensor([ids + expected])).logits[0, -1].argmax())
                expected.append(nxt)
                if nxt == tokenizer.eos_token_id:
                    break
        assert list(c.token_ids) == expected
        ref = _teacher_forced_logp(model, tokenizer, prompts[c.prompt_index], expected)
        assert abs(ref - c.logp) < 1e-3 * max(1.0, abs(ref))
