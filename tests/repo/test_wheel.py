"""A wheel (``pip install ".[eval]"``) holds the library and the paper's runner, and runs its job.

The wheel is built from the working tree with ``pip wheel --no-deps`` (no
build isolation: the test runs offline, with the setuptools of its own
environment), unpacked into a temporary folder, and run from a working
directory outside the checkout with ``PYTHONPATH`` set to that folder, so a
file that only the checkout holds cannot be found; the console script is
started as pip's launcher starts it, from the wheel's own entry points. What
the wheel requires is compared with what its code imports (found in the
sources' syntax trees), so the library installs only what it imports, and the
``test`` extra only what README's tests import. Checks of an extra whose
packages this environment lacks (the lab's, the cluster's: README's command runs
without them) are skipped here and run in ``.ci/run``'s second pass, after the
``lab`` extra.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest

from eval.extras import EXTRA_MODULES
from eval.paper.datasets.catalog import ALL_SPECS
from tests.helpers.rooms import LAB_ROOM, readme_room

ROOT = Path(__file__).resolve().parents[2]
# The wheel is built from every package of the checkout and must hold only these: the library
# and the paper's runner, not the trainer (hosttraining) or the lab.
PACKAGES = ("patches", "retrofit", "eval", "hosttraining", "lab")
SHIPPED = ("patches", "retrofit", "eval")
LEFT_OUT = ("hosttraining", "lab")
LIBRARY = ("patches", "retrofit")
DISTRIBUTION = "tabpfn-retrofit"
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
    (metadata,) = site.glob("tabpfn_retrofit-*.dist-info/METADATA")
    return {"names": names, "site": site, "requires": _requires_dist(metadata.read_text())}


# A Requires-Dist line: the distribution, its extras, then an optional `extra == "x"` marker.
_REQUIREMENT = re.compile(r"^([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?[^;]*(?:;.*extra == \"(\w+)\")?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires_dist(metadata: str) -> dict[str | None, set[tuple[str, tuple[str, ...]]]]:
    """{extra (None: no extra): {(distribution, its extras)}} of a METADATA text."""
    found: dict[str | None, set[tuple[str, tuple[str, ...]]]] = {}
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: "):
            name, extras, extra = _REQUIREMENT.match(line.removeprefix("Requires-Dist: ")).groups()
            wanted = tuple(sorted(e.strip() for e in extras.split(","))) if extras else ()
            found.setdefault(extra, set()).add((_canonical(name), wanted))
    return found


def _installed_by(requires_dist: dict, extra: str | None) -> set[str]:
    """The distributions an extra (None: the plain install) names, with the extras of each.

    ``tabpfn-retrofit[eval]`` adds the eval extra's; ``dask[distributed]`` adds what dask's
    own ``distributed`` extra requires (known only where dask is installed).
    """
    names: set[str] = set()
    for name, extras in requires_dist.get(extra, ()):
        if name == DISTRIBUTION:
            names |= set().union(*(_installed_by(requires_dist, e) for e in extras))
            continue
        names.add(name)
        try:
            lines = requires(name) or () if extras else ()
        except PackageNotFoundError:  # not installed here: its own extras are unknown
            lines = ()
        for line in lines:
            dist, _, marker = _REQUIREMENT.match(line).groups()
            if marker in extras:
                names.add(_canonical(dist))
    return names


def _python_files(*places: str) -> list[Path]:
    """The ``.py`` files of the folders (or the files themselves) named from the root."""
    return [
        path
        for place in places
        for path in ((ROOT / place,) if place.endswith(".py") else (ROOT / place).rglob("*.py"))
    ]


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports (``from a import b``: ``a`` and ``a.b``, which may be one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def _third_party_imports(*places: str) -> set[str]:
    """Top-level modules imported anywhere in the places' files, but the stdlib and the project."""
    # tests/lab/tabpfn_suite/'s scripts import their neighbours by file name.
    suite = ROOT / "tests" / "lab" / "tabpfn_suite"
    local = {*PACKAGES, "tests", *(p.stem for p in suite.glob("*.py"))}
    found = {m.split(".")[0] for path in _python_files(*places) for m in _imports(path)}
    return {m for m in found if m not in local and m not in sys.stdlib_module_names}


def _readme_tests_and_what_they_run() -> tuple[str, ...]:
    """README's tests, what they share, and the lab modules those import.

    The packages they test need the plain install (the library) and the runner's extra, which
    the test extra holds; the runner's optional imports (Dask, Ray) stay the cluster extra's.
    """
    places = [*readme_room(), "tests/helpers", "tests/conftest.py"]
    seen: set[str] = set()
    while True:  # the lab's modules those import (tests/helpers builds hosts by its recipe)
        lab = {
            m for path in _python_files(*places) for m in _imports(path) if m.split(".")[0] == "lab"
        }
        files = {
            f"{m.replace('.', '/')}.py"
            for m in lab
            if (ROOT / f"{m.replace('.', '/')}.py").is_file()
        }
        if files <= seen:
            return tuple(places)
        places += sorted(files - seen)
        seen |= files


def _distributions(modules: set[str]) -> dict[str, str]:
    """{module: the installed distribution that provides it}."""
    providers = packages_distributions()
    unknown = sorted(m for m in modules if m not in providers)
    assert not unknown, f"imported but not installed here: {unknown}"
    return {m: _canonical(providers[m][0]) for m in modules}


def _skip_unless_installed(modules: set[str], extra: str) -> None:
    """Skips the test where ``modules`` are not all installed (README's room lacks the lab's)."""
    absent = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    if absent:
        pytest.skip(f"[{extra}] is not installed here ({', '.join(absent)}): .ci/run checks it")


def _run_from_wheel(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "TABPFN_NO_BROWSER": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


# What pip's `tabpfn-retrofit` launcher does, with the entry point of the wheel's own
# metadata (PYTHONPATH comes first on sys.path, so its dist-info is the one found).
_CONSOLE_SCRIPT = """
import sys
from importlib.metadata import entry_points

(script,) = entry_points(group="console_scripts", name="tabpfn-retrofit")
assert str(script.dist.locate_file("")) == sys.path[1], (script.dist.locate_file(""), sys.path)
sys.argv[0] = "tabpfn-retrofit"
sys.exit(script.load()())
"""


def _console_from_wheel(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return _run_from_wheel(site, cwd, "-c", _CONSOLE_SCRIPT, *argv)


def test_the_wheel_holds_the_library_and_the_runner_but_not_the_trainer_or_the_lab(wheel):
    for package in LEFT_OUT:  # they were there to leave out
        assert any(f.startswith(f"{package}/") for f in _package_files()), package
    tops = {name.split("/")[0] for name in wheel["names"]}
    assert tops == {*SHIPPED, "tabpfn_retrofit-0.1.0.dist-info"}, sorted(tops)
    shipped = [f for f in _package_files() if f.split("/")[0] in SHIPPED and f.endswith(".py")]
    assert not [f for f in shipped if f not in wheel["names"]]
    # No measurement module stayed behind in the runner: the lab's rooms are gone from eval/.
    assert not [
        n for n in wheel["names"] if n.split("/")[1:2] in (["benchmarks"], ["device_checks"])
    ]


def test_every_non_python_file_in_the_shipped_packages_is_in_the_wheel(wheel):
    data_files = [
        f for f in _package_files() if not f.endswith(".py") and f.split("/")[0] in SHIPPED
    ]
    # The files the code reads today must be among them, or this check compares nothing.
    for needed in (
        "eval/paper/suites/offline18.json",
        "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors",
        "retrofit/models/embedded/tabpfn_v3_embedded_regressor.safetensors.sha256",
        "retrofit/models/embedded/MODEL_CARD.md",
        "retrofit/models/embedded/tabpfn_v3_embedded_classifier.safetensors",
        "retrofit/models/embedded/tabpfn_v3_embedded_classifier.safetensors.sha256",
        "retrofit/models/embedded/CLASSIFIER_MODEL_CARD.md",
    ):
        assert needed in data_files
    missing = [f for f in data_files if f not in wheel["names"]]
    assert not missing, f"in the packages but not in the wheel (pyproject package-data): {missing}"


def test_the_plain_install_requires_exactly_what_the_library_imports(wheel):
    imported = _distributions(_third_party_imports(*LIBRARY))
    assert {"torch", "tabpfn"} <= set(imported.values())  # the scan found the imports
    plain = {name for name, _ in wheel["requires"][None]}
    assert plain == set(imported.values()), (plain, imported)


def test_what_the_runner_imports_beyond_the_library_is_named_by_an_extra(wheel):
    # eval's syntax tree's imports and the packages that hold the suites' offline files (found by
    # name, not imported); what no extra names must be the library's own requirement.
    library = {name for name, _ in wheel["requires"][None]}
    spec_modules = {spec.module for spec in ALL_SPECS.values()}
    named = {m for modules in EXTRA_MODULES.values() for m in modules}
    unnamed = (_third_party_imports("eval") | spec_modules) - named
    beyond = {m: d for m, d in _distributions(unnamed).items() if d not in library}
    assert not beyond, f"eval imports these, but no extra names them: {beyond}"


@pytest.mark.parametrize("extra", sorted(EXTRA_MODULES))
def test_each_runner_extra_holds_the_modules_it_names_and_nothing_else(wheel, extra):
    modules = set(EXTRA_MODULES[extra])
    _skip_unless_installed(modules, extra)
    installed = _installed_by(wheel["requires"], extra)
    provided = _distributions(modules)
    assert set(provided.values()) <= installed, (extra, provided, installed)
    # Every distribution the extra names brings one of its modules (dask[distributed]:
    # distributed).
    for requirement in wheel["requires"][extra]:
        brings = _installed_by({extra: {requirement}}, extra)
        assert brings & set(provided.values()), f"[{extra}]: {requirement} is unused"


def test_the_test_extra_installs_what_readme_s_tests_import_and_nothing_more(wheel):
    requires_dist = wheel["requires"]
    installed = _installed_by(requires_dist, None) | _installed_by(requires_dist, "test")
    imported = _distributions(_third_party_imports(*_readme_tests_and_what_they_run()))
    assert {"pytest", "hypothesis", "scipy"} <= set(imported.values())  # the scan found them
    missing = {m: d for m, d in imported.items() if d not in installed}
    assert not missing, f"[test] lacks what README's tests import: {missing}"
    # Nothing more: each name is imported by README's tests, or is the runner's extra (README's
    # tests run the runner), or the builder of the wheel that tests/repo/test_wheel.py builds.
    for name, extras in requires_dist["test"]:
        if name == DISTRIBUTION:
            assert extras == ("eval",), f"[test] installs the {extras} extras"
        else:
            assert name in {*imported.values(), "setuptools"}, f"[test]: nothing imports {name}"
    assert not {"ray", "dask", "distributed", "tabicl", "xgboost"} & installed


def test_the_train_and_lab_extras_install_what_their_code_imports(wheel):
    requires_dist = wheel["requires"]
    for extra, places in (
        ("train", ("hosttraining",)),
        ("lab", ("lab", "hosttraining", *LAB_ROOM, "tests/helpers")),
    ):
        modules = _third_party_imports(*places)
        _skip_unless_installed(modules, extra)
        installed = _installed_by(requires_dist, None) | _installed_by(requires_dist, extra)
        missing = {m: d for m, d in _distributions(modules).items() if d not in installed}
        assert not missing, f"[{extra}] lacks what its code imports: {missing}"


def test_the_lab_extra_holds_every_other_so_ci_runs_every_test(wheel):
    requires_dist = wheel["requires"]
    everything = set().union(*(_installed_by(requires_dist, e) for e in requires_dist))
    assert _installed_by(requires_dist, "lab") | _installed_by(requires_dist, None) == everything


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

    ran = _console_from_wheel(wheel["site"], elsewhere, "eval", *ONE_CASE, "--store", str(store))
    assert ran.returncode == 0, ran.stderr[-3000:]
    runs = list((store / "runs").glob("*.json"))
    assert len(runs) == 3  # the unpatched host and both retrofits on the one case

    out = tmp_path / "report"
    reported = _console_from_wheel(
        wheel["site"], elsewhere, "report", "--suite", "offline18",
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
from retrofit.command_line import build_parser

parser = build_parser()  # the console script's: the library's and every installed group's
(sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
print("\\f".join([parser.format_help(), *(p.format_help() for p in sub.choices.values())]))
"""


def test_the_console_script_offers_the_library_s_three_commands_and_the_paper_s_four(wheel):
    entry_points = next(wheel["site"].glob("tabpfn_retrofit-*.dist-info/entry_points.txt"))
    assert "tabpfn-retrofit = retrofit.cli.program:main" in entry_points.read_text()
    shown = _console_from_wheel(wheel["site"], wheel["site"].parent, "--help")
    assert shown.returncode == 0, shown.stderr
    listed = re.findall(r"^    ([\w-]+)", shown.stdout, flags=re.MULTILINE)
    assert listed == ["predict", "predict-batch", "patch", "exactness", "ablation", "eval",
                      "report"]  # fmt: skip
