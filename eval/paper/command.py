"""The ``tabpfn-retrofit eval`` command: plan the runs, execute them, record the session."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.locations import default_output
from eval.paper.carriers import measure_carriers
from eval.paper.execution import run_suite
from eval.paper.executors import make_executor
from eval.paper.protocol import SUITE_TASK, SWEEP_TAUS
from eval.paper.record import RunRecord, SessionRecord
from eval.paper.reference import committed_store, reuse_committed, why_recomputed
from eval.paper.spec import host_default_tau, make_tasks
from eval.paper.store import carrier_path, utc_now, write_carriers, write_session
from eval.provenance import provenance_dict
from retrofit.command_line import PROG, check_output_dir
from retrofit.errors import CommandError
from retrofit.files import missing_dirs, remove_empty_dirs
from retrofit.models.loading import resolve_model

__all__ = ["eval_command", "suite_checkpoint"]


def suite_checkpoint(model: str, suite: str | None = None) -> Path:
    """The checkpoint file behind ``--model`` for ``suite`` (the resolver of ``retrofit``).

    A name that stands for a kind (``"embedded"``, a version alias) resolves to
    the classifier for a classification suite, else to the regressor.
    """
    which = "classifier" if SUITE_TASK.get(suite or "") == "classification" else "regressor"
    return resolve_model(model, which).checkpoint


def eval_command(args: Any, argv: Sequence[str] | None = None) -> int:
    """Run ``tabpfn-retrofit eval``; returns the exit status.

    A user error (unknown dataset, missing weights or data, missing executor
    package, a checkpoint that changed mid-run) raises; the command line turns
    it into one line on stderr and exit status 2 (``retrofit.command_line``).
    The options and the store are checked before any case is computed. The
    store defaults to ``tabpfn-retrofit-results/SUITE`` (``eval.locations``).
    Every planned run that the store lacks is computed; with
    ``--reuse-committed`` the runs that the committed store (``--committed``,
    default the checkout's ``results/SUITE``) holds under the same key are
    copied from it instead (it is never written), and the command says why
    the others were computed. The session record names the runs computed and
    copied, which ``report`` reads to say what happened. Finished runs stay
    stored; a store the command created and then left empty (it failed
    before a run finished) is removed again. The status is 1 when every run
    the command computed failed or gave non-finite predictions (they are
    stored all the same), else 0.
    """
    store = Path(args.store) if args.store else default_output(args.suite)
    _check_options(args)
    check_output_dir(store, option="--store")
    reuse_from = _reuse_source(args, store)
    created = missing_dirs(store)
    try:
        return _eval(args, argv, store, reuse_from)
    except BaseException:
        remove_empty_dirs(created)
        raise


def _check_options(args: Any) -> None:
    """The counts that must be positive, before anything is resolved or written."""
    for option in ("n_estimators", "jobs", "threads", "max_train_rows", "max_test_rows"):
        value = getattr(args, option, None)
        if value is not None and value < 1:
            flag = "--" + option.replace("_", "-")
            raise CommandError(f"{flag} must be >= 1, got {value}")


def _reuse_source(args: Any, store: Path) -> Path | None:
    """The committed store ``--reuse-committed`` copies from (``None``: reuse not asked).

    Raises:
        CommandError: ``--committed DIR`` without ``--reuse-committed`` (eval reads it
            for nothing else), or ``--reuse-committed`` with no committed store.
    """
    option = getattr(args, "committed", None)
    if not getattr(args, "reuse_committed", False):
        # "none" says what eval does anyway (copy nothing): scripts may keep saying it.
        if option not in (None, "none"):
            raise CommandError(
                "eval reads --committed only to copy runs from it: add --reuse-committed "
                "(report compares with the committed table by itself)"
            )
        return None
    committed = committed_store(option, args.suite, store)
    if committed.path is None:
        raise CommandError(f"--reuse-committed: nothing to copy from ({committed.absent_because})")
    return committed.path


def _eval(args: Any, argv: Sequence[str] | None, store: Path, reuse_from: Path | None) -> int:
    started = utc_now()
    t0 = time.perf_counter()
    model_path = suite_checkpoint(args.model, args.suite)
    executor_name = args.executor or ("joblib" if args.jobs > 1 else "serial")
    executor = make_executor(
        executor_name,
        n_jobs=args.jobs,
        address=args.address,
        connect_timeout_s=args.connect_timeout,
    )
    threads = args.threads if args.threads is not None else executor.default_threads()
    default_tau = host_default_tau(model_path)
    main_taus = args.tau if args.tau is not None else [default_tau]
    taus = list(dict.fromkeys([*main_taus, *(SWEEP_TAUS if args.sweep else ())]))
    tasks = make_tasks(
        suite=args.suite,
        model_path=model_path,
        modes=args.modes,
        taus=taus,
        support=args.support,
        eps_den=args.eps_den,
        n_estimators=args.n_estimators,
        device=args.device,
        datasets=args.datasets,
        seeds=args.seeds,
        max_train_rows=args.max_train_rows,
        max_test_rows=args.max_test_rows,
        threads=threads,
        executor=executor.describe(),
        ignore_pretraining_limits=args.ignore_pretraining_limits,
        label=args.model,
    )
    print(
        f"eval {args.suite}: {len(tasks)} runs, model {tasks[0].model_label} "
        f"(sha256 {tasks[0].spec.checkpoint_sha256[:12]}), n_estimators "
        f"{tasks[0].spec.n_estimators}, executor {executor.describe()}, store {store}"
    )
    reused = reuse_committed(tasks, store, reuse_from) if reuse_from is not None else []
    if reused:
        print(f"reused {len(reused)} runs of the committed store {reuse_from} (same keys)")
    first_error: list[str] = []

    def keep_first_error(run: RunRecord) -> None:
        if not run.ok and not first_error:
            first_error.append(str(run.error))

    summary = run_suite(
        tasks,
        store,
        executor=executor,
        retry_failed=args.retry_failed,
        progress=not args.no_progress,
        on_row=keep_first_error,
    )
    carriers_written = None
    ckpt = tasks[0].spec.checkpoint_sha256
    if args.carriers or (args.sweep and not carrier_path(store, ckpt).exists()):
        stats = measure_carriers(
            suite=args.suite,
            model_path=model_path,
            n_estimators=tasks[0].spec.n_estimators,
            datasets=args.datasets,
            seeds=args.seeds,
            max_train_rows=args.max_train_rows,
            max_test_rows=args.max_test_rows,
            device=args.device,
            progress=not args.no_progress,
        )
        carriers_written = carrier_path(store, ckpt)
        write_carriers(store, ckpt, stats)
    skipped = summary.skipped - len(reused)  # the copied runs were found stored, too
    record = SessionRecord(
        command="tabpfn-retrofit " + " ".join(sys.argv[1:] if argv is None else ["eval", *argv]),
        suite=args.suite,
        model=args.model,
        checkpoint_sha256=ckpt,
        n_estimators=tasks[0].spec.n_estimators,
        # What an unset --tau means for this checkpoint; report's default table.
        host_default_tau=default_tau,
        # Every tau this eval planned: report counts a sweep tau it never reached as missing.
        taus=tuple(taus),
        sweep=bool(args.sweep),
        executor=executor.describe(),
        threads=threads,
        planned=summary.planned,
        computed=summary.computed,
        skipped=skipped,
        claimed_elsewhere=summary.claimed_elsewhere,
        failed=summary.failed,
        nonfinite=summary.nonfinite,
        runs_wall_s=summary.wall_s,
        carriers=carriers_written.name if carriers_written else None,
        started_at=started,
        finished_at=utc_now(),
        wall_s=time.perf_counter() - t0,
        provenance=provenance_dict(),
        reused_committed=len(reused),
        reused_from=str(reuse_from) if reuse_from is not None else None,
        # What report says happened to each run: read from here, never inferred.
        computed_keys=tuple(summary.keys),
        reused_keys=tuple(reused),
    )
    write_session(store, record)
    elsewhere = (
        f", {summary.claimed_elsewhere} left to another eval process computing them"
        if summary.claimed_elsewhere
        else ""
    )
    copied = f", {len(reused)} copied from the committed store" if reuse_from is not None else ""
    print(
        f"done: {summary.computed} computed ({summary.failed} failed, {summary.nonfinite} "
        f"non-finite){copied}, {skipped} already in this store{elsewhere}, "
        f"{record.wall_s:.1f} s"
    )
    if reuse_from is not None:
        computed = set(summary.keys)
        why = why_recomputed([t.spec for t in tasks if t.spec.key in computed], reuse_from)
        if why:
            print(why)
    if summary.computed and summary.failed + summary.nonfinite == summary.computed:
        # Stored (a rerun with --retry-failed recomputes them), but not a success.
        print(
            f"{PROG} eval: every run it computed failed ({summary.computed}); first error: "
            f"{first_error[0] if first_error else 'unknown'}",
            file=sys.stderr,
        )
        return 1
    return 0
