"""Stages ``pretrain``, ``warmup`` and ``train@variant``: the three SFT runs of the study.

pretrain: a fresh tiny Llama learns the problem's synthetic corpus (language
modelling) — skipped when ``model.base_model`` names a pretrained model, which is
resolved (hub id at its revision, or local path) and saved instead.
warmup: CE SFT on the training prompts, the shared start of every variant.
train@variant: the variant's objective from the warm-up checkpoint.

warmup and train load their starting model in ``model.dtype``, with ``model.lora``'s
adapters when set (merged into the saved model), and render the prompts with the chat
template when ``model.chat_template`` is set (docs/models.md).

warmup and train write their training-time monitor's table (``plots/monitor/warmup.csv``,
``plots/monitor/variants/<variant>.csv``; docs/monitor.md): filled when ``monitor.enabled``,
else the header alone, and nothing else of the run changes (its checkpoint folder included).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from transformers import TrainerCallback

from aligntrain.config import OptimConfig, Params
from aligntrain.io import fingerprint, write_json
from aligntrain.launch import main_process
from aligntrain.models import (
    apply_lora,
    build_char_tokenizer,
    build_tiny_llama,
    check_quantization_supported,
    load_model_and_tokenizer,
    load_pretrained,
    policy_rows,
    save_model_and_tokenizer,
)
from aligntrain.objectives import CrossEntropy, ObjectiveOptions
from aligntrain.paths import StudyPaths
from aligntrain.stages.prepare import problem_of
from aligntrain.training.monitor import MonitorSplit, TrainingMonitor, write_monitor_csv
from aligntrain.training.selection import REPORT as SELECTION_REPORT
from aligntrain.training.selection import CheckpointSelector
from aligntrain.training.sft import train_sft


def _checkpoint_dir(paths: StudyPaths, stage: str, *config) -> str:
    # Keyed by the config, so a re-run after a parameter change never resumes a stale run.
    dumped = [c.model_dump() if hasattr(c, "model_dump") else c for c in config]
    return str(paths.checkpoints(f"{stage}-{fingerprint(dumped)}"))


def _callbacks_key(params: Params, stage: str) -> list:
    """The monitor's and, for a variant, the checkpoint selection's part of a checkpoint folder's key: nothing
    when off (the folder of a run without them). Pretraining has neither."""
    if stage == "pretrain":
        return []
    key = [params.monitor] if params.monitor.enabled else []
    return key + ([params.selection] if params.selection.enabled and stage.startswith("train") else [])


def _monitor(
    params: Params,
    tokenizer,
    csv_path,
    train: tuple[Sequence[dict], Sequence[dict]],
    validation: tuple[Sequence[dict], Sequence[dict]] | None,
) -> list[TrainerCallback]:
    """The training-time monitor's callback when ``monitor.enabled`` (it writes ``csv_path``), else none.

    ``train``/``validation``: (the problem's rows, the same rows as the policy reads them).
    """
    cfg = params.monitor
    if not cfg.enabled:
        return []
    splits = {"train": MonitorSplit.of(*train, cfg.prompts)}
    if validation is not None:
        splits["validation"] = MonitorSplit.of(*validation, cfg.prompts)
    monitor = TrainingMonitor(
        cfg, problem=problem_of(params), tokenizer=tokenizer, splits=splits, seed=params.study.seed, csv_path=csv_path
    )
    return [monitor]


def _header_unless_monitored(params: Params, csv_path) -> None:
    """Without the monitor the stage's plot still exists (a DVC output): its header alone."""
    if not params.monitor.enabled and main_process():
        write_monitor_csv(None, csv_path)


def _fit(
    stage: str,
    params: Params,
    paths: StudyPaths,
    model,
    tokenizer,
    rows: Sequence[dict],
    optim: OptimConfig,
    *,
    objective: ObjectiveOptions,
    eval_rows: Sequence[dict] | None,
    callbacks: Sequence[TrainerCallback],
    init_fingerprint: str,
    save_to,
    **answer_sampling,
) -> dict[str, float]:
    start = time.perf_counter()
    metrics = train_sft(
        model,
        tokenizer,
        rows,
        optim,
        _checkpoint_dir(
            paths,
            stage,
            optim,
            objective,
            params.model,
            params.problem,
            params.study.seed,
            init_fingerprint,
            *_callbacks_key(params, stage),
        ),
        objective=objective,
        eval_rows=eval_rows,
        max_length=params.model.max_length,
        seed=params.study.seed,
        callbacks=callbacks,
        save_final=_saver(model, tokenizer, save_to),
        **answer_sampling,
    )
    metrics["wall_seconds"] = time.perf_counter() - start
    return metrics


def _saver(model, tokenizer, path):
    """Saves the trained model (merged, for LoRA); the trainer calls it before removing its checkpoints."""
    return lambda state_dict=None: save_model_and_tokenizer(model, tokenizer, path, state_dict=state_dict)


def _load_for_training(params: Params, path, *, adapters: bool = True):
    """The model at ``path`` in ``model.dtype``, wrapped with ``model.lora``'s adapters when set and ``adapters``.

    QLoRA loads the base in 4-bit; a target module the model lacks fails here, before training.
    """
    m = params.model
    lora = m.lora if adapters else None
    model, tokenizer = load_model_and_tokenizer(path, dtype=m.dtype, quantization=lora.quantization if lora else "none")
    if lora is not None:
        model = apply_lora(model, lora, seed=params.study.seed)
    return model, tokenizer


def _prompts(params: Params, tokenizer, rows: Sequence[dict] | None) -> Sequence[dict] | None:
    """``rows`` as the policy reads them (``policy_rows``); None stays None."""
    return None if rows is None else policy_rows(params.model, tokenizer, rows)


def pretrain(
    params: Params,
    paths: StudyPaths,
    corpus: Sequence[str],
    splits: dict[str, Sequence[dict]],
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, float]:
    """Build the tokenizer and tiny Llama, train on the corpus, save to ``models/base``.

    With ``model.base_model``: resolve and load that model instead (a hub model missing on an
    offline machine fails here, naming how to pre-fetch it) and save it in ``model.dtype``.
    """
    if params.model.lora is not None:  # QLoRA where it cannot run: refused before any work
        check_quantization_supported(params.model.lora.quantization)
    if params.model.base_model:
        model, tokenizer = load_pretrained(params.model)
        if main_process():  # the other processes of a launch have nothing to do
            save_model_and_tokenizer(model, tokenizer, paths.base_model)
        return {"pretrain_skipped": 1.0}
    texts = list(corpus) + [r[f] for rows in splits.values() for r in rows for f in ("prompt", "completion")]
    tokenizer = build_char_tokenizer(texts)
    m = params.model
    model = build_tiny_llama(
        tokenizer,
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        intermediate_size=m.intermediate_size,
        max_length=m.max_length,
        seed=params.study.seed,
    )
    metrics = _fit(
        "pretrain",
        params,
        paths,
        model,
        tokenizer,
        [{"text": t} for t in corpus],
        params.pretrain,
        objective=CrossEntropy(),
        eval_rows=None,
        callbacks=callbacks,
        init_fingerprint="scratch",
        save_to=paths.base_model,
    )
    metrics["parameters"] = float(sum(p.numel() for p in model.parameters()))
    return metrics


def warmup(
    params: Params,
    paths: StudyPaths,
    train_rows: Sequence[dict],
    val_rows: Sequence[dict],
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, float]:
    """CE SFT from ``models/base`` on the training prompts; saves ``models/warmup`` and ``plots/monitor/warmup.csv``."""
    model, tokenizer = _load_for_training(params, paths.base_model)
    source_train, source_val = train_rows, val_rows
    train_rows, val_rows = _prompts(params, tokenizer, train_rows), _prompts(params, tokenizer, val_rows)
    monitor = _monitor(params, tokenizer, paths.monitor_warmup, (source_train, train_rows), (source_val, val_rows))
    metrics = _fit(
        "warmup",
        params,
        paths,
        model,
        tokenizer,
        train_rows,
        params.warmup,
        objective=CrossEntropy(),
        eval_rows=val_rows,
        callbacks=[*callbacks, *monitor],
        init_fingerprint=_model_fingerprint(paths.base_model),
        save_to=paths.warmup_model,
    )
    _header_unless_monitored(params, paths.monitor_warmup)
    return metrics


def train_variant(
    params: Params,
    paths: StudyPaths,
    variant: str,
    train_rows: Sequence[dict],
    val_rows: Sequence[dict],
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, float]:
    """The variant's objective from ``models/warmup``; saves ``models/variants/<variant>`` and its monitor's table."""
    objective = params.variant(variant).options
    if objective.trains_on_steps:  # DCO_step: one row per gold proof step, whatever form prepare wrote
        train_rows = problem_of(params).step_rows_of(train_rows)
    # A variant that trains nothing is the warm-up model as it is: never wrapped in adapters.
    model, tokenizer = _load_for_training(params, paths.warmup_model, adapters=objective.kind != "none")
    # Rewards grade against the problem's own rows (by id), not the chat-rendered prompts.
    source_train, source_val = train_rows, val_rows
    source_rows = {row["id"]: row for row in train_rows}
    train_rows, val_rows = _prompts(params, tokenizer, train_rows), _prompts(params, tokenizer, val_rows)
    csv_path = paths.monitor_variant(variant)
    selector = None
    if objective.kind != "none":
        monitored = (source_train, train_rows), (source_val, val_rows)
        callbacks = [*callbacks, *_monitor(params, tokenizer, csv_path, *monitored)]
        if params.selection.enabled:  # TEA App. B.2: the best step on validation becomes the model
            split = MonitorSplit.of(source_val, val_rows, params.selection.prompts)
            selector = CheckpointSelector(
                params.selection, problem=problem_of(params), tokenizer=tokenizer, split=split, seed=params.study.seed
            )
            callbacks = [*callbacks, selector]
    fit = _TRAINERS[objective.kind]
    metrics = fit(params, paths, variant, objective, model, tokenizer, train_rows, val_rows, callbacks, source_rows)
    if selector is not None and main_process():
        write_json(paths.variant_model(variant) / SELECTION_REPORT, selector.report())
        metrics["selected_step"] = float(selector.best_step)
    if objective.kind == "none":
        if main_process():
            write_monitor_csv(None, csv_path)  # nothing trained, nothing measured
    else:
        _header_unless_monitored(params, csv_path)
    return metrics


def _no_training(params, paths, variant, objective, model, tokenizer, train_rows, val_rows, callbacks, source_rows):
    if main_process():
        save_model_and_tokenizer(model, tokenizer, paths.variant_model(variant))
    return {"train_steps": 0.0}


def _sft_variant(params, paths, variant, objective, model, tokenizer, train_rows, val_rows, callbacks, source_rows):
    return _fit(
        f"train-{variant}",
        params,
        paths,
        model,
        tokenizer,
        train_rows,
        params.train,
        objective=objective,
        eval_rows=val_rows,
        callbacks=callbacks,
        init_fingerprint=_model_fingerprint(paths.warmup_model),
        save_to=paths.variant_model(variant),
        **_answer_sampling(params, objective),
    )


def _answer_sampling(params: Params, objective: ObjectiveOptions) -> dict:
    """train_sft's answer-sampling arguments for an objective that estimates p̂ online (DCO_a), else none.

    Completions are sampled as the rollouts stage samples them (its length cap, ended
    by EOS), at the objective's temperature, top-p 1.
    """
    if not objective.answer_samples:
        return {}
    from aligntrain.rollouts.generate import SamplingConfig

    sampling = SamplingConfig(
        temperature=objective.temperature, top_p=1.0, max_new_tokens=params.rollouts.max_new_tokens
    )
    return {"answer_class": problem_of(params).answer_class, "answer_sampling": sampling}


def _rl_variant(params, paths, variant, objective, model, tokenizer, train_rows, val_rows, callbacks, source_rows):
    """TRL GRPO with the variant's advantage rule; rewards from the problem (its verifier or reward model).

    The problem grades each completion against its own row (``source_rows`` by id): a
    chat-rendered prompt is the policy's input, not what a verifier or reward model reads.
    """
    from aligntrain.training.rl import train_rl

    problem = problem_of(params)
    config = params.rl_config(variant)
    checkpoint_dir = _checkpoint_dir(
        paths,
        f"train-{variant}",
        params.rl,
        objective,
        params.model,
        params.problem,
        params.study.seed,
        _model_fingerprint(paths.warmup_model),
        *_callbacks_key(params, f"train-{variant}"),
    )
    start = time.perf_counter()
    metrics = train_rl(
        model,
        tokenizer,
        train_rows,
        config,
        checkpoint_dir,
        **_rewards(problem, source_rows),
        answer_class=problem.answer_class,
        binary_rewards=problem.binary_rewards,
        seed=params.study.seed,
        callbacks=callbacks,
        save_final=_saver(model, tokenizer, paths.variant_model(variant)),
    )
    metrics["wall_seconds"] = time.perf_counter() - start
    return metrics


def _rewards(problem, source_rows) -> dict:
    """train_rl's reward argument: per sample (a verifier, hydro's formulas) or per batch (a reward model)."""
    # Named after the problem: TRL logs each reward function as rewards/<its __name__>/mean.
    if problem.batched_rewards:

        def grade_batch(texts, rows):
            return problem.grade_batch(texts, [source_rows[r["id"]] for r in rows])

        grade_batch.__name__ = problem.name
        return {"grade_batch": grade_batch}

    def reward(text, row):
        return problem.reward(text, source_rows[row["id"]])

    reward.__name__ = problem.name
    return {"reward_fn": reward}


# objective kind -> how a variant of that kind is trained
_TRAINERS = {"none": _no_training, "sft": _sft_variant, "rl": _rl_variant}


def _model_fingerprint(path) -> str:
    """Hash of a saved model's weights file(s), so checkpoints follow their starting point."""
    import hashlib

    digest = hashlib.sha256()
    for f in sorted(path.glob("*.safetensors")):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]
