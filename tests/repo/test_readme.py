"""README's and docs/'s code runs, their links resolve, and the two set-up commands stay true.

Every ```python block of README.md, and of each page of docs/, is executed, in
order and in one namespace per page (a later block may use an earlier one's
names), in a temporary working directory, offline. The blocks choose float32
themselves, as README tells users to for reproducible numbers; a block too
slow for this test is made smaller in its page, not special-cased here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.rooms import LAB_ROOM, readme_room

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
# The shipped hosts' model cards: their links (to docs/lab/embedded/) are checked too.
CARDS = sorted((ROOT / "retrofit" / "models" / "embedded").glob("*.md"))
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
README_MAX_LINES = 300


def _blocks(language: str, text: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _section(title: str, page: Path = README) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_python_block_in_readme_runs_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TABPFN_NO_BROWSER", "1")
    monkeypatch.setenv("TABPFN_MODEL_CACHE_DIR", str(tmp_path / "model_cache"))
    blocks = _blocks("python", README.read_text(encoding="utf-8"))
    assert len(blocks) >= 3  # the drop-in estimator, patch/unpatch, the ragged batch
    namespace: dict = {"__name__": "readme"}
    for number, code in enumerate(blocks, start=1):
        exec(compile(code, f"README.md, python block {number}", "exec"), namespace)
    # The ragged-batch block answered each of its datasets.
    assert [p.shape for p in namespace["preds"]] == [(len(x),) for x in namespace["X_test_list"]]


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p != README], ids=lambda p: p.relative_to(DOCS).as_posix()
)
def test_every_python_block_of_a_docs_page_runs_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TABPFN_NO_BROWSER", "1")
    monkeypatch.setenv("TABPFN_MODEL_CACHE_DIR", str(tmp_path / "model_cache"))
    namespace: dict = {"__name__": "docs"}
    for number, code in enumerate(_blocks("python", page.read_text(encoding="utf-8")), start=1):
        name = page.relative_to(ROOT).as_posix()
        exec(compile(code, f"{name}, python block {number}", "exec"), namespace)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    text = re.sub(r"`[^`]*`", "", text)  # code spans hold no links
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_of_readme_and_docs_resolves():
    assert CARDS, "the model cards were not found"
    broken = []
    for page in [*PAGES, *CARDS]:
        for link in _links(page):
            if re.match(r"[a-z]+:", link):  # https:, mailto: (not checked offline)
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            name = f"{page.relative_to(ROOT)}: {link}"
            if not target.exists() or ROOT not in (target, *target.parents):
                broken.append(f"{name} (no such file in the repository)")
            elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
                broken.append(f"{name} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_relative_link_of_readme_and_docs_names_a_tracked_file():
    """A fresh clone has what a page links: an ignored local file (a training run's) is no link."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an unpacked sdist): nothing is tracked")
    tracked = {ROOT / p for p in out.decode().split("\0") if p}
    folders = {folder for path in tracked for folder in path.parents}
    untracked = []
    for page in [*PAGES, *CARDS]:
        for link in _links(page):
            path = link.partition("#")[0]
            if re.match(r"[a-z]+:", link) or not path:
                continue
            target = Path(os.path.normpath(page.parent / path))
            if target.exists() and target not in tracked and target not in folders:
                untracked.append(f"{page.relative_to(ROOT)}: {link}")
    assert not untracked, "links to files git does not track:\n" + "\n".join(untracked)


def test_readme_is_a_users_page_of_at_most_300_lines():
    """Detail lives in docs/; README keeps what a user needs first (its slack is for them)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_readme_set_up_clones_shallow_installs_the_package_alone_and_tests_as_ci_run_does():
    section = _section("Set-up on a fresh machine")
    clone, install, tests = _blocks("bash", section)[:3]
    # The tree of main alone: the history holds the lab's old files (docs/lab/history.md).
    assert clone.startswith("git clone --depth 1 ") and "docs/lab/history.md" in section
    # The main job: torch first, the package with the runner's extra (not the test
    # extra), eval, report; the commands install from the configured registries only
    # (CI reaches no other index), and the text tells a user elsewhere how to get the
    # CPU build.
    assert install.index("pip install torch==") < install.index('pip install ".[eval]" ')
    assert "[test]" not in install and CPU_INDEX not in install and CPU_INDEX in section
    assert "tabpfn-retrofit eval " in install and "tabpfn-retrofit report " in install
    # The tests: exactly .ci/run's first command.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    first = next(line for line in ci if line.startswith("python3 -m venv"))
    assert tests.strip() == first
    assert CPU_INDEX not in first and '".[test]"' in first


def test_readme_s_tests_are_the_library_s_and_the_runner_s_and_ci_runs_every_test():
    """A bare pytest collects README's room but its slow tier; every test folder is in one room.

    CI runs README's command, then the slow tier of README's room, then the lab's
    room, then every test of both rooms, the slow tier included, on AVX2.
    """
    readme = readme_room()
    assert set(readme) == {"tests/patches", "tests/retrofit", "tests/eval", "tests/repo"}
    with_tests = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").iterdir()
        if p.is_dir() and any(p.rglob("test_*.py"))
    }
    assert with_tests == {*readme, *LAB_ROOM}, with_tests
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(ci) if line.startswith("python3 -m venv"))
    later = [line for line in ci[first + 1 :] if line and not line.startswith("#")]
    assert "-m 'not slow'" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert later[0] == "python -m pytest -q --durations=25 -m slow"  # testpaths: README's room
    assert later[1] == 'pip install -q -e ".[lab]"'
    assert later[2].startswith("python -m pytest ") and later[2].endswith(" ".join(LAB_ROOM))
    avx2 = next(line for line in later if line.startswith("ATEN_CPU_CAPABILITY=avx2 "))
    assert avx2.endswith(' python -m pytest -q --durations=25 -m "slow or not slow" tests')


def test_the_gpu_section_states_the_bounds_the_settings_hold():
    """docs/gpu.md's device bounds are retrofit/batching/bounds.py's; none was measured on a GPU."""
    from retrofit.batching import bounds

    section = " ".join(_section("On a GPU", DOCS / "gpu.md").split())
    assert 'if torch.cuda.is_available() else "cpu"' in section  # its block runs on a CPU
    assert "fp16 autocast on CUDA" in section and "inference_precision=torch.float32" in section
    assert "No GPU has been lent to this project yet" in section
    accelerator = bounds.default_max_padded_fraction("cuda")
    cpu = bounds.default_max_padded_fraction("cpu")
    assert f"pad up to {accelerator:.0%} of its rows".replace("%", " %") in section
    assert f"a CPU: {cpu:.0%}".replace("%", " %") in section
    assert bounds.default_max_bucket_bytes("cuda") is None and "unbounded" in section
    assert f"a CPU: {bounds.default_max_bucket_bytes('cpu') // 2**20} MiB" in section
    assert f"a CPU: {bounds.default_chunk_cells('cpu'):,}" in section
    assert bounds.default_chunk_cells("cuda") is None and "keep tabpfn's chunk size" in section
