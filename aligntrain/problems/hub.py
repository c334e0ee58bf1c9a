"""Hub data sets as problems: typed sources, offline-safe fetching, loading through ``datasets``, grading.

A hub problem (``math``: :mod:`aligntrain.problems.competition_math`, ``gsm8k``:
:mod:`aligntrain.problems.gsm8k`) maps the rows of a published data set into
the row schema every problem shares (``id, level, prompt, completion, answer``;
:mod:`aligntrain.problems.rows`) and grades completions with
:mod:`aligntrain.grading`, rewards 0/1. docs/data.md lists the data sets, their
schemas, pinned revisions and how to pre-fetch them.

Sources [choice]: each split of the study (train, validation, test) reads one
:class:`Source`, a typed option of the problem (``problem.options`` in
params.yaml): either a hub data set by id at a *pinned commit* (``revision``,
40 hex digits: a branch or tag moves) with its subsets (configs) and hub split,
or local files (``parquet``) in the same schema. Both go through the same code:
the files are loaded with ``datasets`` (its ``parquet``/``json`` builders) one
file at a time, so an error names the file and the row index.

Fetching [choice]: the hub files are resolved with ``huggingface_hub.snapshot_download``
at the pinned commit (the Hugging Face cache, ``HF_HOME``), then loaded as local
files. Not ``datasets.load_dataset(id, revision=...)``: offline (``HF_HUB_OFFLINE=1``)
that falls back to "the latest cached version" of the data set in ``datasets``'
own cache whatever the revision asked (``datasets`` 5.2, ``CachedDatasetModuleFactory``),
so a study could silently read other data than its pin. Every source of the
requested splits is resolved before any row is read; one that this machine
cannot have stops with :class:`HubDataUnavailable`, naming the data set, its
revision and the files, with the ``hf download`` command that pre-fetches them
(or: point ``parquet`` at local files).

Rows [choice]: the prompt is ``"Q: <problem>\\nA: "`` (as ``arith``), the gold
completion the data set's solution, a newline, ``grading.ANSWER_MARKER``, the
gold answer and a newline: ``"<solution>\\n#### <answer>\\n"``. Completions are
several lines, so there is no stop text (``stop_text`` is ""): EOS ends them.
Ids are ``<problem>-[<subject>-]L<level>-<16 hex digits>``, the hex a BLAKE2b
hash of the problem text (stable across sources: MATH-500's copy of a MATH test
problem has the same id).

Splits [choice]: rows are deduplicated by prompt within a split; a prompt in
the test split is removed from train and validation, one in validation from
train (the counts are logged). Without a ``validation`` source, validation is
carved from the train source: a row goes to validation when a salted BLAKE2b
hash of its prompt falls under ``validation_fraction`` (as ``arith``'s
partitions: independent of the seed, the sizes and the levels, so no question
is ever in train for one study and in validation for another). ``generate_splits``
then draws ``sizes[split]`` rows of the requested levels without replacement
(seeded); asking for more than a split holds is an error.

Checks: a row with a missing field (a missing column or a null), a wrong type
or an unusable value (no boxed answer, an unknown level) stops the load with a
:class:`DataRowError` naming the file, the row and the field. A row whose gold
answer today's grader cannot parse, or whose gold completion it does not grade
correct (e.g. longer than ``grading.extract_answer``'s 2,000 characters), is
*ungradable*: dropped and counted (``ungradable: drop``, the default) or an
error (``ungradable: error``).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aligntrain import grading
from aligntrain.grading import ANSWER_MARKER
from aligntrain.options import Options, Real
from aligntrain.problems import rows
from aligntrain.validation import check_choices, check_int, is_int

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
STOP_TEXT = ""
# Salt of the validation carve-out; changing it re-partitions every train source (a new data set).
_SPLIT_SALT = b"aligntrain/hub/validation/v1:"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SUBSET = re.compile(r"[A-Za-z0-9_.-]+")


class HubDataUnavailable(FileNotFoundError):
    """A pinned hub data set (or local file) this machine cannot read; the message says how to get it."""


class DataRowError(ValueError):
    """A data set row that cannot be mapped; the message names the file, the row and the field."""


class SkipRow(Exception):
    """Raised by a row mapper for a row the data set itself leaves unusable (e.g. MATH's "Level ?")."""


@dataclass(frozen=True)
class Format:
    """One data set schema: its columns and where its files lie in the hub repository.

    ``files`` is a glob inside the repository with ``{subset}`` (when the data
    set has configs) and ``{split}`` filled in; ``key`` is a column that names a
    row in messages (besides its index), if the data set has one.
    """

    name: str
    columns: tuple[str, ...]
    files: str
    key: str | None = None

    @property
    def has_subsets(self) -> bool:
        return "{subset}" in self.files


class Source(BaseModel):
    """Where one split's rows come from: a hub data set at a pinned commit, or local files in its schema."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str | None = Field(None, description="Hub data set id (owner/name); None when `parquet` is given.")
    revision: str | None = Field(
        None, description="The commit of `dataset` to read: 40 hex digits (a branch or tag can move)."
    )
    subsets: tuple[str, ...] = Field((), description="Configs (subsets) of `dataset` to concatenate, in order.")
    split: str | None = Field(None, description="The split of `dataset` to read (e.g. train, test).")
    parquet: tuple[str, ...] = Field((), description="Local files in the data set's schema, read instead of the hub.")
    format: str | None = Field(
        None, description="The data set's schema (columns, hub file layout); None: the problem's default one."
    )

    @field_validator("revision")
    @classmethod
    def _pinned(cls, revision: str | None) -> str | None:
        if revision is not None and not _COMMIT.fullmatch(revision):
            raise ValueError(
                f"revision must be a commit SHA (40 lowercase hex digits), got {revision!r}: a branch or tag can "
                "move; the data set page's history on the hub lists the commits"
            )
        return revision

    @field_validator("subsets")
    @classmethod
    def _plain_subsets(cls, subsets: tuple[str, ...]) -> tuple[str, ...]:
        odd = [s for s in subsets if not _SUBSET.fullmatch(s)]
        if odd or len(set(subsets)) != len(subsets):
            raise ValueError(f"subsets must be distinct config names ({_SUBSET.pattern}), got {list(subsets)}")
        return subsets

    @model_validator(mode="after")
    def _one_origin(self) -> Source:
        if self.parquet:
            if self.dataset is not None or self.revision is not None or self.subsets or self.split is not None:
                raise ValueError("give either `parquet` (local files) or `dataset` with `revision`, `split`, `subsets`")
        elif self.dataset is None or self.revision is None or self.split is None:
            raise ValueError("a hub source needs `dataset`, `revision` (a commit SHA) and `split`; or give `parquet`")
        return self

    def describe(self) -> str:
        """``owner/name@<revision> [subsets] split`` or the local files, for messages."""
        if self.parquet:
            return f"local files {list(self.parquet)}"
        subsets = f" {list(self.subsets)}" if self.subsets else ""
        return f"{self.dataset}@{self.revision}{subsets} split {self.split!r}"


def hub_patterns(source: Source, fmt: Format) -> list[str]:
    """The globs of ``source``'s files inside its hub repository."""
    return [fmt.files.format(subset=subset, split=source.split) for subset in (source.subsets or [""])]


def prefetch_command(source: Source, fmt: Format) -> str:
    """The shell command that puts ``source``'s files in the Hugging Face cache."""
    includes = " ".join(f"--include '{pattern}'" for pattern in hub_patterns(source, fmt))
    return f"hf download {source.dataset} --repo-type dataset --revision {source.revision} {includes}"


def resolve_files(source: Source, fmt: Format) -> list[Path]:
    """The local files of ``source``: its ``parquet`` files, or its hub files at the pinned commit.

    Raises :class:`HubDataUnavailable` (saying how to get them) when they cannot be had.
    """
    if source.parquet:
        paths = [Path(p) for p in source.parquet]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise HubDataUnavailable(f"{source.describe()}: no such file(s) {missing}")
        return paths
    from huggingface_hub import constants, snapshot_download

    patterns = hub_patterns(source, fmt)

    def download(local_files_only: bool) -> Path:
        return Path(
            snapshot_download(
                source.dataset,
                repo_type="dataset",
                revision=source.revision,
                allow_patterns=patterns,
                local_files_only=local_files_only,
            )
        )

    def matching(folder: Path) -> dict[str, list[Path]]:
        return {pattern: sorted(folder.glob(pattern)) for pattern in patterns}

    # The cache first, asked explicitly: huggingface_hub 1.x lists the repository's tree for a commit
    # revision even when the snapshot is cached, which fails offline (2.x does not).
    try:
        found = matching(download(local_files_only=True))
        if all(found.values()):
            return [path for pattern in patterns for path in found[pattern]]
    except (OSError, ValueError):
        pass  # not (or not wholly) cached: fetch below, which names the cause when it cannot
    try:
        folder = download(local_files_only=False)
    except (OSError, ValueError) as err:
        offline = " (HF_HUB_OFFLINE=1: the hub is not asked)" if constants.HF_HUB_OFFLINE else ""
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HubDataUnavailable(
            f"hub data set {source.dataset} at revision {source.revision} (files {patterns}) is not in the "
            f"Hugging Face cache {constants.HF_HUB_CACHE}{offline}: {type(err).__name__}: {reason}\n"
            f"  pre-fetch it where the hub can be reached (then copy the cache, HF_HOME, here):\n"
            f"    {prefetch_command(source, fmt)}\n"
            f"  (huggingface-cli download takes the same arguments in older huggingface_hub), "
            f"or give the split local files in the same schema: `parquet: [...]` (docs/data.md)"
        ) from err
    files = []
    for pattern, found_files in matching(folder).items():
        if not found_files:
            raise HubDataUnavailable(
                f"hub data set {source.dataset} at revision {source.revision}: no file matches {pattern!r} in "
                f"{folder} (is {source.subsets or source.split!r} a config/split of the data set?); "
                f"pre-fetch with: {prefetch_command(source, fmt)}"
            )
        files += found_files
    return files


def read_records(path: Path, fmt: Format) -> list[dict[str, Any]]:
    """The rows of one data file, loaded by ``datasets``' ``parquet`` (or ``json`` for .json/.jsonl) builder."""
    import datasets

    builder = "json" if {".json", ".jsonl"} & set(path.suffixes) else "parquet"  # .jsonl.gz too
    try:
        table = datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as err:  # any reader failure (a corrupt file, not parquet): name the file
        raise DataRowError(f"{path}: cannot be read as {fmt.name} {builder}: {type(err).__name__}: {err}") from err
    missing = [column for column in fmt.columns if column not in table.column_names]
    if missing:
        raise DataRowError(
            f"{path}: field {missing[0]!r} is missing from every row (no column {missing}; the {fmt.name} schema "
            f"has columns {list(fmt.columns)}, the file {table.column_names})"
        )
    return table.to_list()


def text_field(record: Mapping[str, Any], field: str, where: str) -> str:
    """``record[field]`` as a non-empty str, else :class:`DataRowError` naming the row and the field."""
    value = record.get(field)
    if value is None:
        raise DataRowError(f"{where}: field {field!r} is missing (null)")
    if not isinstance(value, str):
        raise DataRowError(f"{where}: field {field!r} must be a str, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise DataRowError(f"{where}: field {field!r} is empty")
    return value


def int_field(record: Mapping[str, Any], field: str, where: str, allowed: Sequence[int]) -> int:
    """``record[field]`` as an int in ``allowed``, else :class:`DataRowError` naming the row and the field."""
    value = record.get(field)
    if value is None:
        raise DataRowError(f"{where}: field {field!r} is missing (null)")
    if not is_int(value):
        raise DataRowError(f"{where}: field {field!r} must be an int, got {type(value).__name__} {value!r}")
    if value not in allowed:
        raise DataRowError(f"{where}: field {field!r} must be in {tuple(allowed)}, got {value!r}")
    return int(value)


def format_prompt(question: str) -> str:
    """The text the model is conditioned on: ``"Q: <question>\\nA: "`` (as ``arith``)."""
    return f"Q: {question}\nA: "


def answer_line(answer: str) -> str:
    """The line that ends every gold completion: ``ANSWER_MARKER``, the answer, a newline (``"#### <answer>\\n"``)."""
    return f"{ANSWER_MARKER} {answer}\n"


def make_row(prefix: str, level: int, question: str, solution: str, answer: str) -> dict[str, Any]:
    """A row: the prompt, the solution then the answer after ``ANSWER_MARKER``, the id from the question."""
    return {
        "id": f"{prefix}-L{level}-{rows.text_digest(question)}",
        "level": level,
        "prompt": format_prompt(question),
        "completion": f"{solution.rstrip()}\n{answer_line(answer)}",
        "answer": answer,
    }


def ungradable_reason(row: Mapping[str, Any], scope: str = "number") -> str | None:
    """Why the grader (in ``scope``) cannot grade the row's gold (None: it grades the gold completion correct)."""
    if grading.canonical_answer(row["answer"], scope=scope) is None:
        return f"today's grader cannot parse the gold answer {row['answer']!r}"
    if not grading.grade(row["completion"], row["answer"], scope=scope).correct:
        return f"today's grader does not grade the gold completion ({len(row['completion'])} characters) correct"
    return None


def in_validation(prompt: str, fraction: float) -> bool:
    """True when the carve-out puts ``prompt`` in validation: salted BLAKE2b of the prompt under ``fraction``."""
    digest = hashlib.blake2b(_SPLIT_SALT + prompt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


class HubProblem(rows.RowStore, Options):
    """Base of the hub problems: sources per split, loading, splitting, verifiable grading (module docstring)."""

    binary_rewards: ClassVar[bool] = True
    stop_text: ClassVar[str] = STOP_TEXT
    #: the answer kinds the grader reads (aligntrain.grading: "number", or "math" for MATH's kinds)
    grading_scope: ClassVar[str] = "number"
    #: the schemas a source of this problem may have, by ``Source.format``
    formats: ClassVar[dict[str, Format]]
    #: the schema of a source that names none
    default_format: ClassVar[str]

    train: Source = Field(..., description="Source of the train split.")
    validation: Source | None = Field(
        None, description="Source of the validation split; None: carved from `train` (`validation_fraction`)."
    )
    test: Source = Field(..., description="Source of the test split.")
    validation_fraction: Real = Field(
        0.1, gt=0, lt=1, description="Share of the train source carved out as validation when `validation` is None."
    )
    ungradable: Literal["drop", "error"] = Field(
        "drop", description="Rows whose gold answer today's grader cannot grade: dropped (counted) or an error."
    )

    @model_validator(mode="after")
    def _sources_fit_formats(self) -> HubProblem:
        for split, source in self.sources().items():
            fmt = self.formats.get(source.format or self.default_format)
            if fmt is None:
                raise ValueError(f"{split}.format must be one of {sorted(self.formats)}, got {source.format!r}")
            if not source.parquet and fmt.has_subsets != bool(source.subsets):
                need = "needs `subsets` (its configs)" if fmt.has_subsets else "has no configs: leave `subsets` empty"
                raise ValueError(f"{split}: the {fmt.name} data set {need}")
        return self

    def format_of(self, source: Source) -> Format:
        """The schema of ``source``'s rows."""
        return self.formats[source.format or self.default_format]

    def sources(self) -> dict[str, Source]:
        """The source of each split that has its own (validation only when given)."""
        given = {"train": self.train, "validation": self.validation, "test": self.test}
        return {split: source for split, source in given.items() if source is not None}

    # ----------------------------------------------------------------- mapping (per problem)

    def to_row(self, fmt: Format, record: Mapping[str, Any], where: str) -> dict[str, Any]:
        """One data set record as a row; :class:`DataRowError` naming ``where`` and the field, or :class:`SkipRow`."""
        raise NotImplementedError

    def ungradable_reason(self, row: Mapping[str, Any]) -> str | None:
        """Why the grader cannot grade the row's gold (None: it can); :func:`ungradable_reason` by default."""
        return ungradable_reason(row, self.grading_scope)

    # ----------------------------------------------------------------- loading

    def load_splits(self, splits: Sequence[str] = SPLITS) -> dict[str, list[dict[str, Any]]]:
        """Every row (all levels) of ``splits``, mapped, deduplicated and disjoint (module docstring).

        All the sources these splits need are resolved first: an unavailable one
        stops here, before any row is read.
        """
        unknown = sorted(set(splits) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown splits {unknown}; known: {SPLITS}")
        carve = self.validation is None
        # test always: train and validation must leave out its prompts (and train those of validation).
        needed = {"test"}
        if "validation" in splits:
            needed.add("train" if carve else "validation")
        if "train" in splits:
            needed |= {"train"} if carve else {"train", "validation"}
        sources = {split: source for split, source in self.sources().items() if split in needed}
        files = self._resolve(sources)
        loaded = {split: self._read(split, sources[split], files[split]) for split in sources}

        test = _dedupe(loaded["test"], "test")
        taken = {row["prompt"] for row in test}
        result = {"test": test}
        if carve:
            train_source = loaded.get("train", [])
            validation = [r for r in train_source if in_validation(r["prompt"], self.validation_fraction)]
            train = [r for r in train_source if not in_validation(r["prompt"], self.validation_fraction)]
        else:
            validation, train = loaded.get("validation", []), loaded.get("train", [])
        result["validation"] = _dedupe(_without(validation, taken, "validation", "test"), "validation")
        taken |= {row["prompt"] for row in result["validation"]}
        result["train"] = _dedupe(_without(train, taken, "train", "test or validation"), "train")
        return {split: result[split] for split in splits}

    def _resolve(self, sources: Mapping[str, Source]) -> dict[str, list[Path]]:
        """The files of every source; one :class:`HubDataUnavailable` listing all that cannot be had."""
        files, problems = {}, []
        for split, source in sources.items():
            try:
                files[split] = resolve_files(source, self.format_of(source))
            except HubDataUnavailable as err:
                problems.append(f"[{split}] {err}")
        if problems:
            raise HubDataUnavailable(f"problem {self.name!r}: data not available:\n" + "\n".join(problems))
        return files

    def _read(self, split: str, source: Source, files: Sequence[Path]) -> list[dict[str, Any]]:
        """Mapped rows of ``source`` (its files in order), ungradable ones dropped or refused, counts logged."""
        fmt = self.format_of(source)
        mapped, skipped, dropped = [], Counter(), []
        for path in files:
            for index, record in enumerate(read_records(path, fmt)):
                key = f" ({fmt.key} {record.get(fmt.key)!r})" if fmt.key else ""
                where = f"{path}: row {index}{key}"
                try:
                    row = self.to_row(fmt, record, where)
                except SkipRow as skip:
                    skipped[str(skip)] += 1
                    continue
                reason = self.ungradable_reason(row)
                if reason is not None:
                    if self.ungradable == "error":
                        raise DataRowError(f"{where}: field 'answer' is ungradable: {reason} (ungradable: error)")
                    dropped.append(f"{where}: {reason}")
                    continue
                mapped.append(row)
        for why, count in skipped.items():
            logger.warning("%s %s: skipped %d rows: %s", self.name, split, count, why)
        if dropped:
            logger.warning(
                "%s %s: dropped %d of %d rows today's grader cannot grade (ungradable: drop), e.g. %s",
                self.name,
                split,
                len(dropped),
                len(dropped) + len(mapped),
                dropped[:3],
            )
        return mapped

    # ----------------------------------------------------------------- Problem protocol

    def generate_splits(
        self, sizes: Mapping[str, int], levels: Sequence[int], seed: int
    ) -> dict[str, list[dict[str, Any]]]:
        """``sizes[split]`` rows of ``levels`` per split, drawn without replacement (seeded) from the data set."""
        levels = check_choices(levels, "levels", self.levels)
        pools = self.load_splits(list(sizes))
        chosen = {}
        for split, n in sizes.items():
            n = check_int(n, f"sizes[{split!r}]", minimum=0)
            pool = [row for row in pools[split] if row["level"] in levels]
            if n > len(pool):
                raise ValueError(
                    f"sizes[{split!r}] asks for {n} rows but {self.name}'s {split} split has {len(pool)} at levels "
                    f"{list(levels)}; ask for at most {len(pool)}"
                )
            chosen[split] = self.draw(pool, n, split, seed)
        return chosen

    def draw(self, pool: Sequence[dict[str, Any]], n: int, split: str, seed: int) -> list[dict[str, Any]]:
        """``n`` rows of ``pool`` without replacement, seeded by (problem, seed, split): a split's rows."""
        return random.Random(f"{self.name}:{seed}:{split}").sample(list(pool), n)

    def pretrain_corpus(self, n: int, seed: int) -> list[str]:
        """``n`` texts (prompt + completion) drawn i.i.d. from the train split only (repeats allowed)."""
        n = check_int(n, "n", minimum=0)
        train = self.load_splits(["train"])["train"]
        return corpus_from_rows(train, n, f"{self.name}:pretrain:{seed}")

    def reward(self, completion: str, row: Mapping[str, Any]) -> float:
        """1.0 if the completion's answer equals the row's gold answer (``aligntrain.grading``), else 0.0."""
        return 1.0 if grading.is_correct(completion, row["answer"], scope=self.grading_scope) else 0.0

    def grade(self, completion: str, row: Mapping[str, Any]) -> grading.Verdict:
        """Answer text, answer class, correctness and reward of one completion."""
        return grading.grade(completion, row["answer"], scope=self.grading_scope)

    def gold_class(self, row: Mapping[str, Any]) -> str:
        """The answer class of the row's gold answer."""
        gold = grading.canonical_answer(row["answer"], scope=self.grading_scope)
        if gold is None:
            raise ValueError(f"row {row.get('id')!r}: field 'answer' {row['answer']!r} is not a parseable answer")
        return gold

    def answer_class(self, completion: str) -> str | None:
        """The completion's canonical answer (None: no parseable answer)."""
        return grading.canonical_answer(grading.extract_answer(completion), scope=self.grading_scope)

    def validate_row(self, row: Mapping[str, Any]) -> None:
        """Raise ValueError naming the row's id and the bad field if ``row`` is malformed.

        Fields and types (``rows.check_row_shape``), the prompt frame, the id
        (this problem's prefix, the level, the hash of the question), a gold
        answer today's grader parses, and a completion ending in the answer line
        that the grader reads back as the answer.
        """
        bad = rows.check_row_shape(row, self.name, self.levels)
        prompt = row["prompt"]
        if not (prompt.startswith("Q: ") and prompt.endswith("\nA: ") and len(prompt) > len("Q: \nA: ")):
            raise bad("prompt", f"is not of the form 'Q: <problem>\\nA: ': {prompt[:60]!r}")
        expected_end = f"-L{row['level']}-{rows.text_digest(prompt[3:-4])}"
        if not (row["id"].startswith(f"{self.name}-") and row["id"].endswith(expected_end)):
            raise bad("id", f"is not '{self.name}-...{expected_end}' (the level and the hash of the problem)")
        answer = row["answer"]
        if grading.canonical_answer(answer, scope=self.grading_scope) is None:
            raise bad("answer", f"{answer!r} is not an answer the grader can parse")
        if not row["completion"].endswith(f"\n{answer_line(answer)}"):
            raise bad("completion", f"does not end with the answer line '{ANSWER_MARKER} {answer}'")
        if grading.extract_answer(row["completion"]) != answer:
            raise bad("completion", "is not graded back to its answer (over grading.extract_answer's length limit?)")


def corpus_from_rows(train: Sequence[Mapping[str, Any]], n: int, salt: str) -> list[str]:
    """``n`` prompt + completion texts drawn i.i.d. from ``train`` (seeded by ``salt``)."""
    if n and not train:
        raise ValueError("the train split is empty: no pretraining corpus")
    rng = random.Random(salt)
    return [row["prompt"] + row["completion"] for row in rng.choices(list(train), k=n)]


def _dedupe(split_rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    kept, seen = [], set()
    for row in split_rows:  # the first row of each prompt, in order
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            kept.append(row)
    if len(kept) < len(split_rows):
        logger.warning("%s: dropped %d duplicate problems", split, len(split_rows) - len(kept))
    return kept


def _without(split_rows: list[dict[str, Any]], taken: set[str], split: str, other: str) -> list[dict[str, Any]]:
    kept = [row for row in split_rows if row["prompt"] not in taken]
    if len(kept) < len(split_rows):
        logger.warning("%s: dropped %d problems that are in %s", split, len(split_rows) - len(kept), other)
    return kept
