"""Benchmarks: OAttention against plain SDPA, memory, fit+predict per mode, ragged batches."""

#: Numbers of ragged datasets ``bench --batched`` times by default.
DEFAULT_BATCHED_SIZES: tuple[int, ...] = (8, 32, 128)
