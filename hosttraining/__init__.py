"""Tooling that trains the embedded hosts: ``hosttraining``, named for what it does.

The library ships pretrained hosts under ``retrofit.models.embedded``; this package
trains them (host training, not the user's training of a retrofitted estimator,
which the frozen hosts never need). Its rooms, floor by floor from the bottom
(``tests/repo/test_layout.py`` pins them):

- ``priors/``: the synthetic priors the hosts learn from (regression tasks, their
  class views, the TabICL prior adapter) and the reproducible batch stream.
- ``common/``: what both tasks share: the training loop and host model, the
  in-prior suite, optimisers, weight averaging, run files, the loss curve, errors.
- ``regression/`` and ``classification/``: each task's command line (train,
  quality, card, ...); neither imports the other.

None of this runs at prediction time. It is not in the wheel: run it from a
checkout with the ``train`` extra (``pip install -e ".[train]"``); each command
is ``python -m hosttraining.<task>.<module>``, and docs/lab/training.md is the
ledger of the runs made with it.
"""
