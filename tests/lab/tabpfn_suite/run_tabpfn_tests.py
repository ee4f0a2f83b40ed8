"""Run tabpfn's own estimator tests against ``OTabPFNRegressor``/``OTabPFNClassifier``, per mode.

The test modules (``tests/test_regressor_interface.py`` and
``tests/test_classifier_interface.py`` of the installed tabpfn's source
distribution) are fetched with pip at run time, never copied into this
repository. For each target they are placed in its own package with only
their import of ``TabPFNRegressor`` (``TabPFNClassifier``) rewritten to the
target's class (:mod:`suite_targets`), next to this project's version of the
helper module they import (:mod:`suite_utils`). All targets run in one pytest
process; :mod:`expectations` lists what is deselected or expected to fail, per
module, with reasons.

Usage (from the repository root)::

    python tests/lab/tabpfn_suite/run_tabpfn_tests.py                  # the three modes, both
                                                                   # classifier checkpoints
    python tests/lab/tabpfn_suite/run_tabpfn_tests.py --targets all    # and plain tabpfn
    python tests/lab/tabpfn_suite/run_tabpfn_tests.py --modules classifier \
        --targets tabpfn-embedded,full-o-embedded                  # on the shipped classifier
    python tests/lab/tabpfn_suite/run_tabpfn_tests.py --modules classifier --targets none
    python tests/lab/tabpfn_suite/run_tabpfn_tests.py --sdist tabpfn-9.2.0.tar.gz -- -x

Exit status: pytest's (0 when everything not listed passes and every listed
failure fails).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: Which estimator -> (the test module in tabpfn's sdist, its one import of the class).
TEST_MODULES: dict[str, tuple[str, str]] = {
    "regressor": ("tests/test_regressor_interface.py", "from tabpfn import TabPFNRegressor\n"),
    "classifier": ("tests/test_classifier_interface.py", "from tabpfn import TabPFNClassifier\n"),
}
# This folder (suite_targets, expectations) and the repository root (suite_targets
# builds its tiny checkpoints with tests.helpers): `python tests/lab/tabpfn_suite/...`
# puts neither on the path, and the editable install maps only the packages.
sys.path[:0] = [str(HERE), str(REPO)]

from suite_targets import (  # noqa: E402 -- after this folder is on the path
    ALL_TARGETS,
    EMBEDDED_SUFFIX,
    MODES,
    modules_of,
)

#: What ``.ci/run`` runs: each retrofit mode on the random classifier (and the embedded
#: regressor), and on the shipped embedded classifier.
DEFAULT_TARGETS: tuple[str, ...] = (*MODES, *(m + EMBEDDED_SUFFIX for m in MODES))

CONFTEST = '''\
"""Written by run_tabpfn_tests.py: offline tabpfn, and the expectations applied."""

import fnmatch
import os
import tempfile

os.environ["TABPFN_NO_BROWSER"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
os.environ["TABPFN_MODEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tabpfn-cache-")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as tests/conftest.py says why

import pytest
import torch

from expectations import EXPECTATIONS

torch.set_num_threads(min(2, os.cpu_count() or 1))


def _target(item):
    return item.module.__name__.split(".")[0].removeprefix("target_").replace("_", "-")


def _estimator(item):
    return item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").split("_")[0]


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        deselected, expected_failures = EXPECTATIONS[_estimator(item)]
        if any(fnmatch.fnmatchcase(item.name, p) for p in deselected):
            dropped.append(item)
            continue
        for pattern, (reason, targets) in expected_failures.items():
            if fnmatch.fnmatchcase(item.name, pattern) and _target(item) in targets:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
'''

PYTEST_INI = """\
[pytest]
markers =
    slow: slow tests that tabpfn runs only on merge
    hopper: tests requiring a Hopper-class GPU
xfail_strict = true
"""


def package_name(target: str) -> str:
    """The package one target's copy of the test module lives in."""
    return "target_" + target.replace("-", "_")


def fetch_sdist(version: str, into: Path) -> Path:
    """Download tabpfn's source distribution of ``version`` with pip."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", f"tabpfn=={version}"),
            *("--no-binary", ":all:", "--no-deps", "--quiet", "-d", str(into)),
        ],
        check=True,
    )
    found = sorted(into.glob(f"tabpfn-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"pip downloaded no tabpfn-{version}.tar.gz into {into}")
    return found[0]


def read_test_module(sdist: Path, test_module: str) -> str:
    """One test module's text, read from the source distribution."""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name.split("/", 1)[-1] == test_module:
                return archive.extractfile(member).read().decode()
    raise SystemExit(f"{sdist} holds no {test_module}")


def write_suite(sources: dict[str, str], root: Path, targets: list[str]) -> None:
    """One package per target, with the rewritten modules, the helper and the target.

    Args:
        sources: Estimator (a key of :data:`TEST_MODULES`) -> its test module's text.
        root: The folder to write the suite into.
        targets: Keys of :data:`suite_targets.ALL_TARGETS`; each gets the
            modules of ``sources`` it runs (:func:`suite_targets.modules_of`).
    """
    for estimator, source in sources.items():
        test_module, import_line = TEST_MODULES[estimator]
        if source.count(import_line) != 1:
            raise SystemExit(f"{test_module}: expected one line {import_line.strip()!r}")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text(PYTEST_INI)
    for target in targets:
        package = root / package_name(target)
        package.mkdir()
        (package / "__init__.py").write_text("")
        shutil.copy(HERE / "suite_utils.py", package / "utils.py")
        estimators = [e for e in sources if e in modules_of(target)]
        (package / "target.py").write_text(
            "from suite_targets import classifier_for, regressor_for\n\n"
            + "".join(
                f"TabPFN{e.capitalize()} = {e}_for({target!r}, __name__)\n" for e in estimators
            )
        )
        for estimator in estimators:
            source = sources[estimator]
            test_module, import_line = TEST_MODULES[estimator]
            name = import_line.split()[-1]
            rewritten = source.replace(import_line, f"from .target import {name}\n")
            (package / Path(test_module).name).write_text(rewritten)


def outcomes(junit: Path) -> dict[str, collections.Counter]:
    """Per target and estimator: how many tests passed, failed, xfailed, were skipped."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in ET.parse(junit).iter("testcase"):
        package, module = case.get("classname", "").split(".")[:2]
        target = package.removeprefix("target_") + " " + module.split("_")[1]
        children = {child.tag: child for child in case}
        if "failure" in children or "error" in children:
            outcome = "failed"
        elif "skipped" in children:
            kind = children["skipped"].get("type", "")
            outcome = "xfailed" if kind == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        counts[target.replace("_", "-")][outcome] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    """Fetch, assemble and run the suite; print the counts per target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help=f"comma-separated of {', '.join(ALL_TARGETS)}, or 'all' (a '-embedded' target "
        "runs the classifier tests on the shipped embedded classifier)",
    )
    parser.add_argument(
        "--modules",
        default="regressor,classifier",
        help=f"comma-separated of {', '.join(TEST_MODULES)}",
    )
    parser.add_argument("--sdist", type=Path, help="a tabpfn sdist already downloaded")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    targets = list(ALL_TARGETS) if args.targets == "all" else args.targets.split(",")
    unknown = sorted(set(targets) - set(ALL_TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; expected some of {ALL_TARGETS}")
    estimators = args.modules.split(",")
    if not estimators or set(estimators) - set(TEST_MODULES):
        parser.error(f"--modules: expected some of {sorted(TEST_MODULES)}")

    version = metadata.version("tabpfn")
    with tempfile.TemporaryDirectory(prefix="tabpfn-suite-") as tmp:
        work = Path(tmp)
        sdist = args.sdist or fetch_sdist(version, work)
        suite = work / "suite"
        suite.mkdir()
        sources = {e: read_test_module(sdist, TEST_MODULES[e][0]) for e in estimators}
        write_suite(sources, suite, targets)
        junit = work / "junit.xml"
        env_path = [str(HERE), str(REPO)]
        command = [
            *(sys.executable, "-m", "pytest", str(suite), "-c", str(suite / "pytest.ini")),
            *("--rootdir", str(suite), "-p", "no:cacheprovider", "-q", "-rfE"),
            *(f"--junitxml={junit}", *args.pytest_args),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(env_path)}
        status = subprocess.run(command, env=env, cwd=suite).returncode
        if junit.is_file():
            print(f"\ntabpfn {version}'s {' and '.join(estimators)} tests, per target:")
            for target, count in sorted(outcomes(junit).items()):
                line = ", ".join(f"{n} {k}" for k, n in sorted(count.items()))
                print(f"  {target:22s} {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
