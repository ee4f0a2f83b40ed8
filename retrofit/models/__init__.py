"""Where a model comes from: loading, weights, checkpoints, saved directories, the embedded host.

:mod:`.loading` (``model_path`` -> a fresh in-memory model), :mod:`.weights`
(tabpfn's published checkpoints), :mod:`.checkpoints` (weights-only reads),
:mod:`.saved` (the saved-model format), :mod:`.saving` (patch and save) and
:mod:`.embedded` (the shipped host).
"""
