"""Tests of ``hosttraining.regression``: the regressor host's commands."""
