"""The history is kept, not rewritten: every commit a committed result names is in it.

A result's provenance records the commit that produced it (``git_commit``);
docs/lab/history.md says why the history that holds the lab's old files stays as
it is and how a user clones less of it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ("results", "retrofit/models/embedded")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def _commits_named(value: Any) -> Iterator[str]:
    """Every ``git_commit`` value at any depth of a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "git_commit" and isinstance(item, str):
                yield item
            else:
                yield from _commits_named(item)
    elif isinstance(value, list):
        for item in value:
            yield from _commits_named(item)


def _named_commits() -> dict[str, str]:
    """Commit -> the first committed record (JSON or JSON lines) that names it."""
    named: dict[str, str] = {}
    for folder in RECORDS:
        for path in sorted((ROOT / folder).rglob("*.json*")):
            lines = path.read_text(encoding="utf-8").splitlines()
            documents = lines if path.suffix == ".jsonl" else ["\n".join(lines)]
            for document in filter(str.strip, documents):
                for commit in _commits_named(json.loads(document)):
                    named.setdefault(commit, str(path.relative_to(ROOT)))
    return named


def test_every_commit_a_committed_result_names_is_in_the_history():
    shallow = _git("rev-parse", "--is-shallow-repository")
    if shallow.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): no history")
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone holds one commit (docs/lab/history.md: git fetch --unshallow)")
    named = _named_commits()
    assert named, "no committed result records its git_commit"
    missing = [
        f"{commit} (named by {path})"
        for commit, path in sorted(named.items())
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0
    ]
    assert not missing, "results name commits the history lacks:\n" + "\n".join(missing)
