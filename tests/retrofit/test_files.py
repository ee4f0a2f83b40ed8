"""Atomic output files: a new file gets the umask's mode, a replaced one keeps its own.

A killed writer's temporary file is removed once its process is gone, and only then.
"""

from __future__ import annotations

import os

from retrofit.files import atomic_path, remove_abandoned_temporaries
from tests.helpers.commands import dead_pid, file_mode, predict_argv, run_cli


def test_predictions_get_the_umask_mode_and_keep_an_existing_files_mode(
    csv_data, model_arg, capsys, umask
):
    """Not 0600 from the temporary file."""
    out = csv_data["train"].parent / "pred.csv"
    umask(0o027)
    assert run_cli(predict_argv(csv_data, model_arg, out), capsys)[0] == 0
    assert file_mode(out) == 0o640
    os.chmod(out, 0o644)
    umask(0o077)
    assert run_cli([*predict_argv(csv_data, model_arg, out), "--force"], capsys)[0] == 0
    assert file_mode(out) == 0o644  # an overwritten file keeps its mode


def test_only_temporaries_of_the_path_whose_writer_is_gone_are_removed(tmp_path):
    """What a writer killed inside ``atomic_path`` leaves, and what must stay."""
    target = tmp_path / "out.json"
    with atomic_path(target) as tmp:
        own = tmp.name  # the name a writer uses: hidden, with its PID
    assert own.startswith(f".out.json.tmp-{os.getpid()}-")
    dead = dead_pid()
    names = {
        "dead": f".out.json.tmp-{dead}-abcd_123.tmp",
        "alive": f".out.json.tmp-{os.getpid()}-abcd_123.tmp",
        "other_target": f".other.json.tmp-{dead}-abcd_123.tmp",
        "other_suffix": f".out.json.tmp-{dead}-abcd_123.png",
        "not_ours": f".out.json.tmp-{dead}-x.tmp",
    }
    for name in names.values():
        (tmp_path / name).write_text("partial")
    assert remove_abandoned_temporaries(target) == [tmp_path / names["dead"]]
    kept = {*names.values(), "out.json"} - {names["dead"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    assert remove_abandoned_temporaries(tmp_path / "missing" / "x.json") == []
