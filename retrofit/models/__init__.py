"""Where a model comes from: loading, weights, checkpoints, saved directories, the embedded host.

:mod:`.loading` (``model_path`` -> a fresh in-memory model), :mod:`.weights`
(tabpfn's published checkpoints), :mod:`.checkpoints` (weights-only reads),
:mod:`.saved` (saved retrofits, adapters that name their base: the format, read
and written by the package itself, and :mod:`.saved.save`, which patches the base
and saves the adapter) and
:mod:`.embedded` (the shipped host).
"""
