"""Reading TabPFN checkpoint files without running code stored in them.

A ``.ckpt`` file is a pickle. ``torch.load`` unpickles it fully, so runs any
callable it names, when ``weights_only`` is False: the default before torch
2.6, and on any torch when ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set and the
caller leaves ``weights_only`` unset, as tabpfn's loader does
(``tabpfn.checkpoint.Checkpoint``). Every checkpoint the retrofit reads passes
through here first with ``weights_only=True`` given explicitly, which no
environment variable overrides: tensors, containers and plain values only.
``.safetensors`` files hold no code and are read as they are.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
from tabpfn.checkpoint import Checkpoint

from retrofit.errors import CorruptCheckpointError, UnsafeCheckpointError

__all__ = ["check_checkpoint", "load_checkpoint"]

PICKLED_SUFFIX = ".ckpt"


def _is_torch_file(path: Path) -> bool:
    """True for torch's zip format or a bare pickle (protocol 2 and later begin with 0x80)."""
    with open(path, "rb") as f:
        head = f.read(4)
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def _weights_only_load(path: Path, *, mmap: bool) -> Any:
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise UnsafeCheckpointError(
            f"refusing {path}: its pickle holds more than tensors and plain values, and "
            f"unpickling it could run code ({first})"
        ) from None


def check_checkpoint(path: str | os.PathLike[str]) -> None:
    """Refuses a ``.ckpt`` whose pickle holds more than tensors and plain values.

    The pickle is read with the weights-only unpickler and its tensors are
    memory-mapped, not read (a checkpoint in torch's legacy non-zip format,
    which cannot be mapped, is read in full). Other files pass unread.

    Raises:
        UnsafeCheckpointError: The pickle names a disallowed object.
        CorruptCheckpointError: The file is not a readable torch checkpoint.
    """
    path = Path(path)
    if path.suffix != PICKLED_SUFFIX:
        return
    if path.is_file() and not _is_torch_file(path):  # text or other bytes: nothing to unpickle
        raise CorruptCheckpointError(
            f"{path} is not a torch checkpoint (neither torch's zip format nor a pickle); "
            "give a TabPFN .ckpt or .safetensors file"
        )
    try:
        _weights_only_load(path, mmap=True)
    except UnsafeCheckpointError:
        raise
    except RuntimeError as err:
        if "mmap" not in str(err):
            raise CorruptCheckpointError(f"cannot read checkpoint {path}: {err}") from err
        _weights_only_load(path, mmap=False)
    except Exception as err:
        raise CorruptCheckpointError(f"cannot read checkpoint {path}: {err}") from err


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A checkpoint as tabpfn's ``Checkpoint.load`` returns it, never unpickling code.

    Args:
        path: A ``.safetensors`` or ``.ckpt`` file.

    Returns:
        The checkpoint dict (``state_dict`` and metadata).

    Raises:
        UnsafeCheckpointError: A ``.ckpt`` pickle names a disallowed object.
        CorruptCheckpointError: The file is unreadable or not a dict.
    """
    path = Path(path)
    if path.suffix != PICKLED_SUFFIX:
        return Checkpoint(path).load()
    try:
        data = _weights_only_load(path, mmap=False)
    except UnsafeCheckpointError:
        raise
    except Exception as err:
        raise CorruptCheckpointError(f"cannot read checkpoint {path}: {err}") from err
    if not isinstance(data, dict):
        raise CorruptCheckpointError(f"{path} holds a {type(data).__name__}, not a checkpoint dict")
    return data
