"""The committed store, read and never written: reused runs and why others were recomputed.

``eval`` and ``report`` write to a user's store (``eval.locations``). A run
whose key has a successful row in the committed store (``results/<suite>``
of the checkout) was computed with exactly this data, checkpoint, settings,
code, packages and CPU, so ``eval`` copies that row instead of computing it
again: on the machine that made the committed table the main job is
instant. A run whose key differs is computed, and :func:`why_recomputed`
names the key fields that differ from the committed run of the same case
(the CPU, most often, on another machine).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.locations import committed_results
from eval.paper.spec import RunSpec, Task
from eval.paper.store import carrier_path, load_rows, read_row, run_path, write_row

__all__ = ["committed_store", "reuse_committed", "same_store", "why_recomputed"]

_CASE = ("suite", "dataset", "seed", "mode", "tau", "support", "eps_den")
_KEY_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec) if f.name != "versions")


def same_store(a: str | Path, b: str | Path) -> bool:
    """Whether two store paths name one folder (``.ci/regenerate-results`` writes results/)."""
    return Path(a).resolve() == Path(b).resolve()


def reuse_committed(tasks: Sequence[Task], store: str | Path, committed: str | Path) -> int:
    """Copies into ``store`` every successful committed run that a task needs and lacks.

    Args:
        tasks: The planned runs.
        store: The user's store (written).
        committed: The committed store (only read).

    Returns:
        How many runs were copied.
    """
    copied = 0
    for key in dict.fromkeys(t.spec.key for t in tasks):
        if run_path(store, key).exists():
            continue
        try:
            row = read_row(run_path(committed, key))
        except Exception:  # an unreadable committed file is simply not reused
            row = None
        if row is not None and row.get("status") == "ok":
            write_row(store, row)
            copied += 1
    if copied:
        checkpoint = tasks[0].spec.checkpoint_sha256
        source, target = carrier_path(committed, checkpoint), carrier_path(store, checkpoint)
        if source.exists() and not target.exists():  # measured by the same code on this CPU
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return copied


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    names = [*_KEY_FIELDS, *sorted(k for k in theirs if k.endswith("_version"))]
    versions = mine.get("versions", {}).items()
    mine_versions = {f"{n.replace('-', '_')}_version": v for n, v in versions}
    out = {}
    for name in names:
        value = mine_versions.get(name) if name.endswith("_version") else mine.get(name)
        if value != theirs.get(name):
            out[name] = (value, theirs.get(name))
    return out


def why_recomputed(specs: Sequence[RunSpec], committed: str | Path) -> str | None:
    """One line on why runs were not found in the committed store, or ``None``.

    Each spec is compared with the committed run of the same case (suite,
    dataset, seed, variant, settings); the fields that differ are named with
    this machine's value and the committed one (the CPU by name).

    Args:
        specs: The runs that had to be computed.
        committed: The committed store.

    Returns:
        E.g. ``"54 runs recomputed: their keys differ from the committed runs
        in cpu (here: 'AMD EPYC 7B13 | AVX2'; committed: 'Intel(R) Xeon(R)
        Processor | AVX512')"``; ``None`` when nothing was recomputed.
    """
    if not specs:
        return None
    try:
        rows = load_rows(committed)
    except Exception:  # an unreadable committed store explains nothing
        rows = []
    by_case = {tuple(r.get(k) for k in _CASE): r for r in rows}
    fields: dict[str, tuple[Any, Any]] = {}
    unmatched = 0
    for spec in specs:
        mine = spec.as_dict()
        theirs = by_case.get(tuple(mine.get(k) for k in _CASE))
        if theirs is None:
            unmatched += 1
            continue
        for name, pair in _differences(mine, theirs).items():
            fields.setdefault(name, pair)
    parts = []
    for name, (here, there) in fields.items():
        if name in ("cpu", "device") or name.endswith("_version"):
            parts.append(f"{name} (here: {here!r}; committed: {there!r})")
        else:
            parts.append(name)
    reason = f"their keys differ from the committed runs in {', '.join(parts)}" if parts else ""
    if unmatched:
        extra = f"{unmatched} have no committed run of their case"
        reason = f"{reason}; {extra}" if reason else extra
    if not reason:
        reason = "the committed runs of their cases were not successful"
    return f"{len(specs)} runs recomputed: {reason}"


def committed_store(option: str | None, suite: str, store: str | Path) -> Path | None:
    """The committed store that ``--committed`` names, or ``None`` for none.

    Args:
        option: ``--committed``: a folder, ``"none"``, or ``None`` for the
            checkout's ``results/SUITE`` (``eval.locations``).
        suite: Suite name.
        store: The store the command writes; the committed store is never it.
    """
    if option == "none":
        return None
    path = Path(option) if option else committed_results(suite)
    if path is None or same_store(path, store):
        return None
    return path
