"""``python -m eval.paper.datasets``: print, write or check the suite manifests.

python -m eval.paper.datasets --print-manifest offline18   # show
python -m eval.paper.datasets --write-manifests            # regenerate both files
python -m eval.paper.datasets --check                      # verify every offline copy
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from eval.paper.datasets.catalog import OFFLINE_SUITE_OF
from eval.paper.datasets.loading import load_dataset
from eval.paper.datasets.manifests import build_manifest
from eval.paper.datasets.suites import SUITES, SUITES_DIR
from retrofit.command_line import OneLineArgumentParser, run_main

__all__ = ["main"]

_DESCRIPTION = "Offline and OpenML regression suites for the evaluation."
"""The first line of the package's docstring, as ``--help`` has always shown it."""


def _dump(manifest: dict[str, Any]) -> str:
    """A manifest as the suite files hold it: indented JSON, one final newline."""
    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the suite manifests.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        Process exit status.
    """
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="python -m eval.paper.datasets", description=_DESCRIPTION)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--print-manifest",
        metavar="SUITE",
        nargs="?",
        const="offline18",
        choices=SUITES,
        help="print the manifest of SUITE built from the data (default offline18)",
    )
    group.add_argument(
        "--write-manifests",
        action="store_true",
        help=f"regenerate {', '.join(f'suites/{s}.json' for s in SUITES)}",
    )
    group.add_argument(
        "--check",
        action="store_true",
        help="load every offline dataset and verify it against its suite file",
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.print_manifest:
        sys.stdout.write(_dump(build_manifest(args.print_manifest)))
    elif args.write_manifests:
        SUITES_DIR.mkdir(parents=True, exist_ok=True)
        for suite in SUITES:
            path = SUITES_DIR / f"{suite}.json"
            path.write_text(_dump(build_manifest(suite)), encoding="utf-8")
            print(f"wrote {path}")
    else:
        for name in OFFLINE_SUITE_OF:
            ds = load_dataset(name)
            print(f"{name:13s} {ds.shape[0]:5d} x {ds.shape[1]:2d}  {ds.sha256}  ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
