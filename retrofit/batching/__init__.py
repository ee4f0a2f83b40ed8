"""Ragged batched prediction by null padding: one engine, two front ends, dispatch and bounds.

:mod:`.engine` (fit each dataset, run its stages before ICL alone and its ICL
stage padded: :func:`.engine.run_padded`), :mod:`.regression` (the regressor's
``predict_batched``) and :mod:`.classification` (the classifier's
``predict_proba_batched`` and labels) over it; :mod:`.dispatch` (which path
answers, and the checks of the lists), :mod:`.bounds` (the device bounds),
:mod:`.padding` (zero padding and length buckets, host-agnostic) and
:mod:`.chunks` (cache-sized row chunks before ICL).
"""
