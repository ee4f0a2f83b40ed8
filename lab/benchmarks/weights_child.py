"""The measuring process of ``bench --weights``' fresh-process part: one call of one peer.

Run by :mod:`lab.benchmarks.weights` as ``python -m lab.benchmarks.weights_child
'<json arguments>'``; it prints one JSON line. The process runs the bench's
warm-up on a small table, one untimed call of the peer, then the timed call:
its CPU seconds and the minor page faults the process took during it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from lab.benchmarks.timing import measured_here
from lab.benchmarks.weights import bench_table, bootstrap_peers, estimator_factory, warm_up
from retrofit.leave_out.bootstrap import bootstrap_counts

__all__ = ["main", "measure_one_call"]


def measure_one_call(
    peer: str,
    rows: int,
    test_rows: int,
    replicates: int,
    model_path: str,
    n_estimators: int | str,
    threads: int | None,
    seed: int,
) -> dict[str, Any]:
    """Times one call of ``peer`` (:func:`lab.benchmarks.weights.bootstrap_peers`) here.

    Returns:
        ``peer``, ``s`` (CPU seconds of the process) and ``faults`` (its minor
        page faults during the call).
    """
    if threads:
        torch.set_num_threads(threads)
    make = estimator_factory(model_path, n_estimators, seed)
    warm_up(make, seed)
    X, y, X_test = bench_table(rows, test_rows, seed)
    counts_RN = bootstrap_counts(rows, replicates, seed)
    call = bootstrap_peers(make, X, y, X_test, counts_RN, seed, {})[peer]
    call()  # what one earlier call of its kind leaves in the allocator
    spent, _, faults = measured_here(call)
    return {"peer": peer, "s": spent, "faults": faults}


def main() -> None:
    """JSON arguments (``sys.argv[1]``) in, one JSON line out."""
    print(json.dumps(measure_one_call(**json.loads(sys.argv[1]))))


if __name__ == "__main__":
    main()
