"""Generation backends: one interface for sampling a pool, by transformers' ``generate`` or by vLLM.

A backend is an entry of the one registry pattern (:mod:`aligntrain.options`),
chosen in params.yaml as ``rollouts.backend`` (a name, or ``{name: vllm, option: ...}``;
``aligntrain list backends``). :meth:`Backend.sample` takes the saved model's
folder, the prompts as the model reads them (chat template already applied), M,
the sampling settings (temperature, top-p, length cap, stop texts), the dtype and
the study seed, and gives one :class:`~aligntrain.rollouts.generate.Completion`
per sample (text, token ids, summed log-probability, finished or cut at the cap)
and the :class:`SamplerRecord` every pool keeps (backend, its version, dtype).

Log-probabilities [choice]: the pool's ``logp`` (CAT's sequence p, DCO's weights,
the diagnostics) is always the training model's own, at temperature 1:
``hf`` reads it from the logits of the very forward passes that sampled; ``vllm``'s
completions are scored again by one forward pass of the transformers model
(:func:`~aligntrain.rollouts.generate.sequence_logprobs`), because vLLM's kernels
(paged attention, fused sampling, bf16 accumulation) give slightly different
numbers. vLLM's own sums are kept as ``sampler_logp`` and the mean and largest
``|Δ log p|`` between the two are reported by the rollouts stage.

Seeds [choice]: ``hf`` seeds batch b with ``seed + b`` (so a pool depends on the
batch size); ``vllm`` gives every prompt its own seed, from the study seed and the
prompt id (:func:`prompt_seed`), so a prompt's samples do not depend on which
other prompts share the engine. The two backends draw different samples from the
same distribution: a comparison of pools from both says so (``compare``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, StrictInt

from aligntrain.options import Options, Real, Registry

if TYPE_CHECKING:  # generate imports torch; params.yaml is validated without it
    from aligntrain.rollouts.generate import Completion, SamplingConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplerRecord:
    """What drew a pool: the backend, its version and the weights' dtype (kept in the pool file)."""

    backend: str
    version: str
    dtype: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Sampled:
    """A backend's output: the completions (``logp`` from the training model) and what drew them."""

    completions: list[Completion]
    record: SamplerRecord
    #: the backend's own summed log-probability of each completion (``hf``: the same as ``logp``)
    sampler_logps: list[float]


def prompt_seed(seed: int, prompt_id: str) -> int:
    """A 31-bit seed for one prompt's samples: BLAKE2b of the study seed and the prompt id."""
    digest = hashlib.blake2b(f"{seed}:{prompt_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class Backend(Options):
    """Base of the generation backends (module docstring)."""

    def as_params(self) -> dict:
        """``{name: ..., option: ...}``, as params.yaml writes it."""
        return {"name": self.name, **self.model_dump()}

    def sample(
        self,
        model_dir: str | Path,
        prompts: Sequence[str],
        prompt_ids: Sequence[str],
        samples_per_prompt: int,
        sampling: SamplingConfig,
        *,
        dtype: str,
        batch_size: int,
        seed: int,
    ) -> Sampled:
        raise NotImplementedError


BACKENDS: Registry[Backend] = Registry("generation backend")


@BACKENDS.register
class HfBackend(Backend):
    """transformers' batched generate (left padding, KV cache); log π read from the sampling logits."""

    name: ClassVar[str] = "hf"

    def sample(self, model_dir, prompts, prompt_ids, samples_per_prompt, sampling, *, dtype, batch_size, seed):
        import transformers

        from aligntrain.models import load_model_and_tokenizer
        from aligntrain.rollouts.generate import sample_completions

        model, tokenizer = load_model_and_tokenizer(model_dir, dtype=dtype)
        model = move_to_accelerator(model)
        completions = sample_completions(
            model, tokenizer, prompts, samples_per_prompt, sampling, batch_size=batch_size, seed=seed
        )
        record = SamplerRecord("hf", f"transformers {transformers.__version__}", dtype)
        return Sampled(completions, record, [c.logp for c in completions])

    def search(self, model_dir, problem, rows, attempts_per_row, sampling, *, dtype, batch_size, seed):
        """Proof attempts a tactic at a time, each checked (``rollouts.search``): (Sampled, verifier calls)."""
        import transformers

        from aligntrain.models import load_model_and_tokenizer
        from aligntrain.rollouts.search import search_proofs

        model, tokenizer = load_model_and_tokenizer(model_dir, dtype=dtype)
        model = move_to_accelerator(model)
        found = search_proofs(
            model, tokenizer, problem, rows, attempts_per_row, sampling, batch_size=batch_size, seed=seed
        )
        record = SamplerRecord("hf", f"transformers {transformers.__version__}; step-by-step search", dtype)
        return Sampled(found.completions, record, [c.logp for c in found.completions]), found.verifier_calls


@BACKENDS.register
class VllmBackend(Backend):
    """vLLM's LLM.generate (GPU environment: make venv-gpu); log π re-scored by the transformers model."""

    name: ClassVar[str] = "vllm"

    gpu_memory_utilization: Real = Field(
        0.85, gt=0, le=1, description="Share of the GPU's memory vLLM may take (weights, KV cache)."
    )
    tensor_parallel_size: StrictInt = Field(1, ge=1, description="GPUs one model is split over.")
    enforce_eager: bool = Field(False, description="Skip CUDA graphs (slower; starts faster, less memory).")
    rescore_batch_size: StrictInt = Field(
        16, ge=1, description="Sequences per forward pass when the transformers model re-scores the samples."
    )

    def sample(self, model_dir, prompts, prompt_ids, samples_per_prompt, sampling, *, dtype, batch_size, seed):
        try:
            import vllm
        except ImportError:
            raise RuntimeError(
                "rollouts.backend vllm needs vLLM, which the CPU environment does not install: run the stage in the "
                "GPU environment (make venv-gpu; docs/gpu.md), or set rollouts.backend: hf"
            ) from None
        if len(prompts) != len(prompt_ids):
            raise ValueError(f"{len(prompts)} prompts but {len(prompt_ids)} prompt ids")
        llm = vllm.LLM(
            model=str(model_dir),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            enforce_eager=self.enforce_eager,
            logprobs_mode="raw_logprobs",  # log π before temperature and top-p, as the hf backend reads it
        )
        requests = [
            vllm.SamplingParams(
                n=samples_per_prompt,
                seed=prompt_seed(seed, prompt_id),
                temperature=0.0 if sampling.greedy else sampling.temperature,
                top_p=1.0 if sampling.greedy else sampling.top_p,
                top_k=-1,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                include_stop_str_in_output=True,  # as generate's stop_strings keep it
                logprobs=0,  # the sampled token's log-probability only
                skip_special_tokens=True,
            )
            for prompt_id in prompt_ids
        ]
        outputs = llm.generate(list(prompts), requests, use_tqdm=True)
        completions, sampler_logps = completions_from_vllm(outputs)
        del llm  # free the GPU for the transformers model below
        _free_cuda()
        rescored = _rescore(model_dir, prompts, completions, dtype, self.rescore_batch_size)
        report_logp_gap(rescored, sampler_logps)
        record = SamplerRecord("vllm", f"vllm {vllm.__version__}", dtype)
        return Sampled(rescored, record, sampler_logps)


def completions_from_vllm(outputs: Sequence) -> tuple[list[Completion], list[float]]:
    """vLLM's ``RequestOutput`` list (one per prompt, ``n`` samples each) as completions, and vLLM's log π sums.

    A sample's log-probability is the sum over its tokens of the sampled token's
    entry in ``logprobs`` (requested with ``logprobs=0``); ``finished`` is vLLM's
    ``finish_reason == "stop"`` (EOS or a stop text), not ``"length"``.
    """
    from aligntrain.rollouts.generate import Completion

    completions, logps = [], []
    for p, request in enumerate(outputs):
        for s, sample in enumerate(request.outputs):
            ids = tuple(int(t) for t in sample.token_ids)
            if sample.logprobs is not None:
                logp = float(sum(step[t].logprob for step, t in zip(sample.logprobs, ids, strict=True)))
            else:
                logp = float(sample.cumulative_logprob)
            completions.append(Completion(p, s, sample.text, logp, len(ids), sample.finish_reason == "stop", ids))
            logps.append(logp)
    return completions, logps


def report_logp_gap(completions: Sequence[Completion], sampler_logps: Sequence[float]) -> dict[str, float]:
    """Mean and largest |Δ log p| between the training model's sums and the sampler's; logged, and returned."""
    gaps = [abs(c.logp - s) for c, s in zip(completions, sampler_logps, strict=True)]
    gap = {"mean": sum(gaps) / len(gaps) if gaps else 0.0, "max": max(gaps, default=0.0)}
    logger.info("log π of the sampled completions, transformers vs sampler: |Δ| mean %.4g, max %.4g", *gap.values())
    return gap


def _rescore(model_dir, prompts, completions: list[Completion], dtype: str, batch_size: int) -> list[Completion]:
    from aligntrain.models import load_model_and_tokenizer
    from aligntrain.rollouts.generate import sequence_logprobs

    model, tokenizer = load_model_and_tokenizer(model_dir, dtype=dtype)
    if _cuda():
        model = model.to("cuda")
    logps = sequence_logprobs(
        model,
        tokenizer,
        [prompts[c.prompt_index] for c in completions],
        [c.token_ids for c in completions],
        batch_size=batch_size,
    )
    return [replace(c, logp=lp) for c, lp in zip(completions, logps, strict=True)]


def move_to_accelerator(model):
    """The model on the GPU when there is one (as it is otherwise)."""
    return model.to("cuda") if _cuda() else model


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _free_cuda() -> None:
    import gc

    gc.collect()
    if _cuda():
        import torch

        torch.cuda.empty_cache()


def parse_backend(backend: str | dict | Backend) -> Backend:
    """``rollouts.backend`` as a :class:`Backend`: a name, ``{name: ..., option: ...}``, or an instance."""
    if isinstance(backend, Backend):
        return backend
    if isinstance(backend, str):
        return BACKENDS.parse(backend)
    if isinstance(backend, dict):
        options = dict(backend)
        return BACKENDS.parse(options.pop("name", None), options)
    raise ValueError(f"a generation backend is a name or {{name: ..., option: ...}}, got {backend!r}")
