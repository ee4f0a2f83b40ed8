"""Where a model comes from: loading, weights, checkpoints, saved directories, the embedded host.

:mod:`.loading` (``model_path`` -> a fresh in-memory model), :mod:`.weights`
(tabpfn's published checkpoints), :mod:`.checkpoints` (weights-only reads),
:mod:`.saved` (saved directories: the format, read and written by the package
itself, and :mod:`.saved.save`, which patches a host and saves it) and
:mod:`.embedded` (the shipped host).
"""
