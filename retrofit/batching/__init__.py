"""Ragged batched prediction by null padding.

:mod:`.padding` (zero padding and length buckets, host-agnostic),
:mod:`.predict` (the shared padded path, :func:`.predict.run_padded`, and the
regressor's ``predict_batched``) and :mod:`.classify` (the classifier's
``predict_proba_batched`` and labels over the same path).
"""
