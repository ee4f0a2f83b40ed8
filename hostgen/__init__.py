"""Tooling that builds the embedded host (prior, training, ``pretrain``, quality, card).

The host chain of issue 26 (``chain``: Muon + AdamW, WSD, EMA, resumable links;
``in_prior``: the leak-free progress metric; ``diagnose``: why the prior changed)
keeps its state in ``hostchain/`` at the repository root; its README holds the
plan and the resume command.

None of this runs at prediction time: the runtime package ``retrofit.models.embedded``
holds only the shipped checkpoint, its SHA-256, card, loss curve and loader.
It is not in the wheel: run it from a checkout with the ``train`` extra
(``pip install -e ".[train]"``).
"""
