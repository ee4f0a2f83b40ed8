"""Where the commands write by default, and where the committed results are.

Every command that measures something writes, unless told otherwise, under
``tabpfn-retrofit-results/`` in the working directory (one folder per
command: ``offline18/``, ``exactness/``, ``bench/``...), never into the
checkout's tracked ``results/``: a user's run must not rewrite the committed
numbers (``.ci/regenerate-results`` is their one writer and names its
``results/`` paths explicitly). A folder in the working directory, rather
than a per-user cache, because it is where the user looks for the table the
command just printed, it works the same from a wheel installed anywhere, and
it is ignored by git in the checkout (``.gitignore``).

The committed results are read, never written: :func:`committed_results`
finds them beside the packages when they run from a checkout (an editable
install or ``PYTHONPATH``), else in the working directory when that is a
checkout of this project (README's first command installs the wheel and runs
the main job from the checkout); anywhere else there are none, and nothing
is compared or reused.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_OUTPUT_ROOT", "committed_results", "default_output"]

DEFAULT_OUTPUT_ROOT = Path("tabpfn-retrofit-results")
"""The untracked folder, relative to the working directory, of every default output."""

# eval/ sits beside results/ and pyproject.toml in a checkout; a wheel ships
# neither, and site-packages may hold another distribution's "results" folder.
_ROOT = Path(__file__).resolve().parent.parent
_CHECKOUT_RESULTS: Path | None = _ROOT / "results" if (_ROOT / "pyproject.toml").is_file() else None


def default_output(name: str, *, quick: bool = False) -> Path:
    """The default output folder of a command (``tabpfn-retrofit-results/<name>``).

    Args:
        name: The command's folder name.
        quick: A ``--quick`` smoke run: ``<name>/quick``, so that a smoke run
            never overwrites the full run's files.
    """
    return DEFAULT_OUTPUT_ROOT / name / "quick" if quick else DEFAULT_OUTPUT_ROOT / name


def _is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is a checkout of this project (its pyproject names it)."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "tabpfn-retrofit"' in text


def committed_results(name: str) -> Path | None:
    """The checkout's committed ``results/<name>``, or ``None`` outside a checkout.

    The checkout the packages run from, else the working directory when it is one.
    """
    root = _CHECKOUT_RESULTS
    if root is None and _is_checkout(Path.cwd()):
        root = Path.cwd() / "results"
    if root is None:
        return None
    path = root / name
    return path if path.is_dir() else None
