"""The two rooms of tests/: README's (pytest's testpaths) and the lab's (the rest).

README's test command, a bare ``pytest``, collects the folders ``pyproject.toml``
names in ``testpaths``: the library's and the paper runner's tests. The lab's
room, :data:`LAB_ROOM`, runs when named (``.ci/run`` names it after installing
the ``lab`` extra).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["LAB_ROOM", "ROOT", "readme_room"]

#: The repository root.
ROOT = Path(__file__).resolve().parents[2]
#: The lab's room: the lab's tests (with what only its extra or a device runs) and the trainer's.
LAB_ROOM: tuple[str, ...] = ("tests/lab", "tests/hosttraining")


def readme_room(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, ...]:
    """The folders of ``testpaths`` in ``pyproject``'s pytest options (read without tomllib)."""
    found = re.search(r"^testpaths = \[([^\]]*)\]", pyproject.read_text(), flags=re.MULTILINE)
    assert found, f"{pyproject} sets no testpaths"
    return tuple(re.findall(r'"([^"]+)"', found.group(1)))
