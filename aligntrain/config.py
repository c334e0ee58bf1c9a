"""The study's parameters (``params.yaml``) as validated, documented pydantic models.

Every stage calls :func:`load_params` before doing any work, so a bad value
stops the stage at once with a message naming the key (``train.learning_rate``,
``variants.pass_at_n.n``). Nothing is coerced silently: integers are strict
(``n: true`` is not 1, ``n: 16.0`` is not 16) and floats must be finite
(``.inf`` and ``.nan`` are refused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from aligntrain.models.settings import ModelConfig
from aligntrain.objectives import ObjectiveOptions, ReinforcementLearning, get_objective
from aligntrain.options import Real, Strict

#: joins a variant and a seed in a replicate's name: ``ce--s1`` is ``ce`` trained under seed 1 (study.seeds)
REPLICATE = "--s"


class StudyConfig(Strict):
    name: str = Field("default", description="Study name: the MLflow parent run and experiment tag.")
    seed: StrictInt = Field(0, description="Seed of data generation, initialisation and sampling.")
    experiment: str = Field("aligntrain", description="MLflow experiment name.")
    run: list[str] | None = Field(
        None,
        min_length=1,
        description="Variants this study trains, evaluates and compares (names in `variants`, which is the "
        "catalog); None: all of them. `dvc exp run -S 'study.run=[ce,tea]'` picks others.",
    )
    seeds: list[StrictInt] = Field(
        [],
        description="More seeds to replicate every variant of study.run under: each is trained, sampled and scored "
        "again as `<variant>--s<seed>` (docs/evidence.md), and compare's intervals run over seeds and prompts. "
        "The data, pretraining and the warm-up stay those of study.seed. []: one seed.",
    )
    torch_threads: StrictInt = Field(
        1,
        ge=0,
        description="CPU threads per torch process (0: torch's default). On a 2-core machine the default model "
        "trains at 0.10 s/step with 2 threads and 0.17 with 1 when idle, but 2 threads fall to 0.4-2.8 s/step "
        "as soon as another process is busy; 1 is the robust default.",
    )

    @model_validator(mode="after")
    def _seeds_are_new(self) -> StudyConfig:
        if len(set(self.seeds)) != len(self.seeds) or self.seed in self.seeds or min(self.seeds, default=0) < 0:
            raise ValueError(f"seeds must be distinct seeds >= 0 other than study.seed ({self.seed}), got {self.seeds}")
        return self

    @field_validator("name", "experiment")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # MLflow refuses an empty experiment name only when the first stage logs, minutes in.
        if not value.strip():
            raise ValueError("must not be empty")  # the key is prefixed: "study.experiment: must not be empty"
        return value


class ProblemConfig(Strict):
    name: str = Field("arith", description="Problem in aligntrain.problems (arith: embedded arithmetic).")
    levels: list[StrictInt] = Field([1, 2, 3, 4, 5], min_length=1, description="Difficulty levels to include.")
    train_size: StrictInt = Field(4000, ge=1, description="Training prompts (SFT warm-up and fine-tuning).")
    validation_size: StrictInt = Field(200, ge=1, description="Validation prompts (loss during training).")
    test_size: StrictInt = Field(200, ge=1, description="Test prompts (rollouts and evaluation).")
    pretrain_corpus_size: StrictInt = Field(20000, ge=1, description="Texts in the synthetic pretraining corpus.")
    data_files: dict[str, str] | None = Field(
        None, description="Local parquet per split {train, validation, test} instead of generated rows (hub data sets)."
    )
    options: dict[str, Any] = Field(
        {},
        description="The problem's typed options (`aligntrain list problems`), e.g. the hub data set, pinned revision, "
        "subsets and split sources of math and gsm8k (docs/data.md).",
    )

    @field_validator("name")
    @classmethod
    def _known_problem(cls, name: str) -> str:
        from aligntrain.problems import PROBLEMS

        PROBLEMS.get(name)  # ValueError listing the known problems
        return name

    @field_validator("levels")
    @classmethod
    def _problem_has_levels(cls, levels: list[int], info: ValidationInfo) -> list[int]:
        # The problem's own list, so that prepare's generate_splits cannot fail on it later.
        from aligntrain.problems import PROBLEMS

        if len(set(levels)) != len(levels):
            raise ValueError(f"levels must not repeat, got {levels}")
        name = info.data.get("name")  # absent when name itself failed validation
        if name is not None:
            allowed = PROBLEMS.get(name).levels
            unknown = [level for level in levels if level not in allowed]
            if unknown:
                raise ValueError(f"problem {name!r} has levels {list(allowed)}, got {unknown}")
        return levels

    @field_validator("data_files")
    @classmethod
    def _all_splits(cls, files: dict[str, str] | None) -> dict[str, str] | None:
        if files is not None and set(files) != {"train", "validation", "test"}:
            raise ValueError(f"data_files needs exactly the keys train, validation, test; got {sorted(files)}")
        return files

    @field_validator("options")
    @classmethod
    def _options_fit_problem(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from aligntrain.problems import PROBLEMS

        name = info.data.get("name")  # absent when name itself failed validation
        if name is not None:
            PROBLEMS.parse(name, options)  # ValueError naming the problem and each bad option
        return options


class OptimConfig(Strict):
    """One training run's optimisation schedule (AdamW, linear decay)."""

    steps: StrictInt = Field(500, ge=1, description="Optimizer steps.")
    batch_size: StrictInt = Field(64, ge=1, description="Sequences per optimizer step (per process).")
    learning_rate: Real = Field(1e-3, gt=0, description="Peak learning rate.")
    lr_warmup_ratio: Real = Field(0.05, ge=0, lt=1, description="Fraction of steps of linear learning-rate warm-up.")
    weight_decay: Real = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: Real = Field(
        1.0,
        gt=0,
        description="Clip the global gradient norm to this before each step (transformers' default 1.0; CAT Table 10 "
        "uses 0.3).",
    )
    checkpoint_every: StrictInt = Field(100, ge=1, description="Save a resumable checkpoint every this many steps.")
    log_every: StrictInt = Field(10, ge=1, description="Log training metrics every this many steps.")
    activation_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (memory for time; for large models)."
    )
    torch_threads: StrictInt | None = Field(
        None,
        ge=0,
        description="CPU threads of the stage that trains on this schedule (0: torch's default); None: "
        "study.torch_threads. For a stage that runs alone in the study's graph (pretrain, warmup): on 2 idle "
        "cores the default model pretrains 1.85x faster with 2 threads than with 1.",
    )


class RLSettings(OptimConfig):
    """params.yaml's ``rl`` section: what every RL variant of a study shares (matched compute).

    The schedule, the group and the sampling. ``batch_size`` counts completions per
    step: ``batch_size / num_generations`` prompts.
    """

    num_generations: StrictInt = Field(8, ge=2, description="Rollouts per prompt: the group size n of every rule.")
    temperature: Real = Field(1.0, gt=0, description="Sampling temperature of the training rollouts.")
    max_completion_length: StrictInt = Field(64, ge=1, description="Longest training rollout, in tokens.")
    beta: Real = Field(0.0, ge=0, description="KL coefficient to the warm-up policy (0: no reference model).")
    prompt_split: Literal["train", "test"] = Field(
        "train",
        description="Split whose prompts RL trains on. 'train': the training split, and the study's pass@k on the test "
        "split measures transfer to held-out prompts. 'test': the prompts the study evaluates on, a fixed set visited "
        "steps x batch_size / (num_generations x test_size) times, so pass@k measures what RL did on its own prompts "
        "(Tang et al.'s training-set curves, their Fig. 2); SFT variants still train on the training split.",
    )
    vllm: Literal["off", "colocate", "server"] = Field(
        "off",
        description="Training rollouts by vLLM through TRL (GPU environment): 'colocate' shares the training GPU, "
        "'server' asks a `trl vllm-serve` process (more GPUs); 'off': transformers' generate.",
    )
    vllm_gpu_memory_utilization: Real = Field(
        0.3, gt=0, le=1, description="Share of the GPU vLLM may take when colocated (the rest trains)."
    )
    reward_timeout_s: Real | None = Field(
        5.0, gt=0, description="Per-sample reward deadline in seconds; a late reward is unscorable (None: none)."
    )
    max_unscorable_fraction: Real = Field(
        0.5,
        ge=0,
        le=1,
        description="A training step whose share of unscorable rewards exceeds this fails at once, naming the share "
        "(broken gold answers or grader), instead of training on zero advantages.",
    )


class RLConfig(RLSettings):
    """One RL variant, everything its trainer needs: the study's ``rl`` section plus the variant's rule.

    The one object :func:`aligntrain.training.rl.train_rl` consumes, as TRL's
    trainer consumes one ``GRPOConfig``. ``Params.rl_config(variant)`` builds it from
    params.yaml; constructing it checks the rule's options against the group size
    and runs the rule once on a synthetic group, so a bad variant fails before any
    model is loaded. (The rule's fit to the problem's rewards is checked where the
    problem is known: ``Params`` and ``train_rl``.)
    """

    # Typed Any so that this module imports no torch; the validator below makes it a RuleOptions.
    rule: Any = Field(
        description="The advantage rule with its options: an aligntrain.advantages.RuleOptions "
        "(`aligntrain list rules`); a name or {name: ..., option: ...} is parsed."
    )
    loss_type: Literal["dapo", "dr_grpo", "grpo", "bnpo"] | None = Field(
        None, description="TRL's loss reduction; None: 'dr_grpo' for rule dr_grpo, else TRL's default 'dapo'."
    )
    history_capacity: StrictInt = Field(4000, ge=1, description="Rewards the RewardHistory keeps (FIFO; CAT eq. 105).")
    history_decay: Real | None = Field(
        None, gt=0, le=1, description="RewardHistory decay γ, needed by quantile='time_weighted' (CAT eq. 80)."
    )

    @field_validator("rule", mode="before")
    @classmethod
    def _parse_rule(cls, rule: Any) -> Any:
        from aligntrain.advantages import parse_rule

        if isinstance(rule, str):
            return parse_rule(rule)
        if isinstance(rule, dict):
            options = dict(rule)
            return parse_rule(options.pop("name", None), options)
        return parse_rule(rule)  # a RuleOptions as it is; anything else is refused

    @model_validator(mode="after")
    def _rule_fits_the_group(self) -> RLConfig:
        import copy

        import torch

        from aligntrain.advantages import MajorityThresholdState, compute_advantages

        self.rule.check_fits(group_size=self.num_generations)
        # One synthetic all-zero group with every context key filled catches what shows only
        # at call time (quantile='time_weighted' without a history decay) before training.
        n = self.num_generations
        compute_advantages(
            self.rule,
            torch.zeros(1, n),
            answers=[[None] * n],
            logps=torch.full((1, n), -1.0),
            history=copy.deepcopy(self.new_history()),
            step=0,
            threshold_state=MajorityThresholdState(),
        )
        return self

    @property
    def resolved_loss_type(self) -> str:
        if self.loss_type is not None:
            return self.loss_type
        # Dr. GRPO's advantage is GRPO's; what makes it Dr. GRPO is this reduction (DCO App. B).
        return "dr_grpo" if self.rule.name == "dr_grpo" else "dapo"

    def new_history(self):
        from aligntrain.advantages import RewardHistory

        return RewardHistory(capacity=self.history_capacity, decay=self.history_decay)


class Variant(Strict):
    """A training variant: an objective from the registry and that objective's options.

    Written flat in params.yaml: ``{objective: pass_at_n, budget: 16}``.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    objective: str = Field(description="Name in aligntrain.objectives.OBJECTIVES.")

    @property
    def options(self) -> ObjectiveOptions:
        return get_objective(self.objective).model_validate(self.model_extra or {})

    @model_validator(mode="after")
    def _options_fit_objective(self) -> Variant:
        self.options  # noqa: B018 - validates (raises ValueError naming the option)
        return self


class RolloutConfig(Strict):
    samples_per_prompt: StrictInt = Field(64, ge=1, description="Completions M per test prompt (the pool).")
    temperature: Real = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: Real = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: StrictInt = Field(96, ge=1, description="Generation length cap.")
    batch_size: StrictInt = Field(512, ge=1, description="Sequences generated together (left padding, KV cache).")
    splits: list[Literal["test", "validation"]] = Field(
        ["test"],
        description="Splits every variant is sampled, scored and compared on: test always; validation too for "
        "prompts held out from training when RL trains on the test split (rl.prompt_split). The diagnostics "
        "read the test pools.",
    )
    # Typed Any so that this module imports no generation code; the validator makes it a Backend.
    backend: Any = Field(
        "hf",
        validate_default=True,
        description="Generation backend with its options (`aligntrain list backends`): hf (transformers' "
        "generate) or vllm (GPU environment); a name or {name: ..., option: ...}.",
    )

    @field_validator("backend", mode="before")
    @classmethod
    def _parse_backend(cls, backend: Any) -> Any:
        from aligntrain.rollouts.backends import parse_backend

        return parse_backend(backend)

    @field_serializer("backend")
    def _dump_backend(self, backend: Any) -> dict:
        return backend.as_params()

    @field_validator("splits")
    @classmethod
    def _test_first(cls, splits: list[str]) -> list[str]:
        if not splits or splits[0] != "test" or len(set(splits)) != len(splits):
            raise ValueError(f"must list test first, then other splits once each, got {splits}")
        return splits

    @property
    def held_out(self) -> list[str]:
        """The splits evaluated besides test."""
        return self.splits[1:]


class EvaluateConfig(Strict):
    bootstrap_resamples: StrictInt = Field(1000, ge=10, description="Paired prompt-bootstrap resamples.")
    confidence: Real = Field(0.95, gt=0, lt=1, description="Confidence level of the intervals.")


class PrimaryEndpoint(Strict):
    """The one comparison a study is run to test, written in params before the run (docs/evidence.md).

    It is reported first, with its plain interval over seeds and prompts; every other comparison of
    the study is one family with Holm-adjusted p-values.
    """

    variant: str = Field(description="The variant tested (in study.run).")
    score: str = Field(
        description="Score and budget as compare names them: `pass@16`, `maj@8` (0/1 rewards), `max@64` "
        "(continuous rewards); k one of the evaluated budgets 1, 2, 4, … up to rollouts.samples_per_prompt."
    )
    baseline: str | None = Field(
        None, description="What the variant is compared with (in study.run); None: compare.baseline."
    )
    split: Literal["test", "validation"] = Field("test", description="The prompts scored: one of rollouts.splits.")

    @field_validator("score")
    @classmethod
    def _strategy_at_budget(cls, score: str) -> str:
        strategy, _, k = score.partition("@")
        if strategy not in ("pass", "maj", "max") or not k.isdigit() or int(k) < 1:
            raise ValueError(f"must be pass@k, maj@k or max@k with a budget k >= 1, got {score!r}")
        return score

    @property
    def k(self) -> int:
        return int(self.score.partition("@")[2])


class CompareConfig(Strict):
    baseline: str = Field("ce", description="Variant every other variant is compared against.")
    primary: PrimaryEndpoint | None = Field(
        None,
        description="The endpoint fixed before the run, reported first with its own interval; the other "
        "comparisons are one Holm-corrected family (docs/evidence.md). None: every comparison is in the family.",
    )
    ensembles: dict[str, list[str]] = Field(
        {},
        description="Ensembles compared as one more variant: name -> its member variants (two or more, in "
        "study.run). At budget k each member gets k/K of the attempts (DCO §5.3, Table 2's ensemble; "
        "estimators.ensemble_pass_at_k_curve); pass@k only. A primary endpoint may name one.",
    )


class OracleGradientConfig(Strict):
    """Oracle-gradient cosine (docs/math.md §4; TEA §4.6, Table 13) on one model's stored pool."""

    variant: str = Field("warmup", description="Variant whose model is probed (its models/variants/<name>).")
    prompts: StrictInt = Field(16, ge=1, description="Test prompts probed (the first ones of data/test.parquet).")
    samples_per_prompt: StrictInt = Field(256, ge=2, description="Pool size M per prompt: the empirical policy.")
    budget: StrictInt = Field(16, ge=1, description="Test-time budget N of the target strategy.")
    group_sizes: list[StrictInt] = Field(
        [8, 16, 32, 64], min_length=1, description="Training group sizes n subsampled."
    )
    seeds: StrictInt = Field(5, ge=1, description="Subsampled groups per prompt and group size.")
    rules: list[str] | None = Field(
        None, description="RL variants (catalog names) whose rules are compared; None: every RL variant that fits."
    )

    @field_validator("group_sizes")
    @classmethod
    def _groups_of_two(cls, sizes: list[int]) -> list[int]:
        if min(sizes) < 2:
            raise ValueError(f"group sizes must be >= 2, got {sizes}")
        return sizes


class SyntheticConfig(Strict):
    """The synthetic checks with known answers (docs/math.md §5)."""

    bandit_actions: StrictInt = Field(100, ge=2, description="Tang bandit: actions (Tang et al. Fig. 1: 100).")
    bandit_k: StrictInt = Field(4, ge=2, description="Tang bandit: samples per update k (Tang et al.: 4).")
    bandit_steps: StrictInt = Field(300, ge=1, description="Tang bandit: updates.")
    bandit_seeds: StrictInt = Field(16, ge=1, description="Tang bandit: independent bandits averaged.")
    bandit_learning_rate: Real = Field(
        1.0, gt=0, description="Tang bandit: step size on the logits (Tang et al.: 1.0)."
    )
    tea_group_sizes: list[StrictInt] = Field(
        [16, 32, 64, 128, 256], min_length=1, description="TEA Gaussian: group sizes n."
    )
    tea_repetitions: StrictInt = Field(20000, ge=10, description="TEA Gaussian: groups drawn per n.")
    tea_budget: StrictInt = Field(128, ge=2, description="TEA Gaussian: target best-of-N budget N (TEA App. E).")
    tea_alpha: Real = Field(0.25, gt=0, lt=1, description="TEA Gaussian: tail mass α.")


class DiagnosticsConfig(Strict):
    """The papers' diagnostics (docs/math.md §4-5), run by the diagnose / oracle_gradient / synthetic stages."""

    budgets: list[StrictInt] = Field(
        [4, 8, 16, 32], min_length=1, description="Budgets N of the efficiency diagnostic."
    )
    tail_fraction: Real = Field(0.25, gt=0, lt=1, description="Upper-tail share α of each pool in the QQ fit.")
    majority_consensus: Real = Field(
        0.4,
        gt=0,
        le=1,
        description="Consensus ρ of the majority SFT weight (k = ⌈ρN⌉) set against the exact weight p_t·D/P.",
    )
    majority_ties: Literal["uniform", "strict"] = Field(
        "uniform",
        description=(
            "Tie convention of majority vote in the diagnose stage's forced-vote diagnostics (D/a_t and the "
            "exact weight; docs/math.md §4.1): 'uniform' scores a tie of the gold answer with τ rivals "
            "1/(1+τ), as the maj@k the study evaluates; 'strict' scores it 0 (the gold answer must have "
            "strictly more votes than every rival), the CAT authors' convention, for comparison with CAT Fig. 9."
        ),
    )
    oracle: OracleGradientConfig = OracleGradientConfig()
    synthetic: SyntheticConfig = SyntheticConfig()


class MonitorConfig(Strict):
    """Training-time monitor (docs/monitor.md; issue 13's diagnosis): every ``every`` optimizer steps of the
    warmup and train stages (and at step 0 and at the end), pass@k, mean reward, success per level and
    per prompt, and the greedy completion's probability on fixed training and validation prompts.

    Off by default: the training stages then run exactly as without it. On, it adds sampling time
    (about ``2 × prompts × samples`` completions per measurement) but never changes what is trained:
    sampling runs on a forked RNG, the model's mode is restored, and its seed is the study seed and the step.
    """

    enabled: bool = Field(
        False,
        description="Measure during training and log `monitor/<split>/...` step metrics to MLflow; the stage's "
        "plots/monitor CSV is then filled (with it off the CSV holds only its header).",
    )
    every: StrictInt = Field(
        50, ge=1, description="Measure every this many optimizer steps (and at step 0 and the end)."
    )
    prompts: StrictInt = Field(
        32,
        ge=1,
        description="Prompts per split (training and validation), the same at every step: the first ones of each "
        "level in the split's order, taken level by level in turn (fewer when the split holds fewer).",
    )
    samples: StrictInt = Field(64, ge=1, description="Sampled completions per prompt: the n of the pass@k estimator.")
    ks: list[StrictInt] = Field(
        [1, 2, 4, 8, 16, 32, 64],
        min_length=1,
        description="Budgets k of pass@k (unbiased estimator from `samples` completions; each k <= samples).",
    )
    temperature: Real = Field(
        1.0, gt=0, description="Sampling temperature (the rollouts stage's, 1.0, for curves comparable to evaluate's)."
    )
    top_p: Real = Field(1.0, gt=0, le=1, description="Nucleus sampling mass (the rollouts stage's, 1.0).")
    max_new_tokens: StrictInt = Field(
        96, ge=1, description="Generation length cap of the sampled and the greedy completions (rollouts': 96)."
    )
    batch_size: StrictInt = Field(512, ge=1, description="Sequences generated together (left padding, KV cache).")

    @field_validator("ks")
    @classmethod
    def _budgets_increase(cls, ks: list[int]) -> list[int]:
        if min(ks) < 1 or ks != sorted(set(ks)):
            raise ValueError(f"ks must be increasing budgets >= 1, got {ks}")
        return ks

    @model_validator(mode="after")
    def _budgets_fit_samples(self) -> MonitorConfig:
        if max(self.ks) > self.samples:
            raise ValueError(f"ks go up to {max(self.ks)} but samples is {self.samples}: pass@k needs k <= samples")
        return self


class SelectionConfig(Strict):
    """Checkpoint selection on validation prompts (TEA App. B.2; aligntrain/training/selection.py).

    The train stage scores its model at step 0, every ``every`` optimizer steps and at the end, and
    saves the best-scoring step's weights as the variant's model, with the table of candidates beside
    it (``models/variants/<v>/selection.json``). Off by default: the last step is the model. Written in
    params.yaml only when used: the train stages then track it.
    """

    enabled: bool = Field(False, description="Select the train stage's checkpoint on validation prompts.")
    every: StrictInt = Field(50, ge=1, description="Optimizer steps between candidates (and step 0 and the end).")
    prompts: StrictInt = Field(
        128, ge=1, description="Fixed validation prompts scored (TEA App. B.2: 128), levels in turn as the monitor's."
    )
    samples: StrictInt = Field(32, ge=1, description="Completions sampled per prompt (TEA App. B.2: 32).")
    top: StrictInt = Field(10, ge=1, description="Each prompt scores the mean reward of its top this many (TEA: 10).")
    temperature: Real = Field(1.0, gt=0, description="Sampling temperature (the rollouts stage's, 1.0).")
    top_p: Real = Field(1.0, gt=0, le=1, description="Nucleus sampling mass (the rollouts stage's, 1.0).")
    max_new_tokens: StrictInt = Field(96, ge=1, description="Generation length cap of the sampled completions.")
    batch_size: StrictInt = Field(512, ge=1, description="Sequences generated together.")

    @model_validator(mode="after")
    def _top_of_samples(self) -> SelectionConfig:
        if self.top > self.samples:
            raise ValueError(f"selection.top ({self.top}) must be <= selection.samples ({self.samples})")
        return self


class LaunchConfig(Strict):
    """How the training stages (pretrain, warmup, train) run: one process, or several under ``accelerate launch``.

    The stage's command launches itself (aligntrain/launch.py), so ``dvc repro`` and the agents run a
    multi-GPU stage as they run any other. Written in params.yaml only when it is not one process:
    then the training stages track it (the batch per step is ``batch_size`` × ``num_processes``).
    """

    num_processes: StrictInt = Field(
        1, ge=1, description="Processes per training stage, one per GPU (batch_size is per process). 1: no launch."
    )
    config_file: str | None = Field(
        None,
        description="An accelerate config file, relative to the study folder: the repository's accelerate/ holds "
        "ddp.yaml, fsdp2.yaml, zero2.yaml and zero3.yaml (for a pipeline, `../../accelerate/fsdp2.yaml`). None: "
        "plain data parallel. Its num_processes is overridden by this section's.",
    )

    @property
    def multi_process(self) -> bool:
        return self.num_processes > 1


class Params(Strict):
    study: StudyConfig = StudyConfig()
    problem: ProblemConfig = ProblemConfig()
    model: ModelConfig = ModelConfig()
    pretrain: OptimConfig
    warmup: OptimConfig
    train: OptimConfig
    rl: RLSettings | None = Field(None, description="Shared RL settings; required when a variant is RL.")
    variants: dict[str, Variant] = Field(min_length=1)
    rollouts: RolloutConfig = RolloutConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    compare: CompareConfig = CompareConfig()
    diagnostics: DiagnosticsConfig = DiagnosticsConfig()
    monitor: MonitorConfig = Field(
        MonitorConfig(), description="Training-time monitor of the warmup and train stages (off by default)."
    )
    launch: LaunchConfig = Field(
        LaunchConfig(), description="One process per training stage, or several under accelerate launch."
    )
    selection: SelectionConfig = Field(
        SelectionConfig(), description="Checkpoint selection of the train stages on validation (off by default)."
    )

    @field_validator("variants")
    @classmethod
    def _variant_names_are_paths(cls, variants: dict[str, Variant]) -> dict[str, Variant]:
        for name in variants:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"variant name {name!r} must be letters, digits, '_' or '-'")
            if REPLICATE in name:
                raise ValueError(f"variant name {name!r}: {REPLICATE!r} marks a seed replicate (study.seeds)")
        return variants

    @model_validator(mode="after")
    def _run_names_variants(self) -> Params:
        run = self.study.run or []
        unknown = [name for name in run if name not in self.variants]
        if unknown:
            raise ValueError(f"study.run names {unknown}, not in variants: {sorted(self.variants)}")
        if len(set(run)) != len(run):
            raise ValueError(f"study.run lists a variant twice: {run}")
        return self

    @model_validator(mode="after")
    def _baseline_is_a_variant(self) -> Params:
        if self.compare.baseline not in self.run_variants:
            raise ValueError(
                f"compare.baseline {self.compare.baseline!r} is not a variant of the study; "
                f"study.run: {self.run_variants}"
            )
        primary = self.compare.primary
        if primary is None:
            return self
        for key, name in (("variant", primary.variant), ("baseline", primary.baseline)):
            if name is not None and name not in self.variants and name not in self.compare.ensembles:
                raise ValueError(
                    f"compare.primary.{key} {name!r} is not in the catalog or compare.ensembles: "
                    f"{sorted(self.variants) + sorted(self.compare.ensembles)}"
                )
        ensembles = [name for name in (primary.variant, primary.baseline) if name in self.compare.ensembles]
        if ensembles and not primary.score.startswith("pass@"):
            raise ValueError(
                f"compare.primary.score {primary.score!r}: the ensemble {ensembles[0]!r} is scored by pass@k only"
            )
        if primary.variant == (primary.baseline or self.compare.baseline):
            raise ValueError(f"compare.primary compares {primary.variant!r} with itself: name another baseline")
        if primary.split not in self.rollouts.splits:
            raise ValueError(
                f"compare.primary.split {primary.split!r} is not evaluated: rollouts.splits is {self.rollouts.splits}"
            )
        pool = self.rollouts.samples_per_prompt
        power_of_two = primary.k & (primary.k - 1) == 0
        if primary.k > pool or not (power_of_two or primary.k == pool):  # evaluation.curves.budgets
            raise ValueError(
                f"compare.primary.score {primary.score!r}: the evaluated budgets are 1, 2, 4, ... up to "
                f"rollouts.samples_per_prompt = {self.rollouts.samples_per_prompt}"
            )
        return self

    @property
    def primary_endpoint(self) -> tuple[str, str, str, str] | None:
        """(variant, score, baseline, split) of ``compare.primary``, its baseline filled in; None when none
        is fixed, or when this run leaves out one of its variants (an exploratory ``study.run``)."""
        p = self.compare.primary
        if p is None or self.primary_not_run:
            return None
        return (p.variant, p.score, p.baseline or self.compare.baseline, p.split)

    @property
    def primary_not_run(self) -> list[str]:
        """The variants of ``compare.primary`` (an ensemble's members) this run's ``study.run`` leaves out."""
        p = self.compare.primary
        named = [] if p is None else [p.variant, p.baseline or self.compare.baseline]
        named = [member for name in named for member in self.compare.ensembles.get(name, [name])]
        return [name for name in named if name not in self.run_variants]

    @property
    def run_ensembles(self) -> dict[str, list[str]]:
        """``compare.ensembles`` whose members this run trains: the ones compare scores."""
        run = set(self.run_variants)
        return {name: members for name, members in self.compare.ensembles.items() if run.issuperset(members)}

    @model_validator(mode="after")
    def _ensembles_name_variants(self) -> Params:
        for name, members in self.compare.ensembles.items():
            if name in self.variants:
                raise ValueError(f"compare.ensembles.{name}: the name of a catalog variant; name the ensemble apart")
            if len(members) < 2 or len(set(members)) != len(members):
                raise ValueError(f"compare.ensembles.{name}: two or more distinct member variants, got {members}")
            unknown = [m for m in members if m not in self.variants]
            if unknown:
                raise ValueError(f"compare.ensembles.{name}: {unknown} not in the catalog: {sorted(self.variants)}")
        return self

    @model_validator(mode="after")
    def _monitor_runs_in_one_process(self) -> Params:
        if self.monitor.enabled and self.launch.multi_process:
            raise ValueError(
                f"monitor.enabled samples in one process, and launch.num_processes is {self.launch.num_processes}: "
                "turn the monitor off for a launched study (the evaluation stages measure the trained models)"
            )
        if self.selection.enabled and self.launch.multi_process:
            raise ValueError(
                f"selection.enabled samples in one process, and launch.num_processes is "
                f"{self.launch.num_processes}: turn selection off for a launched study"
            )
        return self

    @model_validator(mode="after")
    def _oracle_names_variants(self) -> Params:
        oracle = self.diagnostics.oracle
        if oracle.variant not in self.run_variants:
            raise ValueError(f"diagnostics.oracle.variant {oracle.variant!r} is not in study.run {self.run_variants}")
        for name in oracle.rules or []:
            if name not in self.variants or self.variants[name].objective != "rl":
                raise ValueError(f"diagnostics.oracle.rules: {name!r} is not an RL variant of the catalog")
        return self

    @model_validator(mode="after")
    def _budgets_fit_pools(self) -> Params:
        """A diagnostic's budget or group larger than the pool it draws from would give empty results."""
        pool, oracle = self.rollouts.samples_per_prompt, self.diagnostics.oracle
        too_big = [n for n in self.diagnostics.budgets if n > pool]
        if too_big:
            raise ValueError(
                f"diagnostics.budgets {too_big} exceed rollouts.samples_per_prompt ({pool}), the pool they draw from"
            )
        for key, sizes in (("budget", [oracle.budget]), ("group_sizes", oracle.group_sizes)):
            too_big = [n for n in sizes if n > oracle.samples_per_prompt]
            if too_big:
                raise ValueError(
                    f"diagnostics.oracle.{key} {too_big} exceeds diagnostics.oracle.samples_per_prompt "
                    f"({oracle.samples_per_prompt}), the pool it draws from"
                )
        if oracle.prompts > self.problem.test_size:
            raise ValueError(
                f"diagnostics.oracle.prompts ({oracle.prompts}) exceeds problem.test_size ({self.problem.test_size})"
            )
        return self

    @property
    def run_variants(self) -> list[str]:
        """The variants of this study, in order: ``study.run``, or the whole catalog when it is unset."""
        return list(self.study.run) if self.study.run else list(self.variants)

    @model_validator(mode="after")
    def _rl_variants_fit(self) -> Params:
        """Each RL variant's rule fits the group size and the problem's rewards and answer classes."""
        from aligntrain.problems import PROBLEMS

        # The problem with its options: they can decide its rewards (code's reward_mode).
        problem = PROBLEMS.parse(self.problem.name, self.problem.options)
        if hasattr(problem, "search_step") and not hasattr(self.rollouts.backend, "search"):
            raise ValueError(
                f"rollouts.backend {self.rollouts.backend.name!r}: problem {problem.name!r} is searched a tactic at a "
                "time (aligntrain.rollouts.search), which runs on transformers: set rollouts.backend to hf"
            )
        for name, variant in self.variants.items():
            if variant.options.trains_on_steps and not hasattr(problem, "step_rows_of"):
                raise ValueError(
                    f"variants.{name}: objective {variant.objective!r} trains on proof steps, and problem "
                    f"{problem.name!r} has none (rewrite and lean do)"
                )
            if variant.options.kind != "rl":
                continue
            if self.rl is None:
                raise ValueError(f"variants.{name} is an RL variant: params need an 'rl' section")
            own = variant.options.num_generations
            n = self.rl.num_generations if own is None else own
            where = "rl.num_generations" if own is None else f"variants.{name}.num_generations"
            if self.rl.batch_size % n:
                # Each process's batch (batch_size is per process, also under launch) holds whole
                # groups: stricter than TRL, which checks only the global batch across processes.
                raise ValueError(
                    f"rl.batch_size ({self.rl.batch_size}) must be a multiple of {where} ({n}): "
                    "each step holds whole groups"
                )
            prompts = self.problem.test_size if self.rl.prompt_split == "test" else self.problem.train_size
            if self.rl.batch_size // n > prompts:
                # TRL's sampler draws whole batches of distinct prompts: it would end the run at step 0.
                raise ValueError(
                    f"rl.batch_size ({self.rl.batch_size}) asks for {self.rl.batch_size // n} "
                    f"prompts a step (batch_size / {where}), more than the {prompts} of problem."
                    f"{'test_size' if self.rl.prompt_split == 'test' else 'train_size'}"
                )
            try:
                rule = self.rl_config(name).rule
                rule.check_fits(binary_rewards=problem.binary_rewards)
            except (ValueError, ValidationError) as err:
                raise ValueError(f"variants.{name}: {_one_line(err)}") from None
            if "answers" in rule.context_needed() and getattr(problem, "answer_class_needs_row", False):
                raise ValueError(
                    f"variants.{name}: rule {rule.name!r} needs the answer class of each completion alone, "
                    f"and problem {problem.name!r} classes a completion only against its row (grade)"
                )
        return self

    def rl_config(self, name: str) -> RLConfig:
        """The configuration of the RL variant ``name``: the shared ``rl`` section and the variant's rule."""
        objective = self.variant(name).options
        if not isinstance(objective, ReinforcementLearning) or self.rl is None:
            raise ValueError(f"variant {name!r} is not an RL variant (or params have no 'rl' section)")
        shared = dict(self.rl)
        if objective.num_generations is not None:  # the variant's own group size (TEA Table 4)
            shared["num_generations"] = objective.num_generations
        return RLConfig(**shared, rule=objective.rule_config, loss_type=objective.loss_type)

    def variant(self, name: str) -> Variant:
        """The catalog entry of a variant, or of the variant a seed replicate (``ce--s1``) repeats."""
        base, _ = self.replicate_of(name)
        if base not in self.variants:
            raise ValueError(f"unknown variant {name!r}; params.yaml declares {sorted(self.variants)}")
        return self.variants[base]

    @property
    def replicates(self) -> list[str]:
        """Every trained model of the study: study.run under study.seed, then each under every seed of study.seeds."""
        return self.run_variants + [f"{v}{REPLICATE}{seed}" for seed in self.study.seeds for v in self.run_variants]

    def replicates_of(self, variant: str) -> list[str]:
        """``variant`` and its seed replicates, study.seed first."""
        return [variant] + [f"{variant}{REPLICATE}{seed}" for seed in self.study.seeds]

    def replicate_of(self, name: str) -> tuple[str, int]:
        """(variant, seed) of a replicate name; a plain variant name is its own replicate under study.seed."""
        base, mark, seed = name.partition(REPLICATE)
        if not mark:
            return name, self.study.seed
        if not seed.isdigit() or int(seed) not in self.study.seeds:
            raise ValueError(f"{name!r} is no replicate of this study: study.seeds is {self.study.seeds}")
        return base, int(seed)

    def torch_threads(self, stage: str, variant: str | None = None) -> int:
        """CPU threads of a stage: its schedule's ``torch_threads`` when set, else ``study.torch_threads``.

        pretrain and warmup train on their own sections; ``train`` on ``rl`` (RL variants) or ``train``.
        """
        schedule: OptimConfig | None = {"pretrain": self.pretrain, "warmup": self.warmup}.get(stage)
        if stage == "train" and variant is not None:
            rl = isinstance(self.variant(variant).options, ReinforcementLearning)
            schedule = self.rl if rl else self.train
        own = None if schedule is None else schedule.torch_threads
        return self.study.torch_threads if own is None else own

    def for_replicate(self, name: str) -> Params:
        """These parameters with study.seed set to the replicate's seed (the seed its stages train and sample with)."""
        _, seed = self.replicate_of(name)
        if seed == self.study.seed:
            return self
        return self.model_copy(update={"study": self.study.model_copy(update={"seed": seed})})


def _one_line(err: Exception) -> str:
    if isinstance(err, ValidationError):
        from aligntrain.options import option_errors

        return option_errors(err)
    return str(err)


class ParamsError(ValueError):
    """Invalid params.yaml; the message names every offending key."""


def parse_params(raw: dict[str, Any]) -> Params:
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            key = ".".join(str(p) for p in e["loc"])
            message = e["msg"].removeprefix("Value error, ")
            lines.append(f"  {key}: {message}" if key else f"  {message}")
        raise ParamsError("invalid parameters:\n" + "\n".join(lines)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    return parse_params(read_params_yaml(path))


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in one mapping is an error.

    YAML 1.2 requires unique keys; PyYAML keeps the last silently, so a variant or section
    written twice would lose the first without a word.
    """

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} written twice, on lines {seen[key]} and {line}", key_node.start_mark
                )
            seen.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)


def read_params_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of a parameters file; ParamsError naming the file and line for bad YAML or a repeated key."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"parameters file {path} not found")
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        raise ParamsError(_yaml_error_line(path, err)) from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path} must hold a mapping at the top level")
    return raw


def _yaml_error_line(path: Path, err: yaml.YAMLError) -> str:
    """``file:line:column: what`` (1-based, like an editor) for a YAML syntax error."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    what = " ".join((f"{problem} ({context})" if context else problem).split())  # one line
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: invalid YAML: {what}"
