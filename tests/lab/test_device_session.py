""".ci/device-session, run for real with a stand-in Python: its exit status and worker count.

The script is copied into a temporary checkout and given ``PYTHON=`` a shell
stand-in that records each command and fails the steps a test names, so every
step, the packing and the exit logic run in milliseconds, offline. A stand-in
``nproc`` obeys ``OMP_NUM_THREADS`` and ``OMP_THREAD_LIMIT`` as GNU nproc does
(checked against the real one below), with ``FAKE_CPUS`` as the machine's count.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "device-session"
STEPS = ("gpu_check", "bench_batched", "train_regressor", "train_classifier")

FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"$FAKE_CALLS"
prev=
for word in "$@"; do  # a training's files: its averaged weights and its resume state
  case "$prev $word" in
    "--out "*.safetensors) : >"${word%.safetensors}.lawa.safetensors"; : >"$word.state.pt" ;;
  esac
  prev=$word
done
for word in "$@"; do
  case " $FAIL_ON " in *" $word "*) echo "forced failure of $word" >&2; exit 3 ;; esac
done
"""
FAKE_NPROC = """#!/bin/sh
n=$FAKE_CPUS
[ -n "${OMP_NUM_THREADS:-}" ] && n=$OMP_NUM_THREADS
[ -n "${OMP_THREAD_LIMIT:-}" ] && [ "$OMP_THREAD_LIMIT" -lt "$n" ] && n=$OMP_THREAD_LIMIT
echo "$n"
"""
# The word of each step's command that the stand-in fails on.
FAIL_WORD = {
    "torch": "-c",
    "gpu_check": "gpu-check",
    "bench_batched": "bench",
    "train_regressor": "hosttraining.regression.pretrain",
    "train_classifier": "hosttraining.classification.train",
}


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _session(
    tmp_path: Path, *, fail: tuple[str, ...] = (), cpus: int | None = 16, **env: str
) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    """Runs the script in a copy of the checkout; returns the process, OUT and the calls."""
    checkout, bin_dir, out = tmp_path / "checkout", tmp_path / "bin", tmp_path / "out"
    (checkout / ".ci").mkdir(parents=True)
    bin_dir.mkdir()
    shutil.copy2(SCRIPT, checkout / ".ci" / "device-session")
    python = _executable(bin_dir / "python-stand-in", FAKE_PYTHON)
    path = os.environ["PATH"]
    if cpus is not None:
        _executable(bin_dir / "nproc", FAKE_NPROC)
        path = f"{bin_dir}{os.pathsep}{path}"
    calls = tmp_path / "calls.txt"
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORKERS", "OMP_NUM_THREADS", "OMP_THREAD_LIMIT")
    }
    proc = subprocess.run(
        ["bash", str(checkout / ".ci" / "device-session"), str(out), "1", "cpu"],
        env={
            **base,
            "PATH": path,
            "PYTHON": str(python),
            "FAKE_CALLS": str(calls),
            "FAIL_ON": " ".join(FAIL_WORD[name] for name in fail),
            "FAKE_CPUS": str(cpus),
            "TMPDIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return proc, out, lines


def _workers(calls: list[str]) -> int:
    """The worker count both trainings were given (they share it, one after the other)."""
    trains = [line.split() for line in calls if FAIL_WORD["train_regressor"] in line]
    trains += [line.split() for line in calls if FAIL_WORD["train_classifier"] in line]
    assert len(trains) == 2
    (count,) = {int(words[words.index("--workers") + 1]) for words in trains}
    return count


def test_the_stand_in_nproc_obeys_openmp_variables_as_gnu_nproc_does(tmp_path):
    real = shutil.which("nproc")
    if real is None:
        pytest.skip("no nproc here")
    fake = _executable(tmp_path / "nproc", FAKE_NPROC)
    plain = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")
    }
    plain["FAKE_CPUS"] = str(len(os.sched_getaffinity(0)))
    for extra in ({}, {"OMP_NUM_THREADS": "1"}, {"OMP_THREAD_LIMIT": "1"}):
        env = {**plain, **extra}
        said = [
            subprocess.run([p], env=env, capture_output=True, text=True).stdout
            for p in (real, fake)
        ]
        assert said[0] == said[1], extra


@pytest.mark.parametrize(("cpus", "workers"), [(1, 0), (2, 0), (3, 1), (16, 14)])
def test_workers_are_the_cpus_less_two_never_below_zero_under_omp_num_threads_1(
    tmp_path, cpus, workers
):
    proc, out, calls = _session(tmp_path, cpus=cpus, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    assert _workers(calls) == workers
    assert f"workers={workers} of cpus={cpus}" in (out / "status.txt").read_text()


def test_workers_follow_this_machines_real_cpu_count_under_omp_num_threads_1(tmp_path):
    proc, _, calls = _session(tmp_path, cpus=None, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    assert _workers(calls) == max(0, len(os.sched_getaffinity(0)) - 2)


@pytest.mark.parametrize("workers", ["-1", "two", ""])
def test_a_workers_setting_that_is_no_count_is_refused_before_any_step(tmp_path, workers):
    proc, out, calls = _session(tmp_path, WORKERS=workers)
    if workers == "":  # empty means unset: the default count
        assert proc.returncode == 0 and _workers(calls) == 14
        return
    assert proc.returncode == 2
    assert f"WORKERS={workers}" in proc.stderr
    assert not calls and not (out / "session.tgz").exists()


def test_every_step_failing_exits_1_naming_them_with_their_logs_packed(tmp_path):
    proc, out, calls = _session(tmp_path, fail=STEPS)
    assert proc.returncode == 1
    assert "failed steps: " + " ".join(STEPS) in proc.stderr
    assert len([c for c in calls if not c.startswith("-c")]) == len(STEPS)  # every step ran
    with tarfile.open(out / "session.tgz") as tgz:
        logs = {Path(name).name for name in tgz.getnames()}
        text = tgz.extractfile("./train_classifier.log").read().decode()
    assert {f"{name}.log" for name in STEPS} <= logs
    assert "forced failure of hosttraining.classification.train" in text


@pytest.mark.parametrize("failing", STEPS)
def test_one_failing_step_exits_1_naming_only_it(tmp_path, failing):
    proc, out, _ = _session(tmp_path, fail=(failing,))
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().splitlines()[-1].startswith(f"device-session: failed steps: {failing} ")
    )
    status = (out / "status.txt").read_text()
    assert f"{failing} rc=3" in status
    assert all(f"{name} rc=0" in status for name in STEPS if name != failing)


def test_a_python_without_torch_fails_the_session_after_every_step_has_run(tmp_path):
    proc, out, calls = _session(tmp_path, fail=("torch",))
    assert proc.returncode == 1
    assert "failed steps: torch " in proc.stderr
    assert len(calls) == 5 and (out / "session.tgz").exists()


def test_a_session_whose_steps_all_pass_exits_0(tmp_path):
    proc, out, calls = _session(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "failed" not in proc.stderr
    assert (out / "session.tgz").exists()
    assert len(calls) == 5  # the torch line and four steps
    # Each host's averaged weights come back as their own file; the pack holds no weights.
    assert sorted(p.name for p in out.glob("*.safetensors")) == [
        "tabpfn_v3_embedded_classifier.lawa.safetensors",
        "tabpfn_v3_embedded_regressor.lawa.safetensors",
    ]
    with tarfile.open(out / "session.tgz") as tgz:
        names = tgz.getnames()
    assert "./regressor" in names and "./classifier" in names
    assert not [n for n in names if n.endswith((".safetensors", ".state.pt"))]
    # Both hosts train cold on the speedrun's recipe and TabICL's prior.
    for step in ("train_regressor", "train_classifier"):
        (line,) = [call for call in calls if FAIL_WORD[step] in call]
        assert "--prior tabicl" in line and "--optimizer muon" in line and "--no-resume" in line
