"""Pretrained causal LMs, by hub id at a pinned revision or by local path, loaded one way.

:func:`resolve_model_source` turns ``model.base_model`` into a local directory: a local
path as it is, a hub id into its snapshot in the Hugging Face cache. On an offline machine
(``HF_HUB_OFFLINE=1``) a snapshot that is not cached is a :class:`ModelNotAvailableError`
naming the id and revision and saying how to pre-fetch it; online, the snapshot is
downloaded there and then (configs, safetensors weights, tokenizer files; the pickled
``pytorch_model*.bin`` weights only when the revision has no safetensors). Either way this
happens before any work: ``pretrain`` calls it first. Pickled weights are read weights-only
(:func:`aligntrain.models.weights.check_pickled_weights`): a file that holds anything but
tensors is refused, and no remote code is fetched or run.

:func:`load_pretrained` loads the resolved model with :func:`load_model_and_tokenizer` in
``model.dtype`` (its tokenizer padding on the left, so that generation continues every row
from its last token), and checks the chat template when ``model.chat_template`` asks for one; :func:`chat_prompt`
renders a prompt as one user turn of that template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aligntrain.models.loading import load_model_and_tokenizer
from aligntrain.models.weights import PICKLED_WEIGHTS

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from aligntrain.models.settings import ModelConfig

#: the files of a hub model that are fetched: configs, safetensors weights, tokenizer files, chat templates
#: (no remote code; pickled weights only as :func:`_download` says)
MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


class ModelNotAvailableError(FileNotFoundError):
    """A hub model that cannot be had: not in the cache of an offline machine, or not on the hub at that revision."""


def resolve_model_source(name: str, revision: str | None = None, *, cache_dir: str | Path | None = None) -> Path:
    """The local directory holding model ``name``: a local path, or a hub id's snapshot at ``revision``.

    A hub id needs a ``revision`` (a commit sha pins it; a branch or tag is read from
    the cache's refs offline). The cached snapshot is used when there is one; otherwise
    an offline machine raises :class:`ModelNotAvailableError` with the pre-fetch command,
    and an online one downloads :data:`MODEL_FILES`. ``cache_dir``: the hub cache
    (default: ``HF_HUB_CACHE``).
    """
    from aligntrain.models.settings import ModelConfig

    if ModelConfig.is_local_path(name):
        if revision is not None:
            raise ValueError(f"revision {revision!r} applies to hub ids; {name!r} is a local path")
        path = Path(name).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no model at {path} (expected {path / 'config.json'}, a save_pretrained folder)")
        return path
    if revision is None:
        raise ValueError(f"hub model {name!r} needs a pinned revision (a commit sha)")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            name, revision=revision, cache_dir=cache_dir, local_files_only=True, allow_patterns=MODEL_FILES
        )
    except LocalEntryNotFoundError:  # incomplete snapshots included
        if constants.HF_HUB_OFFLINE:
            raise ModelNotAvailableError(
                f"hub model {name!r} at revision {revision!r} is not in the local Hugging Face cache "
                f"({cache_dir or constants.HF_HUB_CACHE}) and this machine is offline (HF_HUB_OFFLINE=1): "
                + prefetch_hint(name, revision, cache_dir)
            ) from None
        folder = _download(name, revision, cache_dir)
    return _checked_snapshot(Path(folder), name, revision)


def prefetch_hint(name: str, revision: str, cache_dir: str | Path | None = None) -> str:
    """How to make a hub model available to an offline machine, or to do without the hub."""
    cache = f" --cache-dir {cache_dir}" if cache_dir else ""
    return (
        f"pre-fetch it where the hub is reachable, into the cache this machine reads: "
        f"`hf download {name} --revision {revision}{cache}` (huggingface_hub < 1.0: "
        f"`huggingface-cli download {name} --revision {revision}{cache}`); or set model.base_model to a local "
        "directory holding the model (save_pretrained layout) and drop model.revision"
    )


def _download(name: str, revision: str, cache_dir: str | Path | None) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        folder = snapshot_download(name, revision=revision, cache_dir=cache_dir, allow_patterns=MODEL_FILES)
        if not any(Path(folder).glob("*.safetensors")):
            # Some repositories keep only pytorch_model.bin at their main revision (nferruz/ProtGPT2):
            # fetched then, never beside safetensors (twice the download, and transformers prefers safetensors).
            folder = snapshot_download(name, revision=revision, cache_dir=cache_dir, allow_patterns=[PICKLED_WEIGHTS])
        return folder
    except RevisionNotFoundError:
        raise ModelNotAvailableError(f"hub model {name!r} has no revision {revision!r}") from None
    except RepositoryNotFoundError:  # gated repositories included
        raise ModelNotAvailableError(
            f"hub model {name!r} does not exist, or needs a token (HF_TOKEN) this machine lacks"
        ) from None
    except LocalEntryNotFoundError as err:  # the hub could not be reached
        raise ModelNotAvailableError(
            f"hub model {name!r} at revision {revision!r} could not be downloaded ({err}): "
            + prefetch_hint(name, revision, cache_dir)
        ) from None


def _checked_snapshot(folder: Path, name: str, revision: str) -> Path:
    """``folder`` if it holds a config and weights, safetensors or pickled (a partial download does not)."""
    found = {"config.json": (folder / "config.json").is_file(), "weights": _has_weights(folder)}
    missing = [what for what, present in found.items() if not present]
    if missing:
        raise ModelNotAvailableError(
            f"hub model {name!r} at revision {revision!r}: the cached snapshot {folder} has no "
            f"{' and no '.join(missing)} (*.safetensors, or {PICKLED_WEIGHTS} read weights-only): "
            + prefetch_hint(name, revision)
        )
    return folder


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob(PICKLED_WEIGHTS))


def load_pretrained(
    config: ModelConfig, *, cache_dir: str | Path | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``config.base_model`` resolved (:func:`resolve_model_source`) and loaded in ``config.dtype``, padding left.

    With ``config.chat_template`` the tokenizer must have a chat template: a base
    model without one is a ValueError naming it.
    """
    if config.base_model is None:
        raise ValueError("model.base_model is not set: the tiny model is built by pretrain, not loaded")
    folder = resolve_model_source(config.base_model, config.revision, cache_dir=cache_dir)
    model, tokenizer = load_model_and_tokenizer(folder, dtype=config.dtype)
    if config.chat_template and not tokenizer.chat_template:
        raise ValueError(
            f"model.chat_template is true, but the tokenizer of {config.base_model!r} has no chat template "
            "(none in tokenizer_config.json or chat_template.jinja): set model.chat_template: false for a base model"
        )
    return model, tokenizer


def chat_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """``prompt`` as one user turn of the tokenizer's chat template, followed by the assistant's header.

    Rendered to text (``add_generation_prompt=True``), so that every consumer — TRL's
    SFT and GRPO tokenization, generation — tokenizes it as it tokenizes any prompt,
    special tokens included. A template that writes the BOS token itself would then
    give two, so a leading BOS is dropped from the text when the tokenizer adds one.
    """
    if not tokenizer.chat_template:
        raise ValueError(f"{type(tokenizer).__name__} has no chat template to render prompts with")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and _adds_bos(tokenizer):
        text = text[len(bos) :]
    return text


def with_chat_template(rows: Sequence[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase) -> list[dict]:
    """``rows`` with each ``"prompt"`` rendered by :func:`chat_prompt`; the other columns as they are."""
    return [{**row, "prompt": chat_prompt(tokenizer, row["prompt"])} for row in rows]


def policy_rows(config: ModelConfig, tokenizer: PreTrainedTokenizerBase, rows: Sequence[Mapping[str, Any]]) -> list:
    """``rows`` as the policy reads them: prompts rendered by the chat template when ``config.chat_template``.

    The one place training, rollouts and the diagnostics turn a row's prompt into the model's input.
    """
    return with_chat_template(rows, tokenizer) if rows and config.chat_template else list(rows)


def _adds_bos(tokenizer: PreTrainedTokenizerBase) -> bool:
    ids = tokenizer("x", add_special_tokens=True)["input_ids"]
    return bool(ids) and tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id
