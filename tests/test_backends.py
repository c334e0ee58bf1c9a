"""Generation backends (aligntrain/rollouts/backends.py), the forward-pass log π, OOM halving, pool records."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import yaml

from aligntrain.config import parse_params
from aligntrain.models import load_model_and_tokenizer
from aligntrain.paths import StudyPaths
from aligntrain.rollouts.backends import (
    BACKENDS,
    HfBackend,
    VllmBackend,
    completions_from_vllm,
    parse_backend,
    prompt_seed,
)
from aligntrain.rollouts.generate import SamplingConfig, sample_completions, sequence_logprobs
from aligntrain.rollouts.pool import read_sampler

ROOT = Path(__file__).resolve().parents[1]


def _prompts(rows, count=3):
    prompts = sorted({r["prompt"] for r in rows}, key=len)
    return [prompts[0], prompts[-1], prompts[len(prompts) // 2]][:count]


def test_forward_pass_log_probabilities_equal_the_sampling_ones(tiny_model, arith_rows):
    """vLLM's samples are re-scored by ``sequence_logprobs``: it must give what generate's logits gave."""
    model, tokenizer = tiny_model
    prompts = _prompts(arith_rows["train"])
    out = sample_completions(model, tokenizer, prompts, 4, SamplingConfig(max_new_tokens=12), batch_size=5, seed=2)
    rescored = sequence_logprobs(
        model, tokenizer, [prompts[c.prompt_index] for c in out], [c.token_ids for c in out], batch_size=3
    )
    assert len(rescored) == len(out)
    for c, logp in zip(out, rescored, strict=True):
        assert logp == pytest.approx(c.logp, abs=1e-4), (c.text, logp, c.logp)
    # Not a constant: different completions have different log-probabilities.
    assert len({round(x, 3) for x in rescored}) > 1


def test_sequence_logprobs_refuses_mismatched_inputs(tiny_model):
    model, tokenizer = tiny_model
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        sequence_logprobs(model, tokenizer, ["a", "b"], [[1]], batch_size=1)


def test_out_of_memory_halves_the_batch_and_samples_what_the_smaller_batch_samples(tiny_model, arith_rows, caplog):
    model, tokenizer = tiny_model
    prompts = _prompts(arith_rows["train"])
    sampling = SamplingConfig(max_new_tokens=8)
    reference = sample_completions(model, tokenizer, prompts, 4, sampling, batch_size=3, seed=5, progress=False)

    generate = model.generate
    calls = []

    def generate_with_little_memory(**kwargs):  # a GPU that holds at most 3 sequences
        calls.append(kwargs["input_ids"].shape[0])
        if kwargs["input_ids"].shape[0] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return generate(**kwargs)

    model.generate = generate_with_little_memory
    try:
        with caplog.at_level(logging.WARNING, logger="aligntrain.rollouts.generate"):
            halved = sample_completions(model, tokenizer, prompts, 4, sampling, batch_size=12, seed=5, progress=False)
    finally:
        model.generate = generate
    assert calls[:3] == [12, 6, 3], "12 → 6 → 3, then 3 for the rest"
    assert set(calls[2:]) == {3}
    assert [(c.prompt_index, c.sample_index, c.token_ids) for c in halved] == [
        (c.prompt_index, c.sample_index, c.token_ids) for c in reference
    ]
    assert [m for m in caplog.messages if "halving the batch" in m] == [
        "out of memory generating 12 sequences: halving the batch to 6",
        "out of memory generating 6 sequences: halving the batch to 3",
    ]


def test_out_of_memory_at_one_sequence_is_raised(tiny_model, arith_rows):
    model, tokenizer = tiny_model

    def no_memory(**kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    model.generate = no_memory
    with pytest.raises(torch.OutOfMemoryError):
        sample_completions(model, tokenizer, ["x"], 2, SamplingConfig(max_new_tokens=4), batch_size=2, seed=0)


def test_prompt_seeds_are_fixed_per_prompt_and_differ_between_prompts():
    assert prompt_seed(0, "arith-L1-00ab") == prompt_seed(0, "arith-L1-00ab")
    seeds = {prompt_seed(seed, f"p{i}") for seed in range(3) for i in range(200)}
    assert len(seeds) == 600 and all(0 <= s < 2**31 for s in seeds)


def test_backends_are_registry_entries_with_typed_options():
    assert BACKENDS.names() == ["hf", "vllm"]
    assert parse_backend("hf") == HfBackend()
    vllm = parse_backend({"name": "vllm", "gpu_memory_utilization": 0.5})
    assert isinstance(vllm, VllmBackend) and vllm.gpu_memory_utilization == 0.5
    assert vllm.as_params()["name"] == "vllm"
    with pytest.raises(ValueError, match="generation backend 'vllm': option gpu_memory_utilization"):
        parse_backend({"name": "vllm", "gpu_memory_utilization": 1.5})
    with pytest.raises(ValueError, match="unknown generation backend 'sglang'"):
        parse_backend("sglang")


def test_the_vllm_backend_without_vllm_names_the_gpu_environment(tmp_path):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="make venv-gpu"):
        VllmBackend().sample(tmp_path, ["a"], ["p0"], 1, SamplingConfig(), dtype="float32", batch_size=1, seed=0)


def test_vllm_outputs_become_completions_with_summed_sampled_token_log_probabilities():
    """The fields vLLM documents on RequestOutput / CompletionOutput / Logprob, mapped without loss."""

    def sample(text, ids, logps, reason):
        steps = [{t: SimpleNamespace(logprob=lp), t + 1: SimpleNamespace(logprob=-99.0)} for t, lp in zip(ids, logps)]
        return SimpleNamespace(
            text=text, token_ids=ids, logprobs=steps, cumulative_logprob=sum(logps), finish_reason=reason
        )

    outputs = [
        SimpleNamespace(outputs=[sample("12", [5, 6, 2], [-0.5, -0.25, -0.125], "stop"), sample("9", [7], [-2.0], "length")]),
        SimpleNamespace(outputs=[sample("", [2], [-0.0625], "stop")]),
    ]  # fmt: skip
    completions, logps = completions_from_vllm(outputs)
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(0, 0), (0, 1), (1, 0)]
    assert logps == [-0.875, -2.0, -0.0625]
    assert [c.logp for c in completions] == logps
    assert [c.finished for c in completions] == [True, False, True]
    assert [c.num_tokens for c in completions] == [3, 1, 1]
    assert completions[0].token_ids == (5, 6, 2) and completions[0].text == "12"


@pytest.fixture()
def chat_study(tmp_path):
    """The stand-in Mistral (a chat template) saved as a variant, and parameters that render prompts with it."""
    from aligntrain.standins import write_standins

    written = write_standins(tmp_path / "standins", train_size=16, test_size=4)
    raw = yaml.safe_load((ROOT / "pipelines" / "smoke" / "params.yaml").read_text())
    raw["model"] = {"base_model": str(written["mistral"]), "chat_template": True, "max_length": 256}
    raw["rollouts"].update(samples_per_prompt=2, max_new_tokens=6, batch_size=8)
    raw["diagnostics"]["budgets"] = [2]  # the efficiency budgets fit the pool of 2
    raw["compare"]["primary"]["score"] = "pass@2"  # and so does the primary endpoint's
    paths = StudyPaths(tmp_path / "study")
    shutil.copytree(written["mistral"], paths.variant_model("warmup"))
    return parse_params(raw), paths


def test_rollouts_render_prompts_with_the_chat_template_and_record_the_sampler(chat_study, arith_rows):
    from aligntrain.models import chat_prompt
    from aligntrain.stages.rollouts import generate_pool

    params, paths = chat_study
    rows = arith_rows["test"][:3]
    metrics = generate_pool(params, paths, "warmup", rows)
    pool = pd.read_parquet(paths.pool("warmup"))
    assert len(pool) == 6 and metrics["sampler_logp_gap_max"] == 0.0
    sampler = read_sampler(paths.pool("warmup"))
    assert (
        sampler["backend"] == "hf" and sampler["dtype"] == "float32" and sampler["version"].startswith("transformers")
    )

    # The pool's log π is that of the completion after the RENDERED prompt (what training saw), not the raw one.
    model, tokenizer = load_model_and_tokenizer(paths.variant_model("warmup"))
    first = pool.iloc[0]
    ids = tokenizer(first.text, add_special_tokens=False)["input_ids"]
    if first.finished:
        ids = [*ids, tokenizer.eos_token_id]
    assert len(ids) == first.num_tokens, "the character tokenizer round-trips the sampled tokens"
    rendered = chat_prompt(tokenizer, rows[0]["prompt"])
    assert rendered != rows[0]["prompt"]
    [with_template] = sequence_logprobs(model, tokenizer, [rendered], [ids], batch_size=1)
    [without] = sequence_logprobs(model, tokenizer, [rows[0]["prompt"]], [ids], batch_size=1)
    assert first.logp == pytest.approx(with_template, abs=1e-4)
    assert not math.isclose(first.logp, without, abs_tol=1e-3)


def test_compare_says_when_pools_come_from_different_backends(caplog):
    from aligntrain.stages.compare import mixed_samplers

    hf = {"backend": "hf", "version": "transformers 5.17.0", "dtype": "bfloat16"}
    vllm = {"backend": "vllm", "version": "vllm 0.31.0", "dtype": "bfloat16"}
    assert mixed_samplers({"ce": hf, "tea": dict(hf)}) == ""
    with caplog.at_level(logging.WARNING):
        said = mixed_samplers({"ce": hf, "tea": vllm})
    assert said == "ce: hf (transformers 5.17.0, bfloat16); tea: vllm (vllm 0.31.0, bfloat16)"
    assert "different generation backends" in caplog.text


def test_saved_pool_round_trips_its_sampler_record(tmp_path, tiny_model, arith_rows):
    from aligntrain.problems import get_problem
    from aligntrain.rollouts.pool import build_pool, read_pool, write_pool

    model, tokenizer = tiny_model
    rows = arith_rows["test"][:2]
    out = sample_completions(
        model, tokenizer, [r["prompt"] for r in rows], 2, SamplingConfig(max_new_tokens=6), batch_size=4, seed=0
    )
    pool = build_pool(rows, out, get_problem("arith"), [c.logp - 0.5 for c in out])
    write_pool(pool, tmp_path / "p.parquet", {"backend": "vllm", "version": "vllm 0.31.0", "dtype": "float32"})
    back = read_pool(tmp_path / "p.parquet")
    assert list(back.sampler_logp) == pytest.approx(list(back.logp - 0.5))
    assert read_sampler(tmp_path / "p.parquet")["backend"] == "vllm"
