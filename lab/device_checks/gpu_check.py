"""The GPU check: OAttention's exactness, a null-row proof and its speed on CUDA.

Usage (from a checkout)::

    python -m lab gpu-check OUT_DIR [--device cuda|cpu] [--quick] [--model MODEL]

One call on a CUDA machine (about 5 minutes) writes ``gpu_check.json`` and
``gpu_check.md`` to ``OUT_DIR``:

1. ``exactness``: :func:`patches.oattention` in fp32, bf16 and fp16 (and
   fp64, which takes the portable sink route) against a direct float64
   evaluation of the formula on the same (rounded) inputs, and against a
   direct evaluation in the input dtype; the contracts (null receivers exactly
   0, empty support 0 and finite, null-source insertion within rounding). The
   paper's claim for GPU fp32 is L-inf <= 8.94e-8; it is reported, not assumed.
2. ``host``: the patched host (``--model``; ``embedded`` offline) on the device in fp32
   and forced bf16: a zero row inserted at ICL block 0 by hooks must leave the
   old rows' final carriers unchanged (within the rounding of a different
   shape) and its own final carrier exactly 0; the unpatched host is the
   control.
3. ``bench``: SDPA (default dispatch, and forced memory-efficient, the kernel
   OAttention uses on CUDA) vs OAttention, interleaved, fp32 and bf16; peak
   device memory of one call.
4. ``batched``: ragged ``predict_batched`` (32 datasets of 50-2,000 train rows)
   against per-dataset ``predict`` (log-probability gap), and its time against
   a loop of fit/predict, interleaved.

Each part is a module of :mod:`lab.device_checks`; this command runs them and
writes the report. Without CUDA it exits with status 2 and one line on stderr,
writing nothing. ``--device cpu`` is a dry run of the same code on CPU
(``--quick`` shrinks every size), so the check is tested where no GPU is.
"""

from __future__ import annotations

import argparse
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from eval.provenance import provenance_dict
from lab.device_checks import PARTS
from lab.device_checks.attention_speed import device_bench
from lab.device_checks.exactness import exactness
from lab.device_checks.null_row import host_null_row
from lab.device_checks.ragged_batches import ragged_batches
from lab.device_checks.report_markdown import render_markdown
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.errors import CommandError
from retrofit.files import write_json_atomic, write_text_atomic
from retrofit.models.aliases import AUTO

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the GPU check; returns the exit status (2: no CUDA or bad usage)."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m lab gpu-check",
        description="OAttention exactness, null-row proof and speed on CUDA.",
    )
    parser.add_argument("out_dir", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    parser.add_argument("--quick", action="store_true", help="small sizes (dry runs)")
    parser.add_argument(
        "--model",
        default=AUTO,
        help="host checkpoint or name (default auto, tabpfn's own default; 'embedded' is the "
        "small stand-in shipped with this package, offline)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CommandError(
            f"CUDA is not available (torch {torch.__version__}, built for "
            f"CUDA {torch.version.cuda}); run it on a CUDA machine, or pass --device cpu "
            "for a dry run"
        )

    def progress(line: str) -> None:
        print(f"[{time.time() - t0:6.1f}s] {line}", flush=True)

    t0 = time.time()
    torch.manual_seed(0)
    if args.device.startswith("cuda"):
        # Direct comparisons in fp32 must not use TF32 matmuls.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    report: dict[str, Any] = {
        "quick": args.quick,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else "cpu (dry run)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    runners = {
        "exactness": lambda: exactness(args.device, args.quick, progress),
        "host": lambda: host_null_row(args.device, args.quick, args.model, progress),
        "bench": lambda: device_bench(args.device, args.quick, args.model, progress),
        "batched": lambda: ragged_batches(args.device, args.quick, args.model, progress),
    }
    for part in args.parts:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report[part] = runners[part]()
            report[part]["warnings"] = sorted({str(w.message)[:300] for w in caught})
        except Exception:  # record and go on: one failing part must not lose the others
            report[part] = {"error": traceback.format_exc(limit=8)[-4000:]}
            progress(f"{part}: FAILED\n{report[part]['error']}")
    report["wall_s"] = time.time() - t0
    report["provenance"] = provenance_dict(check="python -m lab gpu-check", parts=list(args.parts))
    # Rendered before either file is written: a report that cannot be rendered
    # leaves no gpu_check.json without its gpu_check.md.
    markdown = render_markdown(report)
    out = Path(args.out_dir)
    write_json_atomic(out / "gpu_check.json", report)
    write_text_atomic(out / "gpu_check.md", markdown)
    print(f"wrote {out}/gpu_check.json and gpu_check.md")
    failed = [p for p in args.parts if "error" in report[p]]
    return 1 if failed else 0
