"""Ragged batched prediction by null padding.

:mod:`.padding` (zero padding and length buckets, host-agnostic) and
:mod:`.predict` (``predict_batched`` over many datasets of different shapes).
"""
