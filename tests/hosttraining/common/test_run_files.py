"""A damaged training log or resume state: one line naming the file and the way out.

The runs are the tiny regressor host through ``python -m hosttraining.regression.pretrain``
(a few steps of seconds), whose ``<out>.state.pt`` and ``<out>.log.jsonl``
are then cut, truncated, replaced or resumed with another configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hosttraining.common.errors import RunFileError, RunFileWarning
from hosttraining.common.run_files import cut_log_after, read_log
from hosttraining.regression import chain, pretrain

PROG = "python -m hosttraining.regression.pretrain"


def _argv(out: Path, steps: int, *extra: str) -> list[str]:
    common = ["--out", str(out), "--model", "tiny", "--max-rows", "60", "--log-every", "1"]
    return [*common, "--steps", str(steps), "--seed", "3", *extra]


def _run(tmp_path: Path, steps: int = 2) -> tuple[Path, Path, Path]:
    """A finished tiny run: its checkpoint, state file and log."""
    out = tmp_path / "tiny_v3_host.safetensors"
    assert pretrain.main(_argv(out, steps)) == 0
    return out, out.with_name(out.name + ".state.pt"), out.with_name(out.name + ".log.jsonl")


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    (line,) = [e for e in err if ": error: " in e]
    assert line.startswith(f"{PROG}: error: ")
    assert len(line) < 400, line  # not torch's report of every tensor
    return line


def _steps(log: Path) -> list[int]:
    return [json.loads(line)["step"] for line in log.read_text().splitlines()]


def test_a_cut_last_log_line_is_dropped_with_one_warning_and_the_run_resumes(tmp_path, capsys):
    out, _, log = _run(tmp_path)
    with log.open("a") as fh:  # the process died while writing step 3's record
        fh.write('{"step": 3, "loss_ema": 1.2')
    capsys.readouterr()
    assert pretrain.main(_argv(out, 4)) == 0
    warning = [e for e in capsys.readouterr().err.splitlines() if ": warning: " in e]
    assert warning == [f"{PROG}: warning: {log} line 3 is cut (a crash mid-write): dropped it, "
                       "the resumed run logs those steps again"]  # fmt: skip
    assert _steps(log) == [1, 2, 3, 4]


def test_a_log_record_complete_but_for_its_line_end_keeps_and_gets_one(tmp_path):
    log = tmp_path / "run.log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}')
    cut_log_after(log, 5)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n'  # the next record starts its own line


def test_an_unreadable_log_line_before_the_last_is_refused_naming_file_and_line(tmp_path):
    log = tmp_path / "run.log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    restart = "rerun with --no-resume"
    message = f"{log} line 2 is not a JSON record: remove that line or rerun with --no-resume"
    with pytest.raises(RunFileError) as caught:
        cut_log_after(log, 5, restart=restart)
    assert str(caught.value) == message
    with pytest.raises(RunFileError, match="line 2 is not a JSON record"):
        read_log(log)
    log.write_text('{"step": 1}\n{"loss": 2.0}\n')
    with pytest.raises(RunFileError, match=r"without an integer 'step'.*remove that line"):
        cut_log_after(log, 5, restart=restart)


def test_a_last_log_line_cut_inside_a_utf8_character_is_dropped_like_any_cut_line(tmp_path):
    log = tmp_path / "run.log.jsonl"
    # The crash came after the first of the two bytes of "é" (0xC3 0xA9).
    log.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3, "note": "caf' + "é".encode()[:1])
    with pytest.warns(RunFileWarning, match="line 3 is cut"):
        assert read_log(log) == [{"step": 1}, {"step": 2}]
    with pytest.warns(RunFileWarning, match="line 3 is cut"):
        cut_log_after(log, 5)
    assert log.read_bytes() == b'{"step": 1}\n{"step": 2}\n'


def test_a_log_line_that_is_not_utf8_before_the_last_is_refused_naming_file_and_line(tmp_path):
    log = tmp_path / "run.log.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2, "note": "\xff"}\n{"step": 3}\n')
    message = f"{log} line 2 is not UTF-8 text: remove that line or rerun with --no-resume"
    with pytest.raises(RunFileError) as caught:
        cut_log_after(log, 5, restart="rerun with --no-resume")
    assert str(caught.value) == message
    with pytest.raises(RunFileError, match=r"line 2 is not UTF-8 text: remove that line$"):
        read_log(log)


def test_a_card_reads_a_log_whose_last_line_is_cut(tmp_path):
    log = tmp_path / "run.log.jsonl"
    log.write_text('{"step": 1, "loss_ema": 2.0}\n{"step": 2, "loss')
    with pytest.warns(RunFileWarning, match="line 2 is cut"):
        assert read_log(log) == [{"step": 1, "loss_ema": 2.0}]


@pytest.mark.parametrize("keep", [0, 0.5, 0.98])
def test_a_truncated_state_file_is_refused_naming_it_and_no_resume(tmp_path, capsys, keep):
    out, state, log = _run(tmp_path)
    data = state.read_bytes()
    state.write_bytes(data[: int(len(data) * keep)])
    capsys.readouterr()
    assert pretrain.main(_argv(out, 4)) == 2
    line = _error_line(capsys)
    assert f"{state} cannot be read as a training state" in line
    assert line.endswith("remove it or rerun with --no-resume")
    assert _steps(log) == [1, 2]  # nothing was touched
    assert pretrain.main(_argv(out, 3, "--no-resume")) == 0  # the way out works
    assert _steps(log) == [1, 2, 3]


def test_the_state_of_another_configuration_is_refused_in_one_short_line(tmp_path, capsys):
    out, state, _ = _run(tmp_path)
    capsys.readouterr()
    argv = _argv(out, 4)
    argv[argv.index("tiny")] = "default"  # the run was started with --model tiny
    assert pretrain.main(argv) == 2
    line = _error_line(capsys)
    assert f"{state} holds a model of another configuration (" in line
    assert "there, [" in line and " here; " in line  # the first differing tensor, both shapes
    assert line.endswith(
        "resume with the options it was started with, remove it or rerun with --no-resume"
    )


def test_a_state_file_missing_entries_is_refused_naming_them(tmp_path, capsys):
    out, state, _ = _run(tmp_path)
    stored = torch.load(state, weights_only=True)
    torch.save({"model": stored["model"], "step": stored["step"]}, state)
    capsys.readouterr()
    assert pretrain.main(_argv(out, 4)) == 2
    line = _error_line(capsys)
    assert f"{state} lacks optim, tasks_seen, wall_s (" in line
    assert line.endswith("remove it or rerun with --no-resume")


def test_a_state_file_that_is_not_a_dict_is_refused(tmp_path, capsys):
    out, state, _ = _run(tmp_path)
    torch.save(torch.zeros(3), state)
    capsys.readouterr()
    assert pretrain.main(_argv(out, 4)) == 2
    assert f"{state} holds a Tensor, not a training state" in _error_line(capsys)


def test_a_truncated_chain_state_is_refused_naming_it_and_the_fresh_start(tmp_path):
    state = tmp_path / chain.STATE_FILE
    torch.save({"step": 1, "model": {"w": torch.zeros(64)}}, state)
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(RunFileError) as caught:
        chain.run_link(tmp_path, minutes=1.0, log=lambda _: None)
    assert str(caught.value).startswith(f"{state} cannot be read as a training state")
    assert str(caught.value).endswith("remove it or start a new chain in another --dir")
