"""Tests of ``hosttraining.classification``: the classifier host's commands."""
