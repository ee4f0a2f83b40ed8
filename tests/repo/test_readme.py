"""README's code runs, and its two set-up commands stay true.

Every ```python block of README.md is executed, in order and in one
namespace (a later block may use an earlier one's names), in a temporary
working directory, offline. The blocks choose float32 themselves, as README
tells users to for reproducible numbers; a block too slow for this test is
made smaller in README, not special-cased here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _blocks(language: str, text: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
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


def test_readme_set_up_installs_the_package_alone_and_tests_as_ci_run_does():
    section = _section("Set-up on a fresh machine")
    install, tests = _blocks("bash", section)[:2]
    # The main job: torch first, the package without the test extra, eval, report; the
    # commands install from the configured registries only (CI reaches no other index),
    # and the text tells a user elsewhere how to get the CPU build.
    assert install.index("pip install torch==") < install.index("pip install . ")
    assert "[test]" not in install and CPU_INDEX not in install and CPU_INDEX in section
    assert "tabpfn-retrofit eval " in install and "tabpfn-retrofit report " in install
    # The tests: exactly .ci/run's first command.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    first = next(line for line in ci if line.startswith("python3 -m venv"))
    assert tests.strip() == first
    assert CPU_INDEX not in first and '".[test]"' in first


def test_the_gpu_section_states_the_bounds_the_settings_hold():
    """README's device bounds are retrofit/settings.py's, and it says none was measured on a GPU."""
    from retrofit import settings

    section = " ".join(_section("On a GPU").split())
    assert 'if torch.cuda.is_available() else "cpu"' in section  # its block runs on a CPU
    assert "fp16 autocast on CUDA" in section and "inference_precision=torch.float32" in section
    assert "No GPU has been lent to this project yet" in section
    accelerator = settings.default_max_padded_fraction("cuda")
    cpu = settings.default_max_padded_fraction("cpu")
    assert f"pad up to {accelerator:.0%} of its rows".replace("%", " %") in section
    assert f"a CPU: {cpu:.0%}".replace("%", " %") in section
    assert settings.default_max_bucket_bytes("cuda") is None and "unbounded" in section
    assert f"a CPU: {settings.default_max_bucket_bytes('cpu') // 2**20} MiB" in section
    assert f"a CPU: {settings.default_chunk_cells('cpu'):,}" in section
    assert settings.default_chunk_cells("cuda") is None and "keep tabpfn's chunk size" in section
