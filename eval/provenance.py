"""Provenance and atomic writing, shared by every report and the runner.

Every result file the project commits carries :func:`provenance_dict`: the
versions of this package, torch, tabpfn and numpy, the device and CPU model,
the CPU code paths torch and its BLAS take (:func:`cpu_capability`: results
at rounding level depend on them), the thread count, the date, the git commit,
plus whatever the caller adds (dtype, seeds, configuration). Files are written
atomically: to a temporary file in the target directory, then ``os.replace``,
so a reader never sees a half-written result and an interrupted run leaves no
partial file.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_capability",
    "cpu_capability_text",
    "provenance_dict",
    "to_jsonable",
    "write_json_atomic",
    "write_text_atomic",
]

_REPO_ROOT = Path(__file__).resolve().parents[1]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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
    import torch  # local: provenance is also used by light tools

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
    return out.stdout.strip()


def provenance_dict(**extra: Any) -> dict[str, Any]:
    """Where and with what a result was produced.

    Args:
        **extra: Caller-specific fields (dtype, seeds, configuration); they
            are added under their own names and override nothing silently:
            a key that collides with a standard one raises.

    Returns:
        A JSON-serialisable dict with ``packages`` (tabpfn-retrofit, torch,
        tabpfn, numpy, python), ``device``, ``cpu_model``,
        ``cpu_capability`` (:func:`cpu_capability`), ``threads``,
        ``platform``, ``date_utc``, ``git_commit``, ``git_dirty``,
        ``git_dirty_paths`` and the ``extra`` fields.
    """
    import torch  # local: provenance is also used by light tools

    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    device = "cpu"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)}), runs here on cpu unless stated"
    prov: dict[str, Any] = {
        "packages": {
            "tabpfn-retrofit": _version("tabpfn-retrofit"),
            "torch": torch.__version__,
            "tabpfn": _version("tabpfn"),
            "numpy": _version("numpy"),
            "python": platform.python_version(),
        },
        "device": device,
        "cpu_model": _cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        # Which tracked files differ from the commit (the working tree may be
        # shared with other work in progress): a dirty flag alone hides whether
        # the code that produced a result is among them.
        "git_dirty_paths": None
        if status is None
        else sorted(line[3:] for line in status.splitlines() if line.strip()),
    }
    clash = set(extra) & set(prov)
    if clash:
        raise ValueError(f"provenance extra keys collide with standard keys: {sorted(clash)}")
    prov.update(extra)
    return prov


def to_jsonable(obj: Any) -> Any:
    """Strict-JSON form of ``obj``.

    Non-finite floats become the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (recorded, never dropped); tuples become lists; numpy and
    torch scalars become Python numbers.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    return obj


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Writes ``text`` to ``path`` atomically (temp file in the same directory, then replace).

    Parent directories are created. Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Writes ``obj`` as strict, indented JSON to ``path`` atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n"
    return write_text_atomic(path, text)
