"""A training run's files on disk: its append-only log and its resume state.

Both trainers (:mod:`hosttraining.common.loop`, :mod:`hosttraining.regression.chain`)
and the cards read them here, so a damaged file gives the same one line everywhere, naming the
file and the way out, instead of a bare ``JSONDecodeError`` or torch's
many-kilobyte ``load_state_dict`` report:

* a log's last line without its line end that does not parse (or ends inside
  a UTF-8 character) was cut by a crash mid-write; the log is append-only and
  the resumed run writes those steps again, so the line is dropped with a
  :class:`RunFileWarning` and the run goes on; any other unreadable line (not
  JSON, or not UTF-8) is refused;
* a state file that torch cannot read (truncated, empty, not a torch file),
  one that lacks what the trainer stores, and one whose model differs from
  this run's in tensor names or shapes are refused (:class:`RunFileError`).

``restart`` names the caller's fresh start (``rerun with --no-resume``), the
other way out of each error.
"""

from __future__ import annotations

import json
import pickle
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from hosttraining.common.errors import RunFileError, RunFileWarning
from retrofit.command_line import one_line
from retrofit.files import write_text_atomic

__all__ = ["cut_log_after", "load_optimizer", "load_state", "load_weights", "read_log"]


def _way_out(first: str, restart: str | None) -> str:
    return f"{first} or {restart}" if restart else first


def _parse_log(path: Path, restart: str | None) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """Each complete line with its record, and whether a cut last line was dropped."""
    # A crash can cut the last record inside a multi-byte character: bytes that are not
    # UTF-8 are kept as surrogates here and judged per line, like any unreadable line.
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.splitlines()
    kept: list[tuple[str, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line) if _is_utf8(line) else None
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            kept.append((line, record))
            continue
        if number == len(lines) and not text.endswith("\n"):
            warnings.warn(
                f"{path} line {number} is cut (a crash mid-write): dropped it, the resumed "
                "run logs those steps again",
                RunFileWarning,
                stacklevel=3,
            )
            return kept, True
        what = "a JSON record" if _is_utf8(line) else "UTF-8 text"
        raise RunFileError(
            f"{path} line {number} is not {what}: " + _way_out("remove that line", restart)
        )
    return kept, False


def _is_utf8(line: str) -> bool:
    """Whether a line read with ``surrogateescape`` held only UTF-8 bytes."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_log(path: str | Path, *, restart: str | None = None) -> list[dict[str, Any]]:
    """The records of a JSON-lines training log, without a cut last line.

    Args:
        path: The log (``<checkpoint>.log.jsonl`` or a chain's ``log.jsonl``).
        restart: The caller's fresh start, offered as the other way out.

    Returns:
        One dict per complete line.

    Raises:
        RunFileError: A line other than a cut last one is not a JSON object.
    """
    return [record for _, record in _parse_log(Path(path), restart)[0]]


def cut_log_after(log_path: Path, step: int, *, restart: str | None = None) -> None:
    """Cuts a training log back to a resumed state's ``step``.

    The steps after the last saved state were lost with the process and are
    trained again from the same batches, so each step is logged once. A cut
    last line goes too, and the log is left ending in a line end, so the
    resumed run's records start on lines of their own.

    Raises:
        RunFileError: A line is not a JSON object or has no ``step``.
    """
    if not log_path.exists():
        return
    lines, dropped = _parse_log(log_path, restart)
    for line, record in lines:
        if not isinstance(record.get("step"), int):
            raise RunFileError(
                f"{log_path} has a record without an integer 'step' ({line[:60]}): "
                + _way_out("remove that line", restart)
            )
    kept = [line for line, record in lines if record["step"] <= step]
    ends = log_path.read_bytes().endswith(b"\n") or log_path.stat().st_size == 0
    if dropped or len(kept) != len(lines) or not ends:
        write_text_atomic(log_path, "".join(line + "\n" for line in kept))


def load_optimizer(
    optim: torch.optim.Optimizer,
    state: Mapping[str, Any],
    *,
    path: str | Path,
    restart: str | None = None,
) -> None:
    """``optim.load_state_dict(state)``, refused in one line when it does not fit.

    Raises:
        RunFileError: The stored parameter groups differ from this run's.
    """
    try:
        optim.load_state_dict(state)
    except (ValueError, KeyError, TypeError) as err:
        raise RunFileError(
            f"{path}: its optimiser state does not fit this run's model "
            f"({one_line(err)[:100]}): resume with the options it was started with, "
            + _way_out("remove it", restart)
        ) from None


def load_state(
    path: str | Path,
    *,
    keys: Iterable[str],
    restart: str | None = None,
    map_location: str | torch.device | None = None,
) -> dict[str, Any]:
    """A resume state (``torch.save`` of a dict), read weights-only, holding ``keys``.

    Args:
        path: The state file.
        keys: The entries the caller reads.
        restart: The caller's fresh start, offered as the other way out.
        map_location: Passed to ``torch.load``.

    Raises:
        RunFileError: Torch cannot read it (truncated, empty, not a torch
            file, objects other than tensors and plain values), it is not a
            dict, or it lacks some of ``keys``.
    """
    path = Path(path)
    remedy = _way_out("remove it", restart)
    try:
        state = torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as err:
        raise RunFileError(
            f"{path} holds objects other than tensors and plain values, refused "
            f"(loading it could run code; {one_line(err)[:80]}): {remedy}"
        ) from None
    except (EOFError, RuntimeError, KeyError, ValueError) as err:
        reason = one_line(err).split(". ")[0][:100] or type(err).__name__
        if path.stat().st_size == 0:
            reason = "empty"
        raise RunFileError(
            f"{path} cannot be read as a training state, truncated by a crash mid-write or "
            f"not one ({reason}): {remedy}"
        ) from None
    if not isinstance(state, dict):
        raise RunFileError(f"{path} holds a {type(state).__name__}, not a training state: {remedy}")
    missing = [key for key in keys if key not in state]
    if missing:
        raise RunFileError(
            f"{path} lacks {', '.join(missing)} (not a state this trainer writes, or an older "
            f"one): {remedy}"
        )
    return state


def _shape(tensor: Any) -> str:
    return str(list(getattr(tensor, "shape", [])))


def load_weights(
    module: torch.nn.Module,
    weights: Mapping[str, Any],
    *,
    path: str | Path,
    restart: str | None = None,
) -> None:
    """``module.load_state_dict(weights)``, refused in one line when they do not fit.

    Args:
        module: This run's freshly built model.
        weights: The state file's model weights.
        path: The state file, named in the message.
        restart: The caller's fresh start, offered as the other way out.

    Raises:
        RunFileError: The tensor names or shapes differ (another model
            configuration).
    """
    own = module.state_dict()
    missing = [name for name in own if name not in weights]
    extra = [name for name in weights if name not in own]
    resized = [
        name
        for name in own
        if name in weights and tuple(own[name].shape) != tuple(weights[name].shape)
    ]
    if not (missing or extra or resized):
        module.load_state_dict(weights)
        return
    if resized:
        name = resized[0]
        first = f"{name} is {_shape(weights[name])} there, {_shape(own[name])} here"
    else:
        name = (missing or extra)[0]
        first = f"{name} is {'missing there' if missing else 'not in this model'}"
    counts = f"{len(resized)} resized, {len(missing)} missing, {len(extra)} unexpected"
    raise RunFileError(
        f"{path} holds a model of another configuration ({first}; {counts}): resume with "
        f"the options it was started with, " + _way_out("remove it", restart)
    )
