"""Tooling that builds the embedded host (prior, training, ``pretrain``, quality, card).

The host chain of issue 26 (``chain``: Muon + AdamW, WSD, EMA, resumable links;
``in_prior``: the leak-free progress metric; ``diagnose``: why the prior changed)
keeps its state in ``hostchain/`` at the repository root; its README holds the
plan and the resume command.

None of this runs at prediction time: the runtime package ``retrofit.models.embedded``
holds only the shipped checkpoint, its SHA-256, card, loss curve and loader.
Install with the ``hostgen`` extra (``pip install -e ".[hostgen]"``).
"""
