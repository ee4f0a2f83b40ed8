"""Run tabpfn's own regressor tests against ``OTabPFNRegressor``, in each retrofit mode.

The test module (``tests/test_regressor_interface.py`` of the installed
tabpfn's source distribution) is fetched with pip at run time, never copied
into this repository. For each target it is placed in its own package with
only its import of ``TabPFNRegressor`` rewritten to the target's class
(:mod:`suite_targets`), next to this project's version of the helper module
it imports (:mod:`suite_utils`). All targets run in one pytest process;
:mod:`expectations` lists what is deselected or expected to fail, with reasons.

Usage (from the repository root)::

    python tests/tabpfn_suite/run_tabpfn_tests.py                  # the three modes
    python tests/tabpfn_suite/run_tabpfn_tests.py --targets all    # and plain tabpfn
    python tests/tabpfn_suite/run_tabpfn_tests.py --sdist tabpfn-9.2.0.tar.gz -- -x

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
REPO = HERE.parents[1]
TEST_MODULE = "tests/test_regressor_interface.py"
IMPORT_LINE = "from tabpfn import TabPFNRegressor\n"
sys.path.insert(0, str(HERE))

from suite_targets import TARGETS  # noqa: E402 -- after this folder is on the path

CONFTEST = '''\
"""Written by run_tabpfn_tests.py: offline tabpfn, and the expectations applied."""

import fnmatch
import os
import tempfile

os.environ["TABPFN_NO_BROWSER"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TABPFN_DISABLE_TELEMETRY", "1")
os.environ["TABPFN_MODEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tabpfn-cache-")

import pytest
import torch

from expectations import DESELECTED, EXPECTED_FAILURES

torch.set_num_threads(min(2, os.cpu_count() or 1))


def _target(item):
    return item.module.__name__.split(".")[0].removeprefix("target_").replace("_", "-")


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        if any(fnmatch.fnmatchcase(item.name, p) for p in DESELECTED):
            dropped.append(item)
            continue
        for pattern, (reason, targets) in EXPECTED_FAILURES.items():
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


def read_test_module(sdist: Path) -> str:
    """The regressor test module's text, read from the source distribution."""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name.split("/", 1)[-1] == TEST_MODULE:
                return archive.extractfile(member).read().decode()
    raise SystemExit(f"{sdist} holds no {TEST_MODULE}")


def write_suite(source: str, root: Path, targets: list[str]) -> None:
    """One package per target, with the rewritten module, the helper and the target."""
    if source.count(IMPORT_LINE) != 1:
        raise SystemExit(f"{TEST_MODULE}: expected one line {IMPORT_LINE.strip()!r}")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text(PYTEST_INI)
    for target in targets:
        package = root / package_name(target)
        package.mkdir()
        (package / "__init__.py").write_text("")
        shutil.copy(HERE / "suite_utils.py", package / "utils.py")
        (package / "target.py").write_text(
            "from suite_targets import regressor_for\n\n"
            f"TabPFNRegressor = regressor_for({target!r}, __name__)\n"
        )
        rewritten = source.replace(IMPORT_LINE, "from .target import TabPFNRegressor\n")
        (package / "test_regressor_interface.py").write_text(rewritten)


def outcomes(junit: Path) -> dict[str, collections.Counter]:
    """Per target: how many tests passed, failed, xfailed, were skipped."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in ET.parse(junit).iter("testcase"):
        target = case.get("classname", "").split(".")[0].removeprefix("target_")
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
        default="none,oattention,full-o",
        help=f"comma-separated of {', '.join(TARGETS)}, or 'all'",
    )
    parser.add_argument("--sdist", type=Path, help="a tabpfn sdist already downloaded")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    targets = list(TARGETS) if args.targets == "all" else args.targets.split(",")
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; expected some of {TARGETS}")

    version = metadata.version("tabpfn")
    with tempfile.TemporaryDirectory(prefix="tabpfn-suite-") as tmp:
        work = Path(tmp)
        sdist = args.sdist or fetch_sdist(version, work)
        suite = work / "suite"
        suite.mkdir()
        write_suite(read_test_module(sdist), suite, targets)
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
            print(f"\ntabpfn {version} {TEST_MODULE}, per target:")
            for target, count in sorted(outcomes(junit).items()):
                line = ", ".join(f"{n} {k}" for k, n in sorted(count.items()))
                print(f"  {target:11s} {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
