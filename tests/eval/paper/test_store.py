"""The result store's files: umask modes, and claims that a killed process never holds
forever.
"""

from __future__ import annotations

import dataclasses
import os

from eval.paper.record import SessionRecord
from eval.paper.store import (
    claim_run,
    read_record,
    release_claim,
    runs_dir,
    write_record,
    write_session,
)
from tests.helpers.commands import dead_pid, file_mode
from tests.helpers.run_records import run_record


def test_run_and_session_files_get_the_umask_mode(tmp_path, umask):
    """Store files follow the umask and keep an existing mode."""
    umask(0o002)
    record = run_record(key="k" * 64)
    path = write_record(tmp_path, record)
    session = write_session(tmp_path, SessionRecord(suite="offline18", checkpoint_sha256="c"))
    assert file_mode(path) == 0o664 and file_mode(session) == 0o664
    os.chmod(path, 0o640)
    write_record(tmp_path, dataclasses.replace(record, status="failed"))
    assert file_mode(path) == 0o640 and read_record(path).status == "failed"


def test_a_claim_file_of_a_dead_pid_is_taken_over_and_a_held_one_is_not(tmp_path):
    """The claim of a killed process never blocks a run forever."""
    runs_dir(tmp_path).mkdir(parents=True)
    (runs_dir(tmp_path) / "k.claim").write_text(f"{dead_pid()} somehost\n")
    assert claim_run(tmp_path, "k")
    assert not claim_run(tmp_path, "k")  # held (by this process): a second run_suite skips it
    assert (runs_dir(tmp_path) / "k.claim").read_text().split()[0] == str(os.getpid())
    release_claim(tmp_path, "k")
    assert not (runs_dir(tmp_path) / "k.claim").exists()
    assert claim_run(tmp_path, "k")
    release_claim(tmp_path, "k")
