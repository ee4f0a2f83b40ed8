"""Tooling that builds the embedded host (prior, training, ``pretrain``, quality, card).

None of this runs at prediction time: the runtime package ``retrofit.models.embedded``
holds only the shipped checkpoint, its SHA-256, card, loss curve and loader.
Install with the ``hostgen`` extra (``pip install -e ".[hostgen]"``).
"""
