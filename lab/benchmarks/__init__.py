"""Benchmarks: OAttention against plain SDPA, memory, fit+predict per mode, ragged batches.

``speed`` runs ``python -m lab bench`` from its parts (``attention``,
``memory`` with its ``memory_child`` process, ``estimator``, ``fit_loop``,
``chunks``) over the shared
mechanism (``timing``, ``memory_probe``, ``machine``, ``shapes``) and renders
it (``speed_markdown``); ``batched`` is ``bench --batched``, ``leave_out``
``bench --leave-out`` and ``weights`` ``bench --weights``. The constants here
are read by the command line too, so this module imports nothing heavy.
"""

#: The parts of ``bench``, in the order they run (``lab.benchmarks.speed``).
BENCH_PARTS: tuple[str, ...] = ("attention", "memory", "estimator", "fit_loop", "chunks")

#: Numbers of ragged datasets ``bench --batched`` times by default.
DEFAULT_BATCHED_SIZES: tuple[int, ...] = (8, 32, 128)

TARGETS: dict[str, float] = {
    "large": 1.05,
    "small": 1.25,
    "own_work": 1.05,
    "memory": 1.05,
    "estimator": 1.10,
}
"""Upper bounds on the ratio to the baseline (upper CI bound for timings, except
``own_work``: OAttention's median over the kernel it calls, at every shape)."""
