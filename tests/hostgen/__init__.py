"""Tests of ``hostgen``: the prior and the pretraining of the embedded host."""
