"""Which stored runs a report counts: the table's tau, one run context, each case once.

Both reports (regression and classification) select by these rules before
they aggregate: :func:`main_tau` says which tau the main table is at,
:func:`select_context` keeps the runs of one comparable context and names
what it leaves out, and :func:`one_run_per_case` refuses a case stored twice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.errors import ReportError
from eval.paper.datasets import suite_cases
from eval.paper.protocol import SWEEP_TAUS
from eval.paper.record import CaseVariant, RunContext, RunRecord
from eval.paper.store import iter_sessions, load_records

__all__ = ["main_tau", "one_run_per_case", "planned_cases", "select_context", "short"]


def short(value: Any) -> str:
    """A value as a message names it: a SHA-256 by its 12-character prefix."""
    text = str(value)
    return text[:12] if len(text) == 64 else text


def planned_cases(suite: str) -> list[tuple[str, int]]:
    """The (dataset, seed) cases a suite plans (``eval.paper.datasets.suite_cases``)."""
    return [(c.dataset, c.seed) for c in suite_cases(suite)]


def _of_checkpoint(checkpoint_sha256: str, checkpoint: str | None) -> bool:
    return str(checkpoint_sha256 or "").startswith(checkpoint or "")


def main_tau(
    store: str | Path, suite: str, checkpoint: str | None = None, tau: float | None = None
) -> float:
    """The tau of the main table: the one given, else the host's default.

    ``eval`` records the host's default tau of its checkpoint in each session
    record (``host_default_tau``, resolved as the library resolves an unset
    ``tau``), so the report's default is the library's default on every host.

    A store no eval session finished in (its eval was killed, or still runs)
    has the tau its runs hold (:func:`_stored_tau`); whether its planned runs
    are all there is the report's check (``--partial``), not this one's.

    Raises:
        ReportError: If no tau is given and the store's sessions of ``suite``
            (and ``checkpoint``) record more than one, or none while its runs
            hold no single tau (or there are no runs).
    """
    if tau is not None:
        return float(tau)
    sessions = [
        s
        for s in iter_sessions(store)
        if s.suite == suite and _of_checkpoint(s.checkpoint_sha256, checkpoint)
    ]
    if not sessions:
        return _stored_tau(store, suite, checkpoint)
    recorded = {float(s.host_default_tau) for s in sessions if s.host_default_tau is not None}
    if len(recorded) != 1:
        found = ", ".join(f"{t:g}" for t in sorted(recorded)) or "none"
        raise ReportError(
            f"{store}: the eval sessions of {suite} record {found} as the host's default "
            "tau; pass --tau (and --checkpoint when the store holds several checkpoints)"
        )
    return recorded.pop()


def _stored_tau(store: str | Path, suite: str, checkpoint: str | None) -> float:
    """The table's tau of a store no eval session finished in (a killed or running eval).

    Its runs say it when they hold one retrofit tau, or one beside the sweep's
    (``--sweep`` adds ``SWEEP_TAUS`` to the main tau); anything else needs ``--tau``.

    Raises:
        ReportError: If the store holds no run of ``suite``, or no single tau.
    """
    runs = [
        r
        for r in load_records(store)
        if r.suite == suite and _of_checkpoint(r.checkpoint_sha256, checkpoint)
    ]
    if not runs:
        raise ReportError(
            f"no stored runs of {suite} in {store}; run `eval --suite {suite}` first "
            "(or pass --store with the store it wrote)"
        )
    taus = {float(r.tau) for r in runs if r.mode != "none" and r.tau is not None}
    beside_sweep = taus - set(SWEEP_TAUS)
    if len(taus) == 1 or len(beside_sweep) == 1:
        return (taus if len(taus) == 1 else beside_sweep).pop()
    found = ", ".join(f"{t:g}" for t in sorted(taus)) or "none (unpatched runs only)"
    raise ReportError(
        f"{store}: no eval of {suite} finished there (no session record: it was stopped or is "
        f"running) and its runs hold retrofit tau {found}; pass --tau, or run the same `eval` "
        "again to finish it"
    )


def _counts_at(runs: Sequence[RunRecord], tau: float) -> int:
    """Successful runs that the table at ``tau`` uses (baselines and retrofits at tau)."""
    return sum(r.ok and (r.mode == "none" or r.tau == tau) for r in runs)


def _context_difference(chosen: RunContext, other: RunContext) -> str:
    differ = chosen.differences(other)
    return "; ".join(
        f"{name} {short(theirs)} (reported: {short(mine)})"
        for name, (mine, theirs) in sorted(differ.items())
    )


def select_context(
    runs: Sequence[RunRecord],
    suite: str,
    checkpoint: str | None = None,
    *,
    tau: float,
) -> tuple[list[RunRecord], list[str]]:
    """Runs of one comparable run context (checkpoint, ensemble, dtype, CPU, versions...).

    The rule, by settings and never by recency alone: of the stored contexts
    that match ``suite`` (and ``checkpoint``), the one with the most
    successful runs in the table at ``tau`` (baselines and retrofits at
    ``tau``); a tie goes to the context with more runs, then to the most
    recently finished. So a handful of failed runs of another device or
    version never replaces a complete table; each context left out is named
    in a note with its counts and how it differs.

    Args:
        runs: Every stored run.
        suite: Suite name.
        checkpoint: A prefix of the checkpoint SHA-256 to report.
        tau: The tau of the main table (:func:`main_tau`).

    Returns:
        The runs of the chosen context and notes on what was left out.

    Raises:
        ReportError: If nothing matches.
    """
    runs = [r for r in runs if r.suite == suite and _of_checkpoint(r.checkpoint_sha256, checkpoint)]
    if not runs:
        what = f" with checkpoint {checkpoint}" if checkpoint else ""
        raise ReportError(f"no stored runs of suite {suite!r}{what}; run `eval` first")
    groups: dict[RunContext, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(run.context, []).append(run)

    def rank(item: tuple[RunContext, list[RunRecord]]) -> tuple[Any, ...]:
        group = item[1]
        newest = max(r.finished_at or "" for r in group)
        return (_counts_at(group, tau), len(group), newest)

    ordered = sorted(groups.items(), key=rank, reverse=True)
    chosen, kept = ordered[0]
    notes = []
    for context, group in ordered[1:]:
        ok = sum(r.ok for r in group)
        notes.append(
            f"left out {len(group)} stored runs of another context ({ok} ok, "
            f"{len(group) - ok} failed or non-finite; {_counts_at(group, tau)} usable at "
            f"tau {tau:g} against {_counts_at(kept, tau)} here): "
            + _context_difference(chosen, context)
        )
    return kept, notes


def one_run_per_case(runs: Sequence[RunRecord]) -> None:
    """Refuses runs that hold a case more than once (a mean must count each case once).

    Within one context two runs of a case can differ only in a key field the
    report does not compare (the data's hash, say); which of them is right is
    not the report's to guess, and summing both would weigh that case twice.

    Raises:
        ReportError: Naming the cases and the fields their runs differ in.
    """
    by_case: dict[CaseVariant, list[RunRecord]] = {}
    for run in runs:
        by_case.setdefault(run.variant, []).append(run)
    doubled = {case: group for case, group in by_case.items() if len(group) > 1}
    if not doubled:
        return
    fields: set[str] = set()
    for group in doubled.values():
        keyed = [r.key_fields() for r in group]
        for name in set().union(*keyed):
            if len({json.dumps(k.get(name), sort_keys=True) for k in keyed}) > 1:
                fields.add(name)
    examples = ", ".join(
        "/".join(
            f"{v:g}" if isinstance(v, float) else str(v)
            for v in (c.dataset, c.seed, c.mode, c.tau, c.support, c.eps_den)
            if v is not None
        )
        for c in list(doubled)[:3]
    )
    raise ReportError(
        f"the store holds {sum(map(len, doubled.values()))} runs of {len(doubled)} cases "
        f"that differ only in {', '.join(sorted(fields)) or 'their key'} (e.g. {examples}); "
        "a case is counted once, so remove the stale run files (runs/KEY.json, KEY in "
        "cases.csv) or report a fresh store"
    )
