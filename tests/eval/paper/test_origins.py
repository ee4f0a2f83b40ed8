"""What report says happened to each run: read from the session records, the latest first."""

from __future__ import annotations

from eval.paper.origins import run_origins
from eval.paper.record import SessionRecord
from eval.paper.store import write_session
from tests.helpers.run_records import run_record

RUNS = [run_record(key=k) for k in ("a", "b", "c", "d")]


def _session(**fields) -> SessionRecord:
    return SessionRecord(suite="offline18", checkpoint_sha256="c" * 64, **fields)


def test_the_latest_session_that_names_a_run_says_what_happened_to_it(tmp_path) -> None:
    write_session(
        tmp_path,
        _session(
            computed_keys=("a",),
            reused_keys=("b", "c"),
            reused_from="results/offline18",
            reused_committed=2,
        ),
    )
    # Then c was deleted and computed again; d was never named.
    write_session(tmp_path, _session(computed_keys=("c",), reused_keys=()))
    write_session(
        tmp_path, SessionRecord(suite="offline18", checkpoint_sha256="other", computed_keys=("d",))
    )  # another checkpoint's
    origins = run_origins(tmp_path, RUNS)
    assert (origins.computed, origins.reused, origins.unnamed) == (
        2,
        (("results/offline18", 1),),
        1,
    )
    assert origins.sentence() == (
        "The 4 runs of this report, by this store's eval session records: 2 computed by `eval` "
        "into this store; 1 copied by `eval --reuse-committed` from the committed store "
        "results/offline18 (the same keys); 1 named by no session record of this store (an "
        "eval that was stopped writes none)."
    )


def test_sessions_that_predate_run_lists_are_quoted_for_their_counts_only(tmp_path) -> None:
    write_session(tmp_path, _session(computed=3, reused_committed=0))
    write_session(tmp_path, _session(computed=1, reused_committed=0))
    origins = run_origins(tmp_path, RUNS)
    assert (origins.computed, origins.reused, origins.unnamed) == (0, (), 4)
    assert origins.sentence().endswith(
        "4 named by no session record of this store (its 2 older session records count 4 computed "
        "and 0 copied, without naming the runs)."
    )
