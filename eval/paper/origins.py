"""Where the runs of a report came from, as the store's eval session records say.

Each ``eval`` records the keys of the runs it computed and of those it copied
from a committed store (``--reuse-committed``) in its session record
(:class:`~eval.paper.record.SessionRecord`). ``report`` says what happened to
the runs it reports from those records alone, never from equal settings: a
run computed here on the machine that made the committed table has the
committed run's key too, and it was computed all the same. The latest session
that names a run decides (a run copied, then deleted and computed again, was
computed). Sessions written before the records named their runs (the
committed stores') record counts only, and the sentence says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.paper.record import RunRecord
from eval.paper.store import iter_sessions

__all__ = ["RunOrigins", "run_origins"]


@dataclass(frozen=True)
class RunOrigins:
    """What the session records of a store say about the runs of a table.

    Attributes:
        runs: Runs in the table.
        computed: Of them, computed by an ``eval`` in this store.
        reused: ``(committed store, count)``: copied by ``eval --reuse-committed``.
        unnamed: Named by no session record (an older record, or a stopped eval).
        counted_sessions: The store's sessions of the table's suite and
            checkpoint that record counts, not keys.
        counted_computed: What those sessions count as computed.
        counted_reused: What those sessions count as copied from a committed store.
    """

    runs: int
    computed: int
    reused: tuple[tuple[str, int], ...]
    unnamed: int
    counted_sessions: int = 0
    counted_computed: int = 0
    counted_reused: int = 0

    def sentence(self) -> str:
        """One sentence on what happened to the table's runs."""
        parts = []
        if self.computed:
            parts.append(f"{self.computed} computed by `eval` into this store")
        for source, count in self.reused:
            parts.append(
                f"{count} copied by `eval --reuse-committed` from the committed store {source} "
                "(the same keys)"
            )
        if self.unnamed:
            if self.counted_sessions:
                plural = "s" if self.counted_sessions > 1 else ""
                why = (
                    f"its {self.counted_sessions} older session record{plural} count "
                    f"{self.counted_computed} computed and {self.counted_reused} copied, "
                    "without naming the runs"
                )
            else:
                why = "an eval that was stopped writes none"
            parts.append(f"{self.unnamed} named by no session record of this store ({why})")
        return f"The {self.runs} runs of this report, by this store's eval session records: " + (
            "; ".join(parts) + "."
        )


def run_origins(store: str | Path, runs: Sequence[RunRecord]) -> RunOrigins:
    """What the session records of ``store`` say about ``runs`` (one suite and checkpoint).

    Args:
        store: The store whose ``sessions/`` are read.
        runs: The runs of the table (of one context).
    """
    if not runs:
        return RunOrigins(runs=0, computed=0, reused=(), unnamed=0)
    suite, checkpoint = runs[0].suite, runs[0].checkpoint_sha256
    origin: dict[str, str | None] = {}  # key -> None (computed here) or the store it came from
    counted = counted_computed = counted_reused = 0
    for session in iter_sessions(store):  # oldest first: the latest one to name a run decides
        if session.suite != suite or session.checkpoint_sha256 != checkpoint:
            continue
        if not session.names_its_runs:
            counted += 1
            counted_computed += session.computed or 0
            counted_reused += session.reused_committed or 0
            continue
        origin.update(dict.fromkeys(session.computed_keys or ()))
        origin.update(dict.fromkeys(session.reused_keys or (), session.reused_from or "?"))
    keys = [r.key for r in runs]
    computed = sum(k in origin and origin[k] is None for k in keys)
    sources: dict[str, int] = {}
    for key in keys:
        if origin.get(key) is not None:
            sources[origin[key]] = sources.get(origin[key], 0) + 1
    return RunOrigins(
        runs=len(keys),
        computed=computed,
        reused=tuple(sources.items()),
        unnamed=sum(k not in origin for k in keys),
        counted_sessions=counted,
        counted_computed=counted_computed,
        counted_reused=counted_reused,
    )
