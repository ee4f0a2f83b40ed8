"""A wheel (``pip install .``, not ``-e``) runs the main job.

The wheel is built from the working tree with ``pip wheel --no-deps`` (no
build isolation: the test runs offline, with the setuptools of its own
environment), unpacked into a temporary folder, and run from a working
directory outside the checkout with ``PYTHONPATH`` set to that folder, so a
file that only the checkout holds cannot be found.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("patches", "retrofit", "eval", "hostgen")
# The smallest main job the CLI allows: one dataset, one seed, one estimator, few rows.
ONE_CASE = ["--suite", "offline18", "--model", "embedded", "--datasets", "qsar_fish",
            "--seeds", "0", "--n-estimators", "1", "--max-train-rows", "40",
            "--max-test-rows", "12", "--no-progress"]  # fmt: skip
# A file path a help text might name: a folder, a slash, a name with an extension.
_PATH_IN_TEXT = re.compile(r"[\w.-]+(?:/[\w.-]+)+\.(?:md|json|jsonl|png|csv|txt|safetensors)")


def _package_files() -> list[str]:
    """Every file of the packages the checkout holds: tracked, or new and not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sorted({line for line in out.stdout.splitlines() if (ROOT / line).is_file()})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> dict:
    """Builds the wheel from a copy of the working tree; returns its names and unpacked folder."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in ("pyproject.toml", "README.md", *_package_files()):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(work / "dist"), str(src)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (path,) = (work / "dist").glob("tabpfn_retrofit-*.whl")
    site = work / "site"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        zf.extractall(site)
    return {"names": names, "site": site}


def _run_from_wheel(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "TABPFN_NO_BROWSER": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_every_non_python_file_in_the_packages_is_in_the_wheel(wheel):
    data_files = [f for f in _package_files() if not f.endswith(".py")]
    # The files the code reads today must be among them, or this check compares nothing.
    for needed in (
        "eval/paper/suites/offline18.json",
        "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors",
        "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors.sha256",
        "retrofit/models/embedded/training_log.jsonl",
        "retrofit/models/embedded/tabpfn_v3_embedded_classifier.safetensors",
        "retrofit/models/embedded/tabpfn_v3_embedded_classifier.safetensors.sha256",
        "retrofit/models/embedded/CLASSIFIER_MODEL_CARD.md",
        "retrofit/models/embedded/classifier_loss_curve.png",
        "retrofit/models/embedded/classifier_quality.json",
        "retrofit/models/embedded/classifier_training_log.jsonl",
    ):
        assert needed in data_files
    missing = [f for f in data_files if f not in wheel["names"]]
    assert not missing, f"in the packages but not in the wheel (pyproject package-data): {missing}"


def test_the_installed_wheel_runs_eval_on_one_case_and_report_outside_the_checkout(wheel, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = tmp_path / "store"
    where = _run_from_wheel(
        wheel["site"],
        elsewhere,
        "-c",
        "import eval, retrofit; print(eval.__file__, retrofit.__file__)",
    )
    assert where.returncode == 0, where.stderr
    assert all(Path(f).is_relative_to(wheel["site"]) for f in where.stdout.split())

    ran = _run_from_wheel(
        wheel["site"], elsewhere, "-m", "eval", "eval", *ONE_CASE, "--store", str(store)
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    runs = list((store / "runs").glob("*.json"))
    assert len(runs) == 3  # the unpatched host and both retrofits on the one case

    out = tmp_path / "report"
    reported = _run_from_wheel(
        wheel["site"], elsewhere, "-m", "eval", "report", "--suite", "offline18",
        "--store", str(store), "--out", str(out), "--partial",
    )  # fmt: skip
    assert reported.returncode == 0, reported.stderr[-3000:]
    assert "Full-O" in (out / "summary.md").read_text()
    # Outside a checkout there is no committed table, and report still prints its own.
    (printed,) = [line for line in reported.stdout.splitlines() if line.startswith("| Full-O")]
    assert printed in (out / "summary.md").read_text().splitlines() and "%" in printed
    assert not any(elsewhere.iterdir())  # the store and report went where they were told


def test_no_help_text_names_a_file_that_the_wheel_lacks(wheel, tmp_path):
    # Every subcommand's --help, from the wheel's own parser, in one process.
    shown = _run_from_wheel(wheel["site"], tmp_path, "-c", _PRINT_EVERY_HELP)
    assert shown.returncode == 0, shown.stderr
    helps = shown.stdout.split("\f")
    assert len(helps) > 6 and any("--store" in h for h in helps)  # eval's and report's are there
    # argparse wraps at spaces only, so a path is never split across lines.
    named = sorted(set(_PATH_IN_TEXT.findall(shown.stdout)))
    # A path of the checkout (not a placeholder such as DIR/retrofit.json) that a wheel lacks.
    assert not [p for p in named if (ROOT / p).is_file() and p not in wheel["names"]], named


_PRINT_EVERY_HELP = """
import argparse
from eval.cli import build_parser

parser = build_parser()
(sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
print("\\f".join([parser.format_help(), *(p.format_help() for p in sub.choices.values())]))
"""
