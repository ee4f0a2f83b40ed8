"""Which of a suite's planned runs a report's store lacks, kept apart from those that failed.

A suite plans every case (dataset x seed) under each variant: the unpatched
host once, and each retrofit (``DEFAULT_MODES``) at every tau the report
reads (:func:`planned_taus`: the table's tau, every tau stored in the
reported context or recorded by its eval sessions, and the whole
``SWEEP_TAUS`` once the store holds a run of the sweep) with the settings the
store's runs of it at that tau were made with (else those at the table's tau,
else the library's defaults). A planned run is *missing*
when the store never stored it (``eval`` was stopped, or run on a subset),
and *failed* when it is stored with its failure (``status`` not ``"ok"``);
the reports count the two apart, and ``report`` refuses an incomplete store
unless asked for a partial report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eval.errors import ReportError
from eval.paper.datasets import suite_cases
from eval.paper.protocol import DEFAULT_EPS_DEN, DEFAULT_MODES, DEFAULT_SUPPORT, SWEEP_TAUS
from eval.paper.record import CaseVariant, RunRecord
from eval.paper.store import iter_sessions

__all__ = [
    "Completeness",
    "PairCounts",
    "PairedRow",
    "completeness",
    "pair_counts",
    "planned_taus",
    "require_complete",
]

_SHOWN = 5
"""How many missing runs a one-line message names."""


@dataclass(frozen=True)
class Completeness:
    """The planned runs of one report's table, and which of them were never stored.

    Attributes:
        suite: Suite name.
        tau: The table's tau.
        planned: Every planned run, in suite order.
        taus: Every tau planned (the table's and the sweep's), ascending.
        missing: The planned runs with no stored row.
        failed: The planned runs stored with a failure (status not ``"ok"``).
    """

    suite: str
    tau: float
    planned: tuple[CaseVariant, ...]
    missing: tuple[CaseVariant, ...]
    failed: tuple[CaseVariant, ...]
    taus: tuple[float, ...] = ()

    @property
    def where(self) -> str:
        """``"at tau 1"``, or ``"at tau 1 and tau 0.001, 0.01"`` when more taus are planned."""
        others = [t for t in self.taus if t != self.tau]
        tail = f" and tau {', '.join(f'{t:g}' for t in others)}" if others else ""
        return f"at tau {self.tau:g}{tail}"

    @property
    def complete(self) -> bool:
        """Whether every planned run is stored (failed ones included)."""
        return not self.missing

    def missing_names(self) -> str:
        """The first missing runs by name, and how many more."""
        shown = self.missing[:_SHOWN]
        names = ", ".join(run.label for run in shown)
        more = len(self.missing) - len(shown)
        return names + (f" and {more} more" if more else "")

    def missing_text(self) -> str:
        """``"3 of 54 planned runs ... missing (never stored): a, b, c"``."""
        text = (
            f"{len(self.missing)} of {len(self.planned)} planned runs of {self.suite} "
            f"{self.where} missing (never stored)"
        )
        return f"{text}: {self.missing_names()}" if self.missing else text

    def line(self) -> str:
        """One line: how many planned runs are stored, failed and missing (the first named)."""
        names = self.missing_names()
        return (
            f"planned runs of {self.suite} {self.where}: {len(self.planned)}; stored "
            f"{len(self.planned) - len(self.missing)} ({len(self.failed)} of them failed, "
            f"stored with their error); missing (never stored): {len(self.missing)}"
            + (f": {names}" if names else "")
        )


def _variants_at(
    runs: Sequence[RunRecord], mode: str, tau: float
) -> list[tuple[str | None, float | None]]:
    """(support, eps_den) of the store's runs of ``mode`` at ``tau``, sorted."""
    stored = {(r.support, r.eps_den) for r in runs if r.mode == mode and r.tau == tau}
    return sorted(stored, key=str)


def _retrofit_variants(
    runs: Sequence[RunRecord], tau: float, main: float
) -> list[tuple[str, str | None, float | None]]:
    """(mode, support, eps_den) of every retrofit planned at ``tau`` (table's tau ``main``)."""
    variants = []
    for mode in (m for m in DEFAULT_MODES if m != "none"):
        stored = _variants_at(runs, mode, tau) or _variants_at(runs, mode, main)
        for support, eps_den in stored or [(DEFAULT_SUPPORT, DEFAULT_EPS_DEN)]:
            variants.append((mode, support, eps_den))
    return variants


def planned_taus(
    runs: Sequence[RunRecord], tau: float, store: str | Path | None = None
) -> tuple[float, ...]:
    """Every tau a report of ``runs`` reads, ascending.

    The table's ``tau``; every tau stored in ``runs``; those the eval sessions
    of the runs' suite and checkpoint in ``store`` planned (``taus`` of their
    records); and, once any run of the sweep beside the table's tau is stored
    (or a session ran ``--sweep``), every tau of ``SWEEP_TAUS``: the sweep's
    table and figure read them all, and a tau an eval never reached would
    otherwise drop out of them unseen.
    """
    stored = {float(r.tau) for r in runs if r.mode != "none" and r.tau is not None}
    taus = {float(tau), *stored}
    sweep = bool((stored - {float(tau)}) & set(SWEEP_TAUS))
    if store is not None and runs:
        suite, checkpoint = runs[0].suite, runs[0].checkpoint_sha256
        for session in iter_sessions(store):
            if session.suite == suite and session.checkpoint_sha256 == checkpoint:
                taus.update(float(t) for t in session.taus)
                sweep = sweep or session.sweep
    if sweep:
        taus.update(SWEEP_TAUS)
    return tuple(sorted(taus))


def completeness(
    suite: str,
    runs: Sequence[RunRecord],
    tau: float,
    taus: Sequence[float] | None = None,
) -> Completeness:
    """The planned runs of ``suite``'s report (table at ``tau``) and which ``runs`` lack.

    Args:
        suite: Suite name.
        runs: The stored runs of the reported context.
        tau: The table's tau.
        taus: Every tau the report reads (:func:`planned_taus`; default: ``tau`` alone).
    """
    every_tau = tuple(sorted({float(tau), *(taus or ())}))
    variants = [v for t in every_tau for v in ((t, *x) for x in _retrofit_variants(runs, t, tau))]
    planned: list[CaseVariant] = []
    for case in suite_cases(suite):
        if "none" in DEFAULT_MODES:
            planned.append(CaseVariant(case.dataset, case.seed, "none", None, None, None))
        planned += [
            CaseVariant(case.dataset, case.seed, mode, at, support, eps_den)
            for at, mode, support, eps_den in variants
        ]
    status = {r.variant: r.status for r in runs}
    return Completeness(
        suite=suite,
        tau=tau,
        planned=tuple(planned),
        missing=tuple(run for run in planned if run not in status),
        failed=tuple(run for run in planned if status.get(run, "ok") != "ok"),
        taus=every_tau,
    )


def require_complete(state: Completeness, store: str | Path, *, partial: bool) -> None:
    """Refuses a report of an incomplete store unless a partial report was asked for.

    Raises:
        ReportError: If planned runs are missing and ``partial`` is false.
    """
    if state.complete or partial:
        return
    raise ReportError(
        f"{store}: {state.missing_text()}; run the same `eval` again to compute them "
        "(stored runs are skipped), or pass --partial to report the stored runs alone"
    )


class PairedRow(Protocol):
    """A case-table row: a retrofit's run, its baseline's, and whether they give a change."""

    @property
    def run(self) -> RunRecord: ...  # noqa: D102

    @property
    def baseline(self) -> RunRecord | None: ...  # noqa: D102

    @property
    def paired(self) -> bool: ...  # noqa: D102


@dataclass(frozen=True)
class PairCounts:
    """How one variant's planned cases ended; the three sum to the planned cases.

    Attributes:
        n: Cases with the paired change.
        failed: The retrofit or its baseline stored with a failure, or no usable pair.
        missing: The retrofit or its baseline never stored.
    """

    n: int
    failed: int
    missing: int


def pair_counts(rows: Iterable[PairedRow], cases: Iterable[tuple[str, int]]) -> PairCounts:
    """How one variant's planned cases ended: paired, failed, or missing.

    Args:
        rows: The variant's case-table rows.
        cases: The planned (dataset, seed) cases.
    """
    n = failed = missing = 0
    seen = set()
    for row in rows:
        seen.add((row.run.dataset, int(row.run.seed)))
        if row.paired:
            n += 1
        elif row.run.ok and row.baseline is None:
            missing += 1  # its baseline was never stored
        else:
            failed += 1
    missing += sum((dataset, int(seed)) not in seen for dataset, seed in set(cases))
    return PairCounts(n=n, failed=failed, missing=missing)
