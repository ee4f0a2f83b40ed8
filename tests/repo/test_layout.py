"""The shape of the code: one-way imports, a light command line, portable results."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("patches", "retrofit", "eval", "hosttraining", "lab")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once a session (the checks only read it)."""
    return ast.parse(path.read_text())


def _import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (at any depth of the file); the caller's copy."""
    return {module: set(targets) for module, targets in _walked_import_graph().items()}


@functools.cache
def _walked_import_graph() -> dict[str, frozenset[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(_tree(path)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    edges.add(target)
        graph[name] = frozenset(edges)
    return graph


def test_the_import_graph_of_the_packages_has_no_cycle():
    graph = _import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("patches", "retrofit"),
        ("patches", "eval"),
        ("patches", "hosttraining"),
        ("retrofit", "eval"),
        ("retrofit", "hosttraining"),
        ("eval", "hosttraining"),
        ("patches", "lab"),
        ("retrofit", "lab"),
        ("eval", "lab"),
        ("hosttraining", "lab"),
    ],
)
def test_dependencies_point_one_way(lower, upper):
    graph = _import_graph()
    wrong = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.split(".")[0] == lower
        for t in targets
        if t.split(".")[0] == upper
    )
    assert not wrong, wrong


# The rooms of retrofit/ (a top-level module or a subpackage), floor by floor from
# the bottom: a room imports only rooms on lower floors. A new room gets a floor here.
RETROFIT_FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "files", "versions"),
    ("settings", "tabpfn_surface", "validation"),
    ("hosts", "weighted_preprocessing"),
    ("weighted_fit",),
    ("batching", "patcher"),
    ("models",),
    ("fit_state",),
    ("estimator_base",),
    ("regressor", "classifier"),
    ("leave_out",),
    ("cli",),
    ("command_line",),
)

# tabpfn modules internal to tabpfn's predict: only retrofit/tabpfn_surface.py imports
# from them (or any "_" name of tabpfn's).
TABPFN_PRIVATE_MODULES = frozenset(
    {"tabpfn.inference", "tabpfn.memory", "tabpfn.preprocessing.clean", "tabpfn.validation"}
)
TABPFN_SURFACE = "retrofit.tabpfn_surface"


def _room(module: str) -> str:
    return module.split(".")[1]


def _retrofit_room_arrows() -> set[tuple[str, str]]:
    """(room, room it imports) for every import between two rooms of retrofit/."""
    return {
        (_room(m), _room(t))
        for m, targets in _import_graph().items()
        if m.startswith("retrofit.")
        for t in targets
        if t.startswith("retrofit.") and _room(t) != _room(m)
    }


def test_every_room_of_retrofit_imports_only_rooms_on_lower_floors():
    floor = {room: i for i, rooms in enumerate(RETROFIT_FLOORS) for room in rooms}
    rooms = {_room(m) for m in _import_graph() if m.startswith("retrofit.")}
    assert rooms == set(floor), "place every room of retrofit/ on a floor"
    upward = sorted(f"{a} -> {b}" for a, b in _retrofit_room_arrows() if floor[b] >= floor[a])
    assert not upward, upward


# The rooms inside three rooms of retrofit/ and inside the training tooling, floor by
# floor from the bottom, as above. hosts/: one folder per host family over what they
# share (tabpfn's architectures/, PEFT's tuner folders); a family never imports
# another. batching/: the device bounds, the padding and chunks, the engine, the one
# dispatch, then the two front ends, neither of which imports the other. leave_out/:
# the transductive fold fit, then the fold engine and the interval maths, then the
# intervals of an estimator on both and the bootstrap replicates on the fold engine.
# hosttraining/: the priors, what both tasks share, then one folder per task, neither
# of which imports the other (no module sits flat beside them). lab/: one room per job
# (the GPU check reuses the benchmarks' timing), then the command line that runs them all.
INNER_FLOORS: dict[str, tuple[tuple[str, ...], ...]] = {
    "hosttraining": (("priors",), ("common",), ("regression", "classification")),
    "lab": (
        ("benchmarks", "leave_out", "calibration", "step_cost"),
        ("device_checks",),
        ("cli",),
        ("__main__",),
    ),
    "retrofit.hosts": (("common",), ("v2", "v3")),
    "retrofit.leave_out": (
        ("transductive",),
        ("cross_val", "intervals"),
        ("estimator_intervals", "bootstrap"),
    ),
    "retrofit.batching": (
        ("bounds",),
        ("chunks", "padding"),
        ("engine",),
        ("dispatch",),
        ("regression", "classification"),
    ),
}


def _inner_rooms_and_upward_imports(package: str) -> tuple[set[str], list[str]]:
    """The rooms of ``package`` (its modules and subpackages) and its imports that go up."""
    floors = INNER_FLOORS[package]
    floor = {room: i for i, rooms in enumerate(floors) for room in rooms}
    depth = package.count(".") + 1
    graph = _import_graph()
    inside = {m for m in graph if m.startswith(package + ".")}
    rooms = {m.split(".")[depth] for m in inside}
    upward = sorted(
        f"{m} -> {t}"
        for m in inside
        for t in graph[m]
        if t.startswith(package + ".")
        and m.split(".")[depth] != t.split(".")[depth]
        and m.split(".")[depth] in floor
        and t.split(".")[depth] in floor
        and floor[t.split(".")[depth]] >= floor[m.split(".")[depth]]
    )
    return rooms, upward


@pytest.mark.parametrize("package", sorted(INNER_FLOORS))
def test_the_rooms_inside_a_package_are_the_named_ones_and_import_downward(package):
    rooms, upward = _inner_rooms_and_upward_imports(package)
    named = {room for floor in INNER_FLOORS[package] for room in floor}
    assert rooms == named, f"place every room of {package} on a floor of INNER_FLOORS"
    assert not upward, upward


def test_no_host_module_sits_beside_the_family_folders():
    """A host's table, block or stage lives in its family's folder, not flat in hosts/."""
    hosts = ROOT / "retrofit" / "hosts"
    flat = sorted(p.name for p in hosts.glob("*.py") if p.name != "__init__.py")
    assert not flat, (
        f"retrofit/hosts/ holds {flat}: move each into common/, v2/, v3/ or a new family"
    )
    for family in INNER_FLOORS["retrofit.hosts"][1]:
        assert (hosts / family / "__init__.py").is_file(), f"retrofit/hosts/{family}/ is no package"


def _private_tabpfn_imports(tree: ast.AST) -> list[str]:
    """The imports in ``tree`` of a private tabpfn name or from a private tabpfn module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in TABPFN_PRIVATE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tabpfn":
            module = node.module or ""
            private_path = any(part.startswith("_") for part in module.split("."))
            for alias in node.names:
                name = alias.name
                private = name.startswith("_") and not name.startswith("__")
                if private or private_path or module in TABPFN_PRIVATE_MODULES:
                    found.append(f"{module}.{name}")
    return found


def test_only_the_tabpfn_surface_imports_private_tabpfn_names():
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    offenders = [
        f"{name}: {found}"
        for name, path in sorted(modules.items())
        if name != TABPFN_SURFACE
        for found in _private_tabpfn_imports(_tree(path))
    ]
    assert not offenders, offenders


def test_the_private_tabpfn_import_check_catches_each_kind():
    code = (
        "from tabpfn.inference import _prepare_model_inputs\n"
        "from tabpfn.regressor import _USABLE_OUTPUT_TYPES\n"
        "from tabpfn.memory import should_save_peak_mem\n"
        "import tabpfn.validation\n"
        "from tabpfn import TabPFNRegressor\n"
    )
    assert _private_tabpfn_imports(ast.parse(code)) == [
        "tabpfn.inference._prepare_model_inputs",
        "tabpfn.regressor._USABLE_OUTPUT_TYPES",
        "tabpfn.memory.should_save_peak_mem",
        "tabpfn.validation",
    ]


def test_the_surface_lists_the_private_tabpfn_modules_this_test_guards():
    from retrofit import tabpfn_surface

    assert set(tabpfn_surface.PRIVATE_MODULES) == TABPFN_PRIVATE_MODULES


def test_no_module_imports_a_private_name_of_another_module():
    """A name two modules share is public: benchmarks/batched.py once imported speed's privates."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    private = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                private += [
                    f"{name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not private, private


def _names_imported_from(module: str) -> dict[str, set[str]]:
    """{importing module: names it imports from ``module``} over the packages' files."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == module:
                found.setdefault(name, set()).update(a.name for a in node.names)
    return found


def test_no_other_package_imports_the_library_s_command_line_internals():
    """The runner, the lab and the trainer use retrofit.command_line, never retrofit.cli."""
    from retrofit import command_line

    graph = _import_graph()
    # The scan sees such an import where it is allowed, so an empty list below means something.
    assert "retrofit.cli.console" in graph["retrofit.command_line"]
    internal = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.split(".")[0] != "retrofit"
        for t in targets
        if t == "retrofit.cli" or t.startswith("retrofit.cli.")
    )
    assert not internal, internal
    unlisted = sorted(
        f"{m}: {name}"
        for m, names in _names_imported_from("retrofit.command_line").items()
        for name in names - set(command_line.__all__)
    )
    assert not unlisted, f"not public in retrofit.command_line.__all__: {unlisted}"


LAYOUT = ROOT / "docs" / "lab" / "layout.md"


def _layout_paths() -> tuple[set[str], set[str]]:
    """The folders and module files docs/lab/layout.md's maps name, as paths from the root.

    In each code block a line that starts with a name ending in ``/`` is a folder from
    the root; an indented line's first name ending in ``/`` or ``.py`` lies in that folder.
    """
    text = LAYOUT.read_text(encoding="utf-8")
    folders: set[str] = set()
    files: set[str] = set()
    for block in re.findall(r"^```\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        folder = ""
        for line in block.splitlines():
            name = (line.split() or [""])[0]
            if not line.startswith(" ") and name.endswith("/"):
                folder = name
                folders.add(name)
            elif line.startswith(" ") and name.endswith("/"):
                folders.add(folder + name)
            elif line.startswith(" ") and name.endswith(".py"):
                files.add(folder + name)
    return folders, files


def test_every_folder_and_module_docs_layout_names_exists():
    folders, files = _layout_paths()
    assert len(files) > 100, "docs/lab/layout.md's file-by-file map was not read"
    # The runs' work folder is local: a clone has it only while a run folder is tracked.
    named = (folders - {f"{RUNS_FOLDER}/"}) | files
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/lab/layout.md names what does not exist: {missing}"


def test_docs_layout_names_every_module_of_the_packages():
    """The map is the present tree: a new module gets its line, a moved one its new folder."""
    _, files = _layout_paths()
    modules = {
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if p.name != "__init__.py"
    }
    assert not sorted(modules - files), f"docs/lab/layout.md lacks {sorted(modules - files)}"


TESTS = ROOT / "tests"
TEST_FOLDERS_BESIDE_THE_PACKAGES = ("helpers", "repo")


def test_the_tests_mirror_the_packages_in_folders_that_are_packages():
    """tests/<package>/ per package, repo/ for the checkout, helpers/ for what tests share."""
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(folders) <= {*PACKAGES, *TEST_FOLDERS_BESIDE_THE_PACKAGES}, folders
    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "a test module outside a folder"
    for test_file in TESTS.rglob("test_*.py"):
        if "tabpfn_suite" in test_file.parts:
            continue
        folder = test_file.parent
        while folder != ROOT:  # a package all the way up: equal file names in two folders work
            assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} lacks __init__"
            folder = folder.parent


# Test files that test a contract across the modules of their folder, not one module:
# the one exception each to the naming rule below, and why.
CROSS_MODULE_TESTS: dict[str, str] = {
    # The padded path end to end (padding, engine, dispatch, front ends), per host family;
    # retrofit/hosts/ docstrings name these files, and retrofit's source keys every stored run.
    "tests/retrofit/batching/test_batched.py": "the padded path on v3 and v2",
    "tests/retrofit/batching/test_batched_hosts.py": "the padded path on v3.5, v2.5, v2.6",
    # What predict, predict-batch and saved directories refuse: three modules' one-line rule.
    "tests/retrofit/cli/test_command_checks.py": "the commands' refusals",
    # The law every host family must meet, each file across all of them.
    "tests/retrofit/hosts/test_absent_rows.py": "row presence on every host class",
    "tests/retrofit/hosts/test_weighted_rows.py": "row weights on every host class",
    "tests/retrofit/hosts/test_host_overrides.py": "the tabpfn code the families override",
    "tests/retrofit/hosts/test_null_row_classifiers.py": "O-Closure of every classifier class",
    "tests/retrofit/hosts/test_published_hosts.py": "every host class at its published size",
    "tests/retrofit/hosts/test_trusted_null_tokens.py": "the trusted blocks of every family",
    "tests/retrofit/hosts/v3/test_null_row.py": "O-Closure of v3 across its block, host, stage",
    # The tabpfn surface's pin: the library's docstrings name this file (see above).
    "tests/retrofit/test_tabpfn_private_api.py": "tabpfn_surface and the overrides it serves",
    # A suite end to end: its datasets, metrics, runs and report.
    "tests/eval/paper/test_classification_suite.py": "the classification suite end to end",
    # The lab's room holds what only the lab's extra or a device runs, not only lab/'s tests.
    "tests/lab/test_executors_live.py": "eval/paper/executors.py on a live Dask cluster",
    "tests/lab/test_device_session.py": ".ci/device-session: a lent GPU's session",
    "tests/lab/tabpfn_suite/test_suite_targets.py": "tabpfn's own tests against ours, their set-up",
}


def _unmirrored_test_files(
    tests: Path = TESTS, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES
) -> list[str]:
    """Test files of a package not named ``test_<module>[_<aspect>].py`` beside its module's folder.

    ``tests/<package>/<folders>/test_<name>.py`` tests ``<package>/<folders>/<module>.py``
    where ``<name>`` is ``<module>`` or starts with ``<module>_``; a subpackage counts as a
    module of its folder while it has no test folder of its own (its ``__init__`` holds
    what is tested), and its tests move into that folder once it has one.
    """
    found = []
    for test_file in sorted(tests.rglob("test_*.py")):
        folders = test_file.relative_to(tests).parts[:-1]
        if not folders or folders[0] not in packages:
            continue
        source = root.joinpath(*folders)
        modules = [p.stem for p in source.glob("*.py") if p.name != "__init__.py"]
        modules += [
            p.name
            for p in (source.iterdir() if source.is_dir() else ())
            if (p / "__init__.py").is_file() and not (test_file.parent / p.name).is_dir()
        ]
        name = test_file.stem.removeprefix("test_")
        if not any(name == m or name.startswith(f"{m}_") for m in modules):
            found.append(test_file.relative_to(root).as_posix())
    return found


def test_every_test_file_is_named_after_the_module_it_tests():
    unmirrored = set(_unmirrored_test_files())
    wrong = sorted(unmirrored - set(CROSS_MODULE_TESTS))
    assert not wrong, f"name each test_<module>[_<aspect>].py beside its module's tests: {wrong}"
    stale = sorted(set(CROSS_MODULE_TESTS) - unmirrored)
    assert not stale, f"CROSS_MODULE_TESTS names files that follow the rule or are gone: {stale}"


def test_the_mirror_rule_catches_each_kind(tmp_path):
    for path in (
        "pkg/sub/mod.py",
        "pkg/sub/__init__.py",
        "pkg/inner/__init__.py",
        "pkg/__init__.py",
        "pkg/tested/__init__.py",
        "tests/pkg/test_tested.py",
        "tests/pkg/tested/test_x.py",
        "tests/pkg/test_inner.py",
        "tests/pkg/sub/test_mod.py",
        "tests/pkg/sub/test_mod_aspect.py",
        "tests/pkg/sub/test_model.py",
        "tests/pkg/sub/test_gone.py",
        "tests/pkg/gone/test_mod.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    found = _unmirrored_test_files(tmp_path / "tests", tmp_path, packages=("pkg",))
    # A subpackage with a test folder of its own (tested/) is tested there, not beside it.
    assert sorted(found) == [
        "tests/pkg/gone/test_mod.py",
        "tests/pkg/sub/test_gone.py",
        "tests/pkg/sub/test_model.py",
        "tests/pkg/test_tested.py",
        "tests/pkg/tested/test_x.py",
    ]


def test_no_test_module_imports_another_test_module():
    """What tests share lives in tests/helpers/ (or conftest.py), never in a test module."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}: {name}"
                for name in names
                if name.split(".")[-1].startswith(("test_", "conftest"))
            ]
    assert not offenders, offenders


def test_help_imports_neither_tabpfn_nor_pandas_nor_sklearn():
    code = (
        "import sys\n"
        "from eval.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "for sub in ('predict', 'patch', 'eval', 'report'):\n"
        "    try:\n        main([sub, '--help'])\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('tabpfn', 'pandas', 'sklearn') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "usage: tabpfn-retrofit" in out
    assert out.strip().splitlines()[-1] == "HEAVY="


def test_a_usage_error_is_one_line_on_stderr_and_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "eval", "report", "--nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "error: unrecognized arguments: --nope" in out.stderr


_ABSOLUTE = re.compile(r"(?<![\w.])(/(?:root|home|tmp|work|Users|private|var/folders)/[\w.-]+)")


def test_no_committed_result_holds_an_absolute_path():
    offenders = []
    for path in sorted((ROOT / "results").rglob("*")):
        if not path.is_file() or path.suffix not in {".json", ".md", ".csv", ".txt", ".jsonl"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found = _ABSOLUTE.search(text)
        if found:
            offenders.append(f"{path.relative_to(ROOT)}: {found.group(1)}")
    assert not offenders, offenders[:10]


def test_git_dirty_paths_keep_every_letter_of_the_first_path(tmp_path, monkeypatch):
    from eval import provenance

    porcelain = " M README.md\n M retrofit/cli.py\n"
    monkeypatch.setattr(provenance, "_git", lambda *a: porcelain)
    assert provenance.git_dirty_paths() == ["README.md", "retrofit/cli.py"]


def test_a_run_row_is_compact_and_names_the_cpu(tmp_path):
    from eval.paper.spec import RunSpec
    from eval.provenance import cpu_identity, provenance_dict

    spec = RunSpec("offline18", "d", 0, "none", None, None, None, 1, "c" * 64, "d" * 64)
    assert spec.cpu == cpu_identity() and "|" in spec.cpu
    changed = RunSpec(**{**spec.as_dict(), "cpu": "Other CPU | AVX2"})
    assert changed.key != spec.key
    assert "git_dirty_paths" not in provenance_dict(include_dirty_paths=False)
    assert len(json.dumps(provenance_dict(include_dirty_paths=False))) < 2000


# The clone carries the library, not the lab: of the training runs' work folder only the
# one running run's folder is tracked, with at most two files of resume state, 40 MiB
# together (docs/lab/training.md).
RUNS_FOLDER = "hostchain"
MAX_RESUME_FILES = 2
MAX_RESUME_BYTES = 40 * 2**20


def _tracked_files() -> list[str]:
    """The paths git tracks in this checkout (a test skips outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an unpacked sdist): nothing is tracked")
    return [p for p in out.decode().split("\0") if p]


def _is_resume_state(path: str) -> bool:
    return path.endswith(".pt")


def _runs_folder_violations(sizes: dict[str, int], allowed: set[str]) -> list[str]:
    """What breaks the runs folder's rule, for tracked paths under it and their sizes.

    Args:
        sizes: Tracked path under ``hostchain/`` -> its size in bytes.
        allowed: The run folders ``.gitignore`` lets git see (``!/hostchain/NAME/``).
    """
    found = []
    folders = {p.split("/")[1] for p in sizes if p.count("/") >= 2}
    found += [f"{p}: not inside a run folder" for p in sorted(sizes) if p.count("/") < 2]
    if len(folders) > 1:
        found.append(f"more than one run folder tracked: {sorted(folders)}")
    found += [f"{RUNS_FOLDER}/{f}/ is not .gitignore's exception" for f in folders - allowed]
    resume = {p: n for p, n in sizes.items() if _is_resume_state(p)}
    if len(resume) > MAX_RESUME_FILES:
        found.append(f"{len(resume)} resume-state files tracked: {sorted(resume)}")
    if sum(resume.values()) > MAX_RESUME_BYTES:
        found.append(f"resume state of {sum(resume.values()) / 2**20:.1f} MiB tracked")
    found += [f"{p}: a checkpoint" for p in sorted(sizes) if p.endswith(".safetensors")]
    return found


def _gitignore_exceptions() -> set[str]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    prefix = f"!/{RUNS_FOLDER}/"
    return {line[len(prefix) :].strip("/") for line in lines if line.startswith(prefix)}


def test_of_the_training_runs_only_one_running_folder_is_tracked_with_bounded_resume_state():
    tracked = [p for p in _tracked_files() if p.startswith(f"{RUNS_FOLDER}/")]
    sizes = {p: (ROOT / p).stat().st_size for p in tracked if (ROOT / p).is_file()}
    allowed = _gitignore_exceptions()
    assert len(allowed) <= 1, f".gitignore lets more than one run folder in: {sorted(allowed)}"
    assert not _runs_folder_violations(sizes, allowed), _runs_folder_violations(sizes, allowed)
    ignore = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"/{RUNS_FOLDER}/*" in ignore  # a new run's files stay local unless let in


def test_the_runs_folder_check_catches_each_kind():
    mib = 2**20
    assert _runs_folder_violations({"hostchain/run/a.state.pt": 30 * mib}, {"run"}) == []
    assert _runs_folder_violations(
        {
            "hostchain/log.jsonl": 10,
            "hostchain/run/a.state.pt": 30 * mib,
            "hostchain/run/b.state.pt": 11 * mib,
            "hostchain/run/c.pt": 1,
            "hostchain/old/x.safetensors": 5,
        },
        {"run"},
    ) == [
        "hostchain/log.jsonl: not inside a run folder",
        "more than one run folder tracked: ['old', 'run']",
        "hostchain/old/ is not .gitignore's exception",
        "3 resume-state files tracked: "
        "['hostchain/run/a.state.pt', 'hostchain/run/b.state.pt', 'hostchain/run/c.pt']",
        "resume state of 41.0 MiB tracked",
        "hostchain/old/x.safetensors: a checkpoint",
    ]


def test_no_console_log_or_checkpoint_outside_the_shipped_models_is_tracked():
    """Logs (``*.out``) stay local; checkpoints are shipped from retrofit/models/embedded/ only."""
    offenders = [
        p
        for p in _tracked_files()
        if p.endswith(".out")
        or (p.endswith(".safetensors") and not p.startswith("retrofit/models/embedded/"))
    ]
    assert not offenders, offenders
