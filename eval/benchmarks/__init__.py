"""Benchmarks: OAttention against plain SDPA, memory, and fit+predict per mode."""
