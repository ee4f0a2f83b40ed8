"""Provenance: where and with what a result was produced.

Every result file the project commits carries :func:`provenance_dict`: the
versions of the packages that change numbers, the device, the CPU model and
torch's CPU capability (the BLAS and SIMD paths it selects), the thread count,
the date, the git commit and which code paths differ from it, plus whatever
the caller adds (dtype, seeds, configuration). Files are written through
``retrofit.files`` (atomic, one JSON policy).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from retrofit.versions import package_versions

__all__ = [
    "CODE_PATHS",
    "cpu_capability",
    "cpu_capability_text",
    "cpu_identity",
    "git_dirty_paths",
    "provenance_dict",
]

_REPO_ROOT = Path(__file__).resolve().parents[1]

#: What "dirty code" means for a result: the packages and the project file,
#: not results/ or docs (a run row would otherwise list every result file).
CODE_PATHS: tuple[str, ...] = ("patches", "retrofit", "eval", "hosttraining", "pyproject.toml")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Environment variables that force a code path (and so a summation order).
_CODE_PATH_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "OPENBLAS_CORETYPE")
# CPU flags that decide which vector kernels torch, MKL and oneDNN can use.
_VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    have = set(line.split(":", 1)[1].split())
                    return [flag for flag in _VECTOR_FLAGS if flag in have]
    except OSError:
        pass
    return []


def cpu_capability() -> dict[str, Any]:
    """The CPU code paths behind a float result.

    A BLAS picks its blocking from the problem size and the vector units, so a
    sum over the same terms can round differently from one CPU to the next
    (AVX2, AVX-512, AMX); a result that reports rounding-level differences is
    only comparable with the same code paths.

    Returns:
        ``aten`` (torch's dispatch level, ``torch.backends.cpu.get_cpu_capability()``),
        ``blas`` and ``blas_version`` (from torch's build configuration),
        ``hardware_bf16`` (torch's AVX512-BF16/AMX check, the one tabpfn uses
        for CPU autocast), ``vector_flags`` (the relevant CPU flags present) and
        ``forced_by_env`` (the variables set that force a code path).
    """
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([\w.-]+)", config)
    version = next(
        (line.strip(" -") for line in config.splitlines() if "Math Kernel Library" in line), None
    )
    bf16_check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return {
        "aten": torch.backends.cpu.get_cpu_capability(),
        "blas": blas.group(1) if blas else None,
        "blas_version": version,
        "hardware_bf16": None if bf16_check is None else bool(bf16_check()),
        "vector_flags": _cpu_flags(),
        "forced_by_env": {k: os.environ[k] for k in _CODE_PATH_ENV if k in os.environ},
    }


def cpu_capability_text(prov: dict[str, Any]) -> str:
    """One line for a report header: ``ATen AVX512, BLAS mkl`` plus any forcing variables."""
    cap = prov.get("cpu_capability") or {}
    text = f"ATen {cap.get('aten')}, BLAS {cap.get('blas')}"
    forced = cap.get("forced_by_env") or {}
    if forced:
        text += ", " + ", ".join(f"{k}={v}" for k, v in sorted(forced.items()))
    return text


def cpu_identity() -> str:
    """The CPU model and torch's CPU capability, e.g. ``"Intel(R) Xeon(R) | AVX512"``.

    Part of every run key: the SIMD path torch and its BLAS pick changes the
    last bits of a result, so rows from another CPU are not reused.
    """
    return f"{_cpu_model()} | {torch.backends.cpu.get_cpu_capability()}"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def git_dirty_paths() -> list[str] | None:
    """Code paths (:data:`CODE_PATHS`) that differ from the commit; None outside git."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    if status is None:
        return None
    # Porcelain v1: two status letters, a space, then the path; never strip before slicing.
    return sorted(line[3:] for line in status.splitlines() if len(line) > 3)


def provenance_dict(*, include_dirty_paths: bool = True, **extra: Any) -> dict[str, Any]:
    """Where and with what a result was produced.

    Args:
        include_dirty_paths: Whether to list the dirty code paths (a run row
            leaves them to its session record; ``git_dirty`` is always there).
        **extra: Caller-specific fields (dtype, seeds, configuration); they
            are added under their own names and override nothing silently:
            a key that collides with a standard one raises.

    Returns:
        A JSON-serialisable dict with ``packages`` (tabpfn-retrofit, torch,
        tabpfn, numpy, python), ``device``, ``cpu_model``, ``threads``,
        ``platform``, ``date_utc``, ``git_commit``, ``git_dirty``,
        ``git_dirty_paths`` and the ``extra`` fields.
    """
    commit = _git("rev-parse", "HEAD")
    dirty = git_dirty_paths()
    device = "cpu"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)}), runs here on cpu unless stated"
    prov: dict[str, Any] = {
        "packages": {
            **package_versions(),
            "python": platform.python_version(),
        },
        "device": device,
        "cpu_model": _cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": None if commit is None else commit.strip(),
        "git_dirty": None if dirty is None else bool(dirty),
    }
    if include_dirty_paths:
        # Which code paths differ from the commit: a dirty flag alone hides
        # whether the code that produced a result is among them.
        prov["git_dirty_paths"] = dirty
    clash = set(extra) & set(prov)
    if clash:
        raise ValueError(f"provenance extra keys collide with standard keys: {sorted(clash)}")
    prov.update(extra)
    return prov
