"""Reading model weights without running code: safetensors, or pickles read as plain tensors only.

Weights are read from safetensors when a folder has them. A folder with pickled weights only
(``pytorch_model.bin`` or its shards, as ``nferruz/ProtGPT2`` has at ``main``) is read with
``torch.load(weights_only=True)``, torch's restricted unpickler, which builds tensors and plain
containers and refuses any other object (the rule transformers' ``from_pretrained`` applies by
default). A file that needs more is refused, naming it: nothing in it runs.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path

#: pickled weight files, one or sharded, that transformers reads from a folder without safetensors
PICKLED_WEIGHTS = "pytorch_model*.bin"


class UnsafeCheckpointError(ValueError):
    """A pickled checkpoint that ``torch.load(weights_only=True)`` refuses: it holds objects besides tensors."""


def pickled_weight_files(folder: str | Path) -> list[Path]:
    """The pickled weight files ``from_pretrained`` would read in ``folder``: none when it has safetensors."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):  # transformers prefers them, and never opens the .bin then
        return []
    return sorted(folder.glob(PICKLED_WEIGHTS))


def check_pickled_weights(folder: str | Path) -> list[Path]:
    """Each of :func:`pickled_weight_files` read with ``torch.load(weights_only=True)``; the files checked.

    :class:`UnsafeCheckpointError` names the first file that the restricted unpickler
    refuses (an object that is not a tensor or plain container: code could run on
    loading it), before ``from_pretrained`` opens anything. Zip checkpoints are memory-mapped,
    so the check reads the pickle, not the tensor data. torch < 2.6 is refused: its
    ``weights_only`` could be bypassed (CVE-2025-32434).
    """
    import torch
    from packaging.version import Version

    files = pickled_weight_files(folder)
    if files and Version(torch.__version__.split("+")[0]) < Version("2.6"):
        raise UnsafeCheckpointError(
            f"{files[0]}: pickled weights are read only with torch >= 2.6 (weights_only=True could be bypassed "
            f"before it, CVE-2025-32434); this is torch {torch.__version__}"
        )
    for file in files:
        try:
            torch.load(file, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(file))
        except pickle.UnpicklingError as err:
            found = re.search(r"WeightsUnpickler error: ([^\n]*?)(?:\.\s|\n|$)", str(err))
            reason = found.group(1) if found else "it holds objects other than tensors"
            raise UnsafeCheckpointError(
                f"refusing to load {file}: it is not plain tensors ({reason}), and aligntrain never unpickles "
                "arbitrary objects, which can run code. Use a revision with safetensors weights, or convert this "
                "file where its source is trusted"
            ) from None
    return files


def from_pretrained_safely(auto_class, path: str | Path, **kwargs):
    """``auto_class.from_pretrained(path, **kwargs)`` after :func:`check_pickled_weights`, pickles read weights-only."""
    check_pickled_weights(path)
    return auto_class.from_pretrained(path, weights_only=True, **kwargs)
