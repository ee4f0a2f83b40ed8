"""The committed store: read, never written; ``eval --reuse-committed`` copies, ``report`` compares.

``eval`` and ``report`` write to a user's store (``eval.locations``). The
committed store is named the same way on both commands: ``--committed DIR``,
by default the checkout's ``results/<suite>``, ``--committed none`` for none.
``eval`` computes every run it plans unless asked to reuse
(``--reuse-committed``): then a run whose key has a successful run in the
committed store (the same data, checkpoint, settings, code, packages and
CPU) is copied from it instead, and :func:`why_recomputed` names the key
fields in which the others differ from the committed run of their case (the
CPU, most often, on another machine). ``report`` sets its table beside the
committed one (:mod:`eval.paper.comparison`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.locations import committed_results
from eval.paper.record import CaseVariant, RunRecord, spec_columns
from eval.paper.spec import RunSpec, Task
from eval.paper.store import carrier_path, copy_record, load_records, run_path, runs_dir
from retrofit.errors import CommandError

__all__ = ["CommittedStore", "committed_store", "reuse_committed", "same_store", "why_recomputed"]


def same_store(a: str | Path, b: str | Path) -> bool:
    """Whether two store paths name one folder (``.ci/regenerate-results`` writes results/)."""
    return Path(a).resolve() == Path(b).resolve()


@dataclass(frozen=True)
class CommittedStore:
    """The committed store a command reads, or why there is none.

    Attributes:
        path: The store (``None``: there is none to read).
        absent_because: Why there is none (empty when there is one).
    """

    path: Path | None
    absent_because: str = ""


def committed_store(option: str | None, suite: str, store: str | Path) -> CommittedStore:
    """The committed store that ``--committed`` names.

    Args:
        option: ``--committed``: a folder, ``"none"``, or ``None`` for the
            checkout's ``results/SUITE`` (``eval.locations``).
        suite: Suite name.
        store: The store the command writes; the committed store is never it.

    Raises:
        CommandError: If ``option`` names a folder that does not exist, or one
            that holds no stored runs (no ``runs/``): a typo must not pass for
            "nothing to compare with".
    """
    if option == "none":
        return CommittedStore(None, "--committed none")
    if option:
        path = Path(option)
        if not path.is_dir():
            what = "is a file" if path.exists() else "does not exist"
            raise CommandError(
                f"--committed {option} {what}; give the folder of a committed store "
                f"(e.g. results/{suite} of a checkout) or none"
            )
        if not runs_dir(path).is_dir():
            raise CommandError(
                f"--committed {option} holds no stored runs (no runs/ folder); give the folder "
                f"of a committed store (e.g. results/{suite} of a checkout) or none"
            )
    else:
        path = committed_results(suite)
        if path is None:
            why = f"no committed results/{suite} here (not a checkout); --committed DIR names one"
            return CommittedStore(None, why)
    if same_store(path, store):
        return CommittedStore(None, "this store is the committed store")
    return CommittedStore(_as_named(path))


def _as_named(path: Path) -> Path:
    """``path`` relative to the working directory when it lies under it (as messages name it)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def reuse_committed(tasks: Sequence[Task], store: str | Path, committed: str | Path) -> list[str]:
    """Copies into ``store`` every successful committed run that a task needs and lacks.

    Args:
        tasks: The planned runs.
        store: The user's store (written).
        committed: The committed store (only read).

    Returns:
        The keys of the runs copied, in plan order.
    """
    copied = [
        key
        for key in dict.fromkeys(t.spec.key for t in tasks)
        if not run_path(store, key).exists() and copy_record(committed, store, key)
    ]
    if copied:
        checkpoint = tasks[0].spec.checkpoint_sha256
        source, target = carrier_path(committed, checkpoint), carrier_path(store, checkpoint)
        if source.exists() and not target.exists():  # measured by the same code on this CPU
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return copied


def _differences(mine: dict[str, Any], theirs: RunRecord) -> dict[str, tuple[Any, Any]]:
    committed = theirs.key_fields()
    names = [*mine, *(n for n in committed if n not in mine)]
    return {n: (mine.get(n), committed.get(n)) for n in names if mine.get(n) != committed.get(n)}


def why_recomputed(specs: Sequence[RunSpec], committed: str | Path) -> str | None:
    """One line on why runs were not found in the committed store, or ``None``.

    Each spec is compared with the committed run of the same case (suite,
    dataset, seed, variant, settings); the fields that differ are named with
    this machine's value and the committed one (the CPU by name).

    Args:
        specs: The runs that had to be computed.
        committed: The committed store.

    Returns:
        E.g. ``"54 runs computed: their keys differ from the committed runs
        in cpu (here: 'AMD EPYC 7B13 | AVX2'; committed: 'Intel(R) Xeon(R)
        Processor | AVX512')"``; ``None`` when nothing was computed.
    """
    if not specs:
        return None
    try:
        runs = load_records(committed)
    except Exception:  # an unreadable committed store explains nothing
        runs = []
    by_case: dict[tuple[str, CaseVariant], RunRecord] = {(r.suite, r.variant): r for r in runs}
    fields: dict[str, tuple[Any, Any]] = {}
    unmatched = 0
    for spec in specs:
        variant = CaseVariant(spec.dataset, spec.seed, spec.mode, spec.tau, spec.support,
                              spec.eps_den)  # fmt: skip
        theirs = by_case.get((spec.suite, variant))
        if theirs is None:
            unmatched += 1
            continue
        for name, pair in _differences(spec_columns(spec.as_dict()), theirs).items():
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
    return f"{len(specs)} runs computed: {reason}"
