"""Tests of ``hosttraining.priors``: the synthetic priors and the batch stream."""
