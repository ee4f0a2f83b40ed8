"""What every report's provenance holds: the checks the report tests share."""

from __future__ import annotations

from typing import Any

PROVENANCE_KEYS = {
    "packages",
    "device",
    "cpu_model",
    "cpu_capability",
    "threads",
    "date_utc",
    "git_commit",
    "seeds",
    "dtypes",
}
PACKAGES = {"tabpfn-retrofit", "torch", "tabpfn", "numpy"}


def check_provenance(prov: dict[str, Any]) -> None:
    """Assert that ``prov`` names the packages, the machine, its CPU code paths and the seeds."""
    assert PROVENANCE_KEYS <= set(prov)
    assert PACKAGES <= set(prov["packages"])
    assert prov["packages"]["torch"] and prov["packages"]["numpy"]
    assert prov["threads"] >= 1
    cap = prov["cpu_capability"]
    assert cap["aten"] and isinstance(cap["vector_flags"], list)
    assert isinstance(cap["forced_by_env"], dict)
