"""The GPU check's parts (``lab/device_checks/gpu_check.py`` runs them and writes the report).

``exactness`` (operator exactness and contracts per dtype), ``null_row`` (the
patched host's null-row proof), ``attention_speed`` (SDPA vs OAttention, time
and peak device memory), ``ragged_batches`` (ragged ``predict_batched``
against per-dataset ``predict``), and ``report_markdown`` (``gpu_check.md``).
"""

#: The parts of the check, in the order they run.
PARTS = ("exactness", "host", "bench", "batched")
